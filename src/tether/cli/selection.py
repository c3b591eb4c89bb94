"""Which tools a command offers the model: ``--tools FILE.py`` adds a file's tools,
``--no-tools`` offers none, ``-T NAME`` (repeatable) just the named ones.

``-T`` picks by name among every tool the command would offer (the enabled built-ins, the
tools of ``[tools] python`` and ``--tools`` files, MCP tools named ``server__tool``,
sub-agents by their profile's name) and any other built-in, unless ``[tools] disabled``
refuses it. It limits what the model of the run is offered: a sub-agent it offers keeps
the tools its profile lists (its own allowlist, taken from the configured tools). A name
that names nothing is an error listing the tools there are; an MCP tool's name is checked
once its server has started. ``--no-tools`` offers nothing at all: no built-in, no tool
file is loaded, no MCP server is started, no sub-agent is offered.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError

if TYPE_CHECKING:  # tether.tools is imported when a selection is made, not to parse flags
    from tether.tools.tool import ManagedToolset, Tool, Toolset


def add_tool_flags(p: argparse.ArgumentParser) -> None:
    """``--tools FILE.py[:NAME]``, ``--no-tools``, ``-T NAME``."""
    p.add_argument("--tools", dest="tool_files", action="append", metavar="FILE.py[:NAME]",
                   help="offer the @tool functions of a Python file or module:attr "
                        "(repeatable)")
    p.add_argument("--no-tools", action="store_true",
                   help="offer the model no tools at all (no built-in, tool file, MCP "
                        "server or sub-agent)")
    p.add_argument("-T", "--tool", dest="only_tools", action="append", metavar="NAME",
                   help="offer just this tool (repeatable): a built-in, a tool of a tool "
                        "file, an MCP tool (server__tool) or a sub-agent")


def tool_overrides(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Add to the flags' configuration layer ``out`` what ``--no-tools`` and ``-T`` change:
    nothing enabled, loaded or started for ``--no-tools``; for ``-T``, the built-ins it
    names that the configuration does not enable."""
    none, only = bool(getattr(args, "no_tools", False)), getattr(args, "only_tools", None)
    if none and only:
        raise ConfigError("--no-tools offers no tools and -T NAME offers some; choose one")
    if none and getattr(args, "tool_files", None):
        raise ConfigError("--no-tools offers no tools, so --tools FILE.py has nothing to do; "
                          "choose one")
    if none:
        tools = out.setdefault("tools", {})
        tools["enabled"], tools["python"] = [], []
        out["mcp"], out["subagents"] = [], []
        return
    if not only:
        return
    from tether.builtins import DEFAULT_ENABLED, builtin_names
    from tether.config import load_config

    cfg = load_config(args.workspace, out or None)
    enabled = list(DEFAULT_ENABLED if cfg.tools.enabled is None else cfg.tools.enabled)
    for name in only:
        if name in cfg.tools.disabled:
            raise ConfigError(f"-T {name}: [tools] disabled refuses this built-in; remove it "
                              f"there to offer it")
        if name in builtin_names() and name not in enabled:
            enabled.append(name)
    out.setdefault("tools", {})["enabled"] = enabled


def offer_only(agent: Any, names: Sequence[str]) -> Any:
    """An agent like ``agent`` that offers only the tools ``names`` names (see the module
    docstring). A name no tool has is a ConfigError listing the tools there are; names an
    MCP server may have are checked when the servers start."""
    from tether.agent import Agent

    present = agent.tools
    servers = _servers(agent.toolsets)
    unknown = [n for n in names if n not in present]
    if unknown and not servers:
        raise ConfigError(_unknown(unknown, present))
    selected = Selected(agent.toolsets, names)
    return Agent.from_settings(agent.model, agent.settings, [selected], approver=agent.approver,
                               providers=agent.providers, instrument=agent.instrument)


class Selected:
    """The tools named ``names`` among ``sources`` (an agent's tools and toolsets), in the
    order named. A managed toolset: starting it starts the MCP servers among its sources,
    side by side, then checks that every name is there; closing it closes them."""

    name = "-T"

    def __init__(self, sources: Iterable[Tool | Toolset], names: Sequence[str]) -> None:
        self.sources = list(sources)
        self.names = tuple(dict.fromkeys(names))
        self._started = False

    def tools(self) -> list[Tool]:
        from tether.tools.tool import collect_tools

        found, _ = collect_tools(self.sources)
        return [found[n] for n in self.names if n in found]

    @property
    def started(self) -> bool:
        return self._started

    async def start(self) -> list[Any]:
        servers = [s for s in _servers(self.sources) if not s.started]
        outcomes = await asyncio.gather(*(s.start() for s in servers), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            await self.aclose()
            raise failed[0]
        notices = [n for o in outcomes if o and not isinstance(o, BaseException) for n in o]
        from tether.tools.tool import collect_tools

        found, _ = collect_tools(self.sources)
        unknown = [n for n in self.names if n not in found]
        if unknown:
            await self.aclose()
            said = "; ".join(str(getattr(n, "message", n)) for n in notices)
            raise ConfigError(_unknown(unknown, found) + (f" ({said})" if said else ""))
        self._started = True
        return notices

    async def aclose(self) -> None:
        self._started = False
        await asyncio.gather(*(s.aclose() for s in _servers(self.sources)))


def _servers(sources: Iterable[Tool | Toolset]) -> list[ManagedToolset]:
    """The toolsets among ``sources`` that are started and closed (MCP servers)."""
    from tether.tools.tool import ManagedToolset, Tool

    return [s for s in sources if not isinstance(s, Tool) and isinstance(s, ManagedToolset)]


def _unknown(names: Sequence[str], present: Iterable[str]) -> str:
    from tether.builtins import builtin_names

    there = sorted({*present, *builtin_names()})
    return (f"-T {', '.join(names)}: no such tool; the tools there are: {', '.join(there)} "
            f"(`tether tools` lists them, MCP tools too)")


__all__ = ["Selected", "add_tool_flags", "offer_only", "tool_overrides"]
