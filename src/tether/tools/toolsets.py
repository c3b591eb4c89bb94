"""Where tools come from: a ``Toolset`` offers tools that may change over time, a
``ManagedToolset`` has a lifetime (an MCP server), and ``collect_tools`` makes one set of
them, first of a name first (``CombinedToolset`` is that set as a toolset).

Wrappers compose over any toolset, MCP servers included: ``PrefixedToolset`` names each of
its tools ``prefix__name``, ``FilteredToolset`` offers only the ones it keeps. A wrapper
is managed as its inner toolset is (starting it starts the inner one), so wrapping never
changes a toolset's lifetime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tether.tools.tool import Tool

if TYPE_CHECKING:
    from tether.events import Event


@runtime_checkable
class Toolset(Protocol):
    """A source of tools that may change over time (an MCP server, a filtered set)."""

    def tools(self) -> Sequence[Tool]: ...


@runtime_checkable
class ManagedToolset(Toolset, Protocol):
    """A toolset with a lifetime (an MCP server): ``async with agent`` starts it and
    closes it. ``start()`` may return ``Notice`` events (it did not start, a tool was left
    out); ``started`` says whether its tools are there; ``name`` names it in notices."""

    name: str

    @property
    def started(self) -> bool: ...

    async def start(self) -> Sequence[Event] | None: ...

    async def aclose(self) -> None: ...


async def freshen(sources: Iterable[Tool | Toolset], names: Set[str]) -> bool:
    """Before calls of ``names`` are judged: each source whose list is past its time to
    live (an MCP server's ``ttlMs``) and offers one of them reads its tools again. True
    when one did, so the caller takes the tools anew (a tool redefined under the same name
    is judged by what it says now). A source without a time to live costs one attribute
    look-up."""
    changed = False
    for source in sources:
        fresh = None if isinstance(source, Tool) else getattr(source, "freshen", None)
        if fresh is not None and names:
            changed = await fresh(names) or changed
    return changed


@dataclass(frozen=True, slots=True)
class Clash:
    """A tool left out because an earlier one has its name; ``toolset`` offered it."""

    name: str
    toolset: Toolset


def collect_tools(sources: Iterable[Tool | Toolset]) -> tuple[dict[str, Tool], list[Clash]]:
    """The tools of ``sources`` by name, as they are now: your own ``Tool``s first, then
    each toolset's in order; the first tool of a name keeps it. Also the clashes (a later
    tool of a taken name), which must never be silent: the caller reports them."""
    sources = list(sources)
    current: dict[str, Tool] = {}
    for source in sources:
        if isinstance(source, Tool):
            current.setdefault(source.name, source)
    clashes: list[Clash] = []
    for source in sources:
        if isinstance(source, Tool):
            continue
        for t in source.tools():
            if t.name not in current:
                current[t.name] = t
            elif current[t.name] is not t:
                clashes.append(Clash(t.name, source))
    return current, clashes


class CombinedToolset:
    """The tools of several sources as one toolset, as they are now: ``collect_tools``'s
    order and rule (the first tool of a name keeps it). It has no lifetime of its own: the
    sources' stays with whoever owns them."""

    def __init__(self, sources: Iterable[Tool | Toolset]) -> None:
        self.sources = list(sources)

    def tools(self) -> Sequence[Tool]:
        found, _ = collect_tools(self.sources)
        return list(found.values())

    async def freshen(self, names: Set[str]) -> bool:
        return await freshen(self.sources, names)


# --- wrappers ---------------------------------------------------------------------------------


class _Wrapper:
    """What every wrapper shares: it is managed as its inner toolset is. Starting it starts
    the inner toolset, closing it closes it; around a toolset without a lifetime (a plain
    list of tools) it is always started and starting it does nothing."""

    def __init__(self, inner: Toolset) -> None:
        self.inner = inner
        self._managed = inner if isinstance(inner, ManagedToolset) else None
        self.name: str = type(inner).__name__ if self._managed is None else self._managed.name

    @property
    def started(self) -> bool:
        return self._managed is None or self._managed.started

    async def start(self) -> Sequence[Event] | None:
        return None if self._managed is None else await self._managed.start()

    async def aclose(self) -> None:
        if self._managed is not None:
            await self._managed.aclose()

    async def freshen(self, names: Set[str]) -> bool:
        """``inner``'s tools read again when past their time (``freshen``), for the calls
        of ``names`` as this wrapper names them."""
        return await freshen((self.inner,), self.inner_names(names))

    def inner_names(self, names: Set[str]) -> Set[str]:
        return names


class PrefixedToolset(_Wrapper):
    """``inner``'s tools, each named ``prefix__name`` (``files__read``): two toolsets whose
    tools share names (two MCP servers' ``search``) can then be offered side by side. Only
    the name changes; the tool runs as it is (its handler knows it by its own name). A
    tool keeps its renamed copy while ``inner`` offers the same tool, so the copy is the
    same object turn after turn."""

    def __init__(self, inner: Toolset, prefix: str) -> None:
        super().__init__(inner)
        self.prefix = prefix
        self._renamed: dict[str, tuple[Tool, Tool]] = {}

    def named(self, name: str) -> str:
        """The name a tool called ``name`` in ``inner`` has here."""
        return f"{self.prefix}__{name}"

    def inner_names(self, names: Set[str]) -> Set[str]:
        start = f"{self.prefix}__"
        return {n[len(start):] for n in names if n.startswith(start)}

    def tools(self) -> Sequence[Tool]:
        out: list[Tool] = []
        renamed: dict[str, tuple[Tool, Tool]] = {}
        for tool in self.inner.tools():
            known = self._renamed.get(tool.name)
            if known is None or known[0] is not tool or known[1].name != self.named(tool.name):
                spec = dataclasses.replace(tool.spec, name=self.named(tool.name))
                known = (tool, dataclasses.replace(tool, spec=spec))
            renamed[tool.name] = known
            out.append(known[1])
        self._renamed = renamed  # tools the inner toolset no longer offers are forgotten
        return tuple(out)


class FilteredToolset(_Wrapper):
    """The tools of ``inner`` that ``keep`` keeps, as they are now: ``keep`` is a list of
    names (the tools come in the order named; a name ``inner`` does not offer now is left
    out, and ``missing()`` says which) or a predicate on a tool (the tools come in
    ``inner``'s order)."""

    def __init__(self, inner: Toolset, keep: Iterable[str] | Callable[[Tool], bool]) -> None:
        super().__init__(inner)
        if callable(keep):
            self.keep: Callable[[Tool], bool] | tuple[str, ...] = keep
        elif isinstance(keep, str):
            raise TypeError("FilteredToolset keeps a list of names, not one string")
        else:
            self.keep = tuple(dict.fromkeys(keep))

    def tools(self) -> Sequence[Tool]:
        if callable(self.keep):
            return [t for t in self.inner.tools() if self.keep(t)]
        offered = {t.name: t for t in reversed(self.inner.tools())}  # the first of a name
        return [offered[n] for n in self.keep if n in offered]

    def inner_names(self, names: Set[str]) -> Set[str]:
        return names if callable(self.keep) else names & set(self.keep)

    def missing(self) -> list[str]:
        """The names kept that ``inner`` does not offer now (none for a predicate)."""
        if callable(self.keep):
            return []
        offered = {t.name for t in self.inner.tools()}
        return [n for n in self.keep if n not in offered]


def marked(tools: tuple[Tool, ...], defer: bool | None) -> tuple[Tool, ...]:
    """``tools`` with ``Tool.defer`` set to ``defer`` (as they are for ``None``)."""
    return tools if defer is None else tuple(dataclasses.replace(t, defer=defer) for t in tools)


class DeferredToolset(_Wrapper):
    """``inner``'s tools with ``Tool.defer`` set to ``defer``: ``True`` keeps them out of a
    request until the model finds them with ``search_tools`` (``tether.tools.search``),
    whatever the number of tools; ``False`` offers them always. Each tool keeps its marked
    copy while ``inner`` offers the same tool. ``inner`` may be a list of tools."""

    def __init__(self, inner: Toolset | Iterable[Tool], defer: bool = True) -> None:
        super().__init__(inner if isinstance(inner, Toolset) else CombinedToolset(inner))
        self.defer = defer
        self._marked: dict[int, tuple[Tool, Tool]] = {}

    def tools(self) -> Sequence[Tool]:
        marked: dict[int, tuple[Tool, Tool]] = {}
        for tool in self.inner.tools():
            known = self._marked.get(id(tool))
            if known is None or known[0] is not tool:
                known = (tool, dataclasses.replace(tool, defer=self.defer))
            marked[id(tool)] = known
        self._marked = marked
        return tuple(copy for _, copy in marked.values())
