"""`tether tools`: every tool with its capabilities, approval flag and source's trust; with
the flags that choose tools (``--tools``, ``--no-tools``, ``-T``, ``--local``), the tools a
run with them would offer."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from tether.cli.common import EXIT_OK, error, make_agent


def add_cli(sub: Any) -> None:
    from tether.cli.common import add_local_flag
    from tether.cli.selection import add_tool_flags

    tools = sub.add_parser("tools", help="list tools with capabilities and approval flags")
    tools.add_argument("--json", action="store_true")
    add_local_flag(tools)  # the tools a --local run offers, and what else --local changes
    add_tool_flags(tools)  # the tools --tools, --no-tools and -T would offer
    tools.set_defaults(handler=cmd_tools)


def cmd_tools(args: argparse.Namespace) -> int:
    return asyncio.run(_tools(args))


async def _tools(args: argparse.Namespace) -> int:
    from rich.table import Table

    if args.local:
        from tether.cli.local import local_changes, local_layer
        from tether.cli.render import stderr_console
        from tether.display import shown

        # What --local would change, said without starting the server it would use.
        args.local_config = local_layer(args)
        for line in local_changes(args, args.local_config):
            stderr_console().print(shown((line, "dim")))
    from tether.cli.mcp_lists import servers_of

    agent, _ = make_agent(args, approver=None)
    async with agent:
        tools = list(agent.tools.values())
        clashes = agent.tool_clashes()
        # Each MCP server's protocol revision, as agreed when it started.
        revisions = {s.name: s.protocol_version for s in servers_of(agent.toolsets)}
        # Each remote agent's card, read now (the remote's own words, shown escaped).
        cards = await remote_cards(agent.subagents)
    # An MCP server that did not start, a skipped tool, a tool another one's name hides.
    for notice in [*agent.start_notices, *clashes]:
        error(notice.message)
    rows: list[dict[str, Any]] = [{
        "name": t.name, "title": t.spec.display_name, "source": t.origin,
        "capabilities": t.capabilities.flags(), "needs_approval": t.needs_approval,
        "read_only": t.read_only,
        # An MCP tool's server, and whether its own text (descriptions, titles) is trusted.
        "server": t.server if t.origin == "mcp" else None,
        "server_trusted": (not t.spec_from_outside) if t.origin == "mcp" else None,
        "server_protocol": revisions.get(t.server or "") if t.origin == "mcp" else None,
        # A remote agent's card (A2A): what it says it is, or why it could not be read.
        "card": cards.get(t.name) if t.origin == "a2a" else None,
    } for t in tools]
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(rows, indent=2))
        return EXIT_OK
    from tether.cli.render import print_table
    from tether.display import inline, plain

    table = Table(title="tools")
    for col in ("name", "title", "source", "capabilities", "approval", "read-only"):
        table.add_column(col, overflow="fold")
    for r in rows:
        source = r["source"] if r["server"] is None else \
            f"mcp {r['server']} ({'trusted' if r['server_trusted'] else 'untrusted'}, " \
            f"protocol {r['server_protocol']})"
        if r["card"] is not None:
            source = f"a2a: {card_line(r['card'])}"
        # Names and titles are what servers wrote: cells hold them as plain text.
        table.add_row(plain(inline(r["name"])), plain(inline(r["title"])), plain(source),
                      plain(", ".join(r["capabilities"]) or "-"),
                      "yes" if r["needs_approval"] else "no", "yes" if r["read_only"] else "no")
    print_table(table)
    return EXIT_OK


async def remote_cards(subagents: list[Any]) -> dict[str, dict[str, Any]]:
    """The agent card of each remote agent (A2A) among ``subagents``, by tool name:
    ``{"card": {...}}``, or ``{"error": "..."}`` when it cannot be read."""
    from tether.a2a.remote import A2AAgent
    from tether.errors import TetherError

    out: dict[str, dict[str, Any]] = {}
    for remote in subagents:
        if not isinstance(remote, A2AAgent):
            continue
        from tether.a2a.wire import card_of

        try:
            out[remote.name] = {"url": remote.url, "card": await card_of(remote)}
        except TetherError as e:
            out[remote.name] = {"url": remote.url, "error": str(e)}
    return out


def card_line(entry: dict[str, Any]) -> str:
    from tether.a2a.remote import card_summary
    from tether.display import inline

    if "card" in entry:
        return f"{card_summary(entry['card'])} at {inline(entry['url'])}"
    return f"card not read ({inline(entry['error'])}) at {inline(entry['url'])}"
