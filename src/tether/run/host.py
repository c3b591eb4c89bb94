"""What the engine reads from whoever runs it: the ``RunHost`` protocol.

The loop (``tether.run.loop``) and its plug-ins (structured output, sub-agents) never
import the ``Agent``: they drive a host, and these protocols name everything they read of
it. ``tether.agent.Agent`` is one; a host of your own that implements them runs the same
loop (tests/test_seams.py has one).

- ``RunHost``: the settings, the model and the other providers, the approver, the hooks
  (``tether.run.hooks``), the tools as
  they are now and the toolsets they come from, the toolsets' lifetime for a run, the
  context fitter, the observer of a run, notices to hand over, and how a child host is
  made for a sub-agent (``spawn``).
- ``RunObserver``: what watches one run from outside the loop (its events as they pass,
  and the context each task the run starts runs in).
- ``Instrument``: what makes the observer of each run of a host (OpenTelemetry's, in
  ``tether.telemetry``): the facade holds one and calls it, never imports it.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from tether import events as ev
from tether.approval import Approver
from tether.conversation import Conversation
from tether.messages import ToolCall
from tether.providers.base import Provider
from tether.run.context.fitter import ContextFitter
from tether.run.hooks import Hooks
from tether.settings import AgentSettings
from tether.tools.tool import Tool
from tether.tools.toolsets import Toolset


class RunObserver(Protocol):
    """What watches a run from outside the loop (``tether.telemetry``'s recorder of an
    instrumented agent): it reads the run's events as they pass, and names the context
    each task the run starts runs in, so what the task does is seen inside its call
    (``None``: a copy of the current one, as asyncio does)."""

    def record(self, events: AsyncIterator[ev.Event]) -> AsyncGenerator[ev.Event, None]:
        """The events, passed on unchanged."""
        ...

    def model_context(self) -> contextvars.Context | None:
        """Where the task reading this turn's model answer runs."""
        ...

    def tool_context(self, call: ToolCall) -> contextvars.Context | None:
        """Where the task running ``call`` runs."""
        ...


@runtime_checkable
class Instrument(Protocol):
    """What observes a host's runs (``Agent(instrument=...)``;
    ``tether.telemetry.Instrumentation`` is one): it makes each run's observer, and the
    same instrument for an agent of another name (a sub-agent is observed under its
    profile's name)."""

    def observer(self, host: RunHost, conversation: Conversation, path: tuple[str, ...],
                 stream_requests: bool) -> RunObserver:
        """The observer of one run of ``host`` on ``conversation``, at ``path``."""
        ...

    def for_agent(self, name: str) -> Instrument:
        """The same instrument, for an agent called ``name``."""
        ...


class RunHost(Protocol):
    """Everything the loop and its plug-ins read of the agent that runs them.

    The settings are read once per run (one value for the whole run); the tools at the
    start of the run and of each turn (a toolset's may change between turns)."""

    @property
    def settings(self) -> AgentSettings:
        """What bounds and governs the runs."""
        ...

    @property
    def model(self) -> Provider:
        """The model the runs ask."""
        ...

    @property
    def providers(self) -> Mapping[str, Provider]:
        """The other providers, by name (a sub-agent's profile may name one)."""
        ...

    @property
    def approver(self) -> Approver | None:
        """Who answers the gate's questions (None: nobody; such a call is refused)."""
        ...

    @property
    def hooks(self) -> Hooks:
        """The host's hooks, compiled once (``Hooks.of``; ``NO_HOOKS`` for none)."""
        ...

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools as they are now, by name (the first tool of a name keeps it)."""
        ...

    @property
    def toolsets(self) -> Sequence[Tool | Toolset]:
        """Where the tools come from, in order."""
        ...

    def toolsets_for_run(self) -> AbstractAsyncContextManager[None]:
        """Around one run: the toolsets it needs are started (and closed after it, when
        the run started them)."""
        ...

    def context_fitter(self) -> ContextFitter:
        """What fits a request into the model's window (it learns the window as it goes,
        so it carries over from one run to the next)."""
        ...

    def observer(self, conversation: Conversation, path: tuple[str, ...],
                 stream_requests: bool) -> RunObserver | None:
        """The observer of one run (None: the run is not observed)."""
        ...

    def take_notices(self) -> list[ev.Notice]:
        """What the next run should tell its listener, handed over once."""
        ...

    def spawn(self, model: Provider, settings: AgentSettings, tools: Iterable[Tool | Toolset],
              *, approver: Approver | None, name: str) -> RunHost:
        """A child host for a sub-agent called ``name``: its model, settings, tools and
        approver; the same providers, observed as this host is, under ``name``."""
        ...


__all__ = ["Instrument", "RunHost", "RunObserver"]
