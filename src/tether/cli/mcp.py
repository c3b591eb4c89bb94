"""`tether mcp`: what a person does with MCP servers themselves (what a server offers
beside its tools: ``cli/mcp_lists.py``)."""

from __future__ import annotations

from typing import Any


def add_cli(sub: Any) -> None:
    from tether.cli.mcp_lists import add_list_commands

    mcp = sub.add_parser("mcp", help="MCP servers: their resources and prompts")
    group = mcp.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    add_list_commands(group)
