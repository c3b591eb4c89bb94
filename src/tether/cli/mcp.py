"""`tether mcp`: what a person does with MCP servers themselves (what a server offers
beside its tools: ``cli/mcp_lists.py``; signing in to a remote one and out again:
``cli/mcp_login.py``)."""

from __future__ import annotations

from typing import Any


def add_cli(sub: Any) -> None:
    from tether.cli.actions import add_actions
    from tether.cli.mcp_lists import add_list_commands
    from tether.cli.mcp_login import add_login_commands

    mcp = sub.add_parser("mcp", help="MCP servers: their resources and prompts; sign in and out")
    group = add_actions(mcp, "mcp_command")
    add_list_commands(group)
    add_login_commands(group)
