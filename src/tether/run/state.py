"""A run's two values: what it was given and keeps (``RunFrame``, frozen), and what changes as
it goes (``RunState``).

The loop (``tether.run.loop``) holds one of each. Everything a stage may change is a field of
the state, so a reader finds it in one place; everything else is the frame, which nothing
sets after the run starts (the conversation's object is the state's: a run appends to it and
grows its taint).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether import events as ev
from tether.approval import Decision
from tether.bounds import Bound, Spend, armed
from tether.conversation import Conversation, PendingCall
from tether.errors import TetherError
from tether.result import ToolCallRecord
from tether.run.context.fitter import ContextFitter
from tether.run.ending import TEXT_ENDING, Ending
from tether.run.execution import CallEnv, Noting
from tether.run.hooks import Hooks
from tether.run.host import RunHost, RunObserver
from tether.run.repeats import Repeats
from tether.settings import AgentSettings
from tether.tools.search import Shelf, revealed_in, wants_shelf
from tether.tools.tool import RunScope, Tool


@dataclass(frozen=True, slots=True)
class RunFrame:
    """What a run is given, fixed from its start to its end: the host and the settings it
    read once, when the run has its answer (``ending``), where the run is in a tree of runs
    (``path``: a delegated run's is its parent's call), its interrupt, the host's
    dependencies (for the tools, never put in an event, a message or the result), the
    hooks, the context fitter, the observer, what its calls run in (``calls``: the
    conversation, the settings, the run's scope, the tracing context, the repeat rule and
    the hooks, fixed for the run), whether requests are streamed, ``start``: where this
    run's messages begin in the conversation, and ``bounds``: the rows of the bounds'
    table this run can reach (``tether.bounds.armed``)."""

    host: RunHost
    settings: AgentSettings
    ending: Ending
    path: tuple[str, ...]
    interrupt: asyncio.Event | None
    deps: Any
    hooks: Hooks
    fitter: ContextFitter
    observer: RunObserver | None
    calls: CallEnv
    stream_requests: bool
    start: int
    bounds: tuple[Bound, ...]

    def offered(self) -> dict[str, Tool]:
        """The tools a request offers now (an MCP server's list may have changed)."""
        return self.ending.tools(self.host.tools)

    def interrupted(self) -> bool:
        return self.interrupt is not None and self.interrupt.is_set()


@dataclass(slots=True)
class RunState:
    """What changes as a run goes: the conversation (appended to; its taint grows), the
    spend, the turns taken, the model's last text, the records of the calls, the events so
    far (each stamped with the run's path: ``tether.run.loop``'s ``emit``), the calls a
    pause waits on, the error the run ends with, the repeated calls (``repeats``, and
    ``noting``: what the model reads of a result because of them), a resumed run's
    decisions (for the resumed turn only), and this turn's request: the tools offered, a
    hook's instructions and the tools a hook dropped; ``shelf``: the tools a large
    catalogue keeps out of the requests until a search finds them (None: nothing
    deferred, nothing more to do each turn)."""

    conversation: Conversation
    spend: Spend
    repeats: Repeats
    noting: Noting
    decisions: dict[int, tuple[PendingCall, Decision]]
    turns: int = 0
    text: str = ""
    records: list[ToolCallRecord] = field(default_factory=list)
    events: list[ev.Event] = field(default_factory=list)
    pending: list[PendingCall] = field(default_factory=list)
    error: TetherError | None = None
    prompt_sent: bool = False  # whether this run added a prompt (at the frame's ``start``)
    prompt_text: str | None = None
    tools: dict[str, Tool] = field(default_factory=dict)
    instructions: tuple[str, ...] = ()
    dropped: frozenset[str] = frozenset()  # tools a hook took out of this turn
    shelf: Shelf | None = None

    def offer(self, tools: dict[str, Tool]) -> dict[str, Tool]:
        """The tools a request offers of ``tools`` (the frame's ``offered``): all of them,
        or, while tools are deferred, those not waiting to be found and ``search_tools``."""
        shelf = self.shelf
        return tools if shelf is None else shelf.offer(tools)


def shelved(frame: RunFrame, conversation: Conversation, tools: dict[str, Tool]) -> Shelf | None:
    """The run's shelf when it defers tools (decided once, from the tools it starts with),
    with what the conversation's earlier searches found."""
    defer_after = frame.settings.defer_after
    if not wants_shelf(tools, defer_after):
        return None
    return Shelf(defer_after, revealed_in(conversation.messages))


def start(
    host: RunHost,
    conversation: Conversation,
    *,
    stream_requests: bool,
    ending: Ending | None = None,
    within: RunScope | None = None,
    decisions: Mapping[int, tuple[PendingCall, Decision]] | None = None,
    interrupt: asyncio.Event | None = None,
    deps: Any = None,
) -> tuple[RunFrame, RunState]:
    """A run's frame and its first state. ``within``: the run this one is delegated from
    (its path, interrupt, spend and dependencies are this one's too)."""
    settings = host.settings  # one value for the whole run
    ending = ending if ending is not None else TEXT_ENDING
    path = within.path if within is not None else ()
    deps = deps if deps is not None or within is None else within.deps
    interrupt = interrupt if interrupt is not None or within is None else within.interrupt
    spend = Spend(settings, within.spend if within is not None else None)
    observer = host.observer(conversation, path, stream_requests)
    hooks = host.hooks
    repeats = Repeats(settings.max_repeated_failures)
    noting = Noting(repeats, ending)
    # The run its calls belong to (each call's is this one with its id on the path).
    scope = RunScope(host, path, interrupt, spend, deps)
    calls = CallEnv(conversation, settings, scope,
                    None if observer is None else observer.tool_context, noting, hooks)
    frame = RunFrame(
        host=host, settings=settings, ending=ending, path=path, interrupt=interrupt,
        deps=deps, hooks=hooks, fitter=host.context_fitter(), observer=observer,
        calls=calls, stream_requests=stream_requests, start=len(conversation.messages),
        bounds=armed(interrupt, spend))
    state = RunState(conversation, spend, repeats, noting, dict(decisions or {}))
    return frame, state
