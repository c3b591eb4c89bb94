"""MCP servers' tools as tether Tools: every call still passes the one gate.

An ``McpServer`` is a ``Toolset``. ``start()`` connects (stdio or streamable HTTP),
initializes, and lists the server's tools (all pages); each becomes a ``Tool`` whose
capabilities and approval flag come from the tool's annotations (see ``map_hints``), never
narrower than the configured ``capabilities``. ``aclose()`` ends the session and the child
process. ``async with agent:`` does both for every server it was given, starting them in
parallel::

    server = McpServer.stdio("files", "python", ["-m", "my_mcp_server"])
    async with Agent(model, tools=[server]) as agent:
        await agent.run("...")   # the model sees files__read, files__write, ...

A server that fails to start is not raised: ``start()`` returns a ``Notice`` (the agent
emits it at the start of its next run), ``server.error`` says why, and the server offers no
tools. The run goes on without it.

The official ``mcp`` SDK (the ``tether[mcp]`` extra) is imported only when a server starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError
from tether.mcp.environment import ALLOWED_ENV, child_environment
from tether.mcp.mapping import GateFlags, Hints, map_hints, output_from_result
from tether.mcp.server import McpServer
from tether.trust import Capabilities

if TYPE_CHECKING:
    from tether.config import Config, McpSection

__all__ = [
    "ALLOWED_ENV",
    "GateFlags",
    "Hints",
    "McpServer",
    "check_mcp_servers",
    "child_environment",
    "map_hints",
    "output_from_result",
    "servers_from_config",
]


def servers_from_config(sections: Sequence[McpSection]) -> list[McpServer]:
    """One ``McpServer`` per enabled ``[[mcp]]`` entry of tether.toml."""
    _require_sdk()
    servers: list[McpServer] = []
    for s in sections:
        if s.disabled:
            continue
        widen = Capabilities(**s.capabilities.model_dump())
        common: dict[str, Any] = {"prefix_tools": s.prefix_tools, "timeout_secs": s.timeout_secs,
                                  "capabilities": widen}
        if s.trusted is not None:
            common["trusted"] = s.trusted
        if s.command is not None:
            servers.append(McpServer.stdio(s.name, s.command, s.args, s.env,
                                           env_passthrough=s.env_passthrough, **common))
        else:
            assert s.url is not None  # McpSection allows exactly one transport
            servers.append(McpServer.http(s.name, s.url, headers_env=s.headers_env, **common))
    names = [server.name for server in servers]
    if len(set(names)) != len(names):
        raise ConfigError(f"two [[mcp]] servers share a name: {', '.join(names)}")
    return servers


def _require_sdk() -> None:
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        raise ConfigError("[[mcp]] servers need the official MCP SDK: "
                          "pip install 'tether[mcp]'")


async def check_mcp_servers(config: Config) -> list[tuple[bool, str, str]]:
    """``tether doctor``: start each configured server (side by side), list its tools, and
    close it again."""
    out: list[tuple[bool, str, str]] = [
        (True, f"mcp {s.name}", "disabled") for s in config.mcp if s.disabled]
    try:
        servers = servers_from_config(config.mcp)
    except ConfigError as e:
        return [*out, (False, "mcp", str(e))]
    try:
        await asyncio.gather(*(server.start() for server in servers))
        for server in servers:
            label = f"mcp {server.name} ({server.transport.describe()}, " \
                    f"{'trusted' if server.trusted else 'untrusted'})"
            if server.error is not None:
                out.append((False, label, f"did not start: {server.error}"))
                continue
            skipped = len(server.notices)
            trust = "" if server.trusted else (
                "; not trusted: a conversation offering its tools counts as untrusted from "
                "its first turn")
            out.append((True, label, f"started, {len(server.tools())} tools"
                                     + (f", {skipped} skipped (see `tether tools`)"
                                        if skipped else "") + trust))
    finally:
        await asyncio.gather(*(server.aclose() for server in servers))
    return out
