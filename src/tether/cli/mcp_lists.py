"""`tether mcp resources|prompts`: what the configured MCP servers offer a person beside
their tools. ``tether mcp resources SERVER`` lists a server's resources and resource
templates (which the model reaches through the ``read_resource`` and ``resource_<name>``
tools), ``tether mcp prompts SERVER`` its prompts (which a person inserts: ``tether run
--mcp-prompt``, ``/prompt`` in ``tether chat``). Everything a server wrote is printed
literally."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

from tether.cli.common import EXIT_ERROR, EXIT_OK, error, overrides


def add_list_commands(what: Any) -> None:
    """``resources`` and ``prompts`` in the ``tether mcp`` group."""
    resources = what.add_parser("resources", help="list a server's resources and templates")
    resources.add_argument("server", help="the server's name ([[mcp]] name)")
    resources.add_argument("--json", action="store_true")
    resources.set_defaults(handler=cmd_resources)
    prompts = what.add_parser("prompts", help="list a server's prompts and their arguments")
    prompts.add_argument("server", help="the server's name ([[mcp]] name)")
    prompts.add_argument("--json", action="store_true")
    prompts.set_defaults(handler=cmd_prompts)


def servers_of(toolsets: Iterable[Any]) -> Iterator[Any]:
    """The MCP servers among ``toolsets`` (inside wrappers too)."""
    from tether.mcp.server import McpServer

    for toolset in toolsets:
        while not isinstance(toolset, McpServer) and hasattr(toolset, "inner"):
            toolset = toolset.inner
        if isinstance(toolset, McpServer):
            yield toolset


async def fetch_prompt(agent: Any, invocation: Any, taint: Any = None,
                       emit: Any = None) -> tuple[Any, ...]:
    """The parts of a user's turn a server's prompt makes (``PromptInvocation``), from the
    started agent's server of that name; a ``ToolError`` saying why not.

    A request for input the server makes while it fills the prompt reaches the person as
    one during a tool call does: through the agent's approver, under the same rule for
    sends (``taint`` is the conversation's, the prompt is for), each outcome a notice to
    ``emit``."""
    from tether.bounds import Spend
    from tether.errors import ToolError
    from tether.tools.tool import RunScope, ToolContext
    from tether.trust import CLEAN

    servers = {s.name: s for s in servers_of(agent.toolsets)}
    server = servers.get(invocation.server)
    if server is None:
        from tether.display import inline

        raise ToolError(f"no MCP server {inline(invocation.server)!r} is configured "
                        f"(servers: {', '.join(servers) or 'none'})")
    settings = agent.settings
    context = ToolContext("prompt", f"{invocation.server}:{invocation.name}",
                          taint if taint is not None else CLEAN, settings.workspace,
                          settings.security, emit,
                          run=RunScope(agent, ("prompt",), None, Spend(settings)))
    prompt = await server.get_prompt(invocation.name, invocation.arguments, context)
    return tuple(prompt.parts)


def cmd_resources(args: argparse.Namespace) -> int:
    return asyncio.run(_listing(args, _resource_rows))


def cmd_prompts(args: argparse.Namespace) -> int:
    return asyncio.run(_listing(args, _prompt_rows))


async def _listing(args: argparse.Namespace, rows_of: Any) -> int:
    from tether.config.build import servers_from_config
    from tether.config.layers import load_config
    from tether.display import inline

    cfg = load_config(args.workspace, overrides(args))
    servers = [s for s in servers_from_config(cfg.mcp, cfg.sandbox, cfg.own_files)
               if s.name == args.server]
    if not servers:
        names = ", ".join(s.name for s in cfg.mcp if not s.disabled) or "none"
        error(f"no MCP server {inline(args.server)!r} is configured (servers: {names})")
        return EXIT_ERROR
    server = servers[0]
    try:
        await server.start()
        if server.error is not None:
            error(f"MCP server {server.name!r} did not start: {server.error}")
            return EXIT_ERROR
        kind, rows = rows_of(server)
    finally:
        await server.aclose()
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(rows, indent=2))
        return EXIT_OK
    columns = ("uri", "kind", "name", "title", "description", "mime_type") \
        if kind == "resources" else ("name", "title", "description", "arguments")
    trust = "trusted" if server.trusted else "untrusted"
    _print_table(columns, f"{kind} of {server.name} ({trust}, "
                          f"protocol {server.protocol_version})", rows)
    return EXIT_OK


def _resource_rows(server: Any) -> tuple[str, list[dict[str, Any]]]:
    rows = [{"uri": r.uri, "kind": "resource", "name": r.name, "title": r.title,
             "description": r.description, "mime_type": r.mime_type}
            for r in server.resources]
    rows += [{"uri": t.uri_template, "kind": "template", "name": t.name, "title": t.title,
              "description": t.description, "mime_type": t.mime_type,
              "tool": f"{server.name}__resource_{t.name}"}
             for t in server.resource_templates]
    return "resources", rows


def _prompt_rows(server: Any) -> tuple[str, list[dict[str, Any]]]:
    return "prompts", [{
        "name": p.name, "title": p.title, "description": p.description,
        "arguments": [{"name": a.name, "description": a.description, "required": a.required}
                      for a in p.arguments],
    } for p in server.prompts]


def _print_table(columns: tuple[str, ...], title: str, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from tether.cli.render import print_table
    from tether.display import inline, plain

    table = Table(title=plain(title))
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        cells = []
        for col in columns:
            value = row.get(col)
            if col == "arguments":
                value = ", ".join(a["name"] + ("" if a["required"] else "?")
                                  for a in value or ())
            # What a server wrote: plain text, escapes shown, never interpreted.
            cells.append(plain(inline(str(value))) if value is not None else "-")
        table.add_row(*cells)
    print_table(table)
