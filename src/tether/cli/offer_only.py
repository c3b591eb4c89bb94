"""``-T NAME``: an agent like the configured one that offers the model only the tools named
(``tether.cli.selection`` reads the flags). The selection is a ``FilteredToolset`` over
every tool the agent would offer, started and closed with the MCP servers among them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from tether.agent import Agent
from tether.builtins import builtin_names
from tether.errors import ConfigError
from tether.tools.tool import Tool
from tether.tools.toolsets import (
    CombinedToolset,
    FilteredToolset,
    ManagedToolset,
    Toolset,
    collect_tools,
)


def offer_only(agent: Agent, names: Sequence[str]) -> Agent:
    """An agent like ``agent`` that offers only the tools ``names`` names (see the module
    docstring). A name no tool has is a ConfigError listing the tools there are; names an
    MCP server may have are checked when the servers start."""
    present = agent.tools
    servers = _servers(agent.toolsets)
    unknown = [n for n in names if n not in present]
    if unknown and not servers:
        raise ConfigError(_unknown(unknown, present))
    selected = Selected(agent.toolsets, names)
    return Agent.from_settings(agent.model, agent.settings, [selected], approver=agent.approver,
                               providers=agent.providers, instrument=agent.instrument)


class Selected(FilteredToolset):
    """The tools named ``names`` among ``sources`` (an agent's tools and toolsets), in the
    order named: a ``FilteredToolset`` over them all. Managed: starting it starts the MCP
    servers among its sources, side by side, then checks that every name is there; closing
    it closes them."""

    def __init__(self, sources: Iterable[Tool | Toolset], names: Sequence[str]) -> None:
        super().__init__(CombinedToolset(sources), names)
        self.sources = list(sources)
        self.name = "-T"
        self._started = False

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
        unknown = self.missing()
        if unknown:
            found, _ = collect_tools(self.sources)  # what there is, before it is closed
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
    return [s for s in sources if not isinstance(s, Tool) and isinstance(s, ManagedToolset)]


def _unknown(names: Sequence[str], present: Iterable[str]) -> str:
    there = sorted({*present, *builtin_names()})
    return (f"-T {', '.join(names)}: no such tool; the tools there are: {', '.join(there)} "
            f"(`tether tools` lists them, MCP tools too)")


__all__ = ["Selected", "offer_only"]
