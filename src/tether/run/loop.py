"""The agent and its loop, top to bottom.

One run: the prompt joins the conversation; then, turn by turn, the bounds are checked, the
model is asked, its answer kept, and every tool call it made is judged by the gate
(``tether.gate``: lookup -> argument validation -> trifecta interlock -> permission mode ->
approval); the allowed calls run side by side (``tether.execution``). Every turn ends in a
``TurnOutcome`` (``tether.outcome``): the answer, another turn, a pause for decisions, or a
stop with a cause. The bounds are one table (``tether.bounds``), checked before every model
request and before every batch of calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether import events as ev
from tether.approval import Approver, Decision, PermissionMode
from tether.bounds import Progress, Reached, Spend, first_reached
from tether.conversation import Conversation, PendingCall, SessionLike
from tether.errors import ConfigError, MalformedResponseError, ProviderError, TetherError
from tether.messages import Image, Message, Part, Text, ToolCall, ToolResult
from tether.outcome import (
    TEXT_ENDING,
    Ending,
    Final,
    Paused,
    RunAgain,
    StopCause,
    Stopped,
    TurnOutcome,
)
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    Provider,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    attempt_usage,
)
from tether.result import RunResult, ToolCallRecord
from tether.run import gate
from tether.run.context.fitter import ContextFitter
from tether.run.execution import Allowed, Done, run_calls, settled
from tether.run.interrupts import abandon, until_interrupted
from tether.run.repeats import Repeats
from tether.settings import (
    DEFAULT_MAX_REPEATED_FAILURES,
    DEFAULT_MAX_TURNS,
    AgentSettings,
    ContextConfig,
    ContextStrategy,
    Prices,
    Setting,
)
from tether.tools.function import ensure_tools
from tether.tools.tool import RunScope, Tool
from tether.tools.toolsets import ManagedToolset, Toolset, collect_tools
from tether.trust import SecurityConfig, Taint, forecast

if TYPE_CHECKING:
    from tether.output import OutputReservation, OutputSpec, PreparedRun
    from tether.run.pending import Decisions, PendingState
    from tether.subagents import SubagentProfile
    from tether.telemetry import Instrumentation


class Agent:
    """An LLM on a tether: a model, tools, and the rules every tool call must pass.

    ::

        agent = Agent(model=OpenAIChat(base_url=..., model="qwen"), tools=[add])
        result = await agent.run("What is 2+3?")

    The keyword arguments that bound and govern its runs make one frozen ``AgentSettings``
    (``agent.settings``); ``agent.max_turns`` and the others read it (and assigning one
    makes a new settings value).
    """

    system_prompt = Setting[str | None]()
    max_turns = Setting[int]()
    max_repeated_failures = Setting[int | None]()
    max_output_tokens = Setting[int | None]()
    max_cost_usd = Setting[float | None]()
    prices = Setting[Prices | None]()
    permission_mode = Setting[PermissionMode]()
    security = Setting[SecurityConfig]()
    workspace = Setting[Path]()
    approval_timeout_secs = Setting[float | None]()
    tool_timeout_secs = Setting[float | None]()
    temperature = Setting[float | None]()
    output_retries = Setting[int]()
    context = Setting[ContextConfig]()

    def __init__(
        self,
        model: Provider,
        tools: Iterable[Tool | Toolset | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_output_tokens: int | None = None,
        *,
        approver: Approver | None = None,
        security: SecurityConfig | None = None,
        permission_mode: PermissionMode = "ask",
        workspace: str | Path = ".",
        subagents: Iterable[SubagentProfile] = (),
        providers: dict[str, Provider] | None = None,
        approval_timeout_secs: float | None = 300.0,
        tool_timeout_secs: float | None = 600.0,
        temperature: float | None = None,
        output_retries: int = 2,
        max_cost_usd: float | None = None,
        prices: Prices | None = None,
        instrument: bool | Instrumentation | None = False,
        context: ContextStrategy | ContextConfig = "trim",
        max_repeated_failures: int | None = DEFAULT_MAX_REPEATED_FAILURES,
    ) -> None:
        settings = AgentSettings(
            system_prompt=system_prompt, max_turns=max_turns,
            max_repeated_failures=max_repeated_failures,
            max_output_tokens=max_output_tokens, max_cost_usd=max_cost_usd, prices=prices,
            permission_mode=permission_mode, security=security or SecurityConfig(),
            workspace=Path(workspace), approval_timeout_secs=approval_timeout_secs,
            tool_timeout_secs=tool_timeout_secs, temperature=temperature,
            output_retries=output_retries, context=ContextConfig.of(context))
        self._setup(model, settings, tools, approver, subagents, providers, instrument)

    @classmethod
    def from_settings(
        cls,
        model: Provider,
        settings: AgentSettings,
        tools: Iterable[Tool | Toolset | Callable[..., Any]] = (),
        *,
        approver: Approver | None = None,
        subagents: Iterable[SubagentProfile] = (),
        providers: dict[str, Provider] | None = None,
        instrument: bool | Instrumentation | None = False,
    ) -> Agent:
        """An agent with these settings (a sub-agent's: its parent's, changed by a profile)."""
        agent = cls.__new__(cls)
        agent._setup(model, settings, tools, approver, subagents, providers, instrument)
        return agent

    def _setup(
        self, model: Provider, settings: AgentSettings,
        tools: Iterable[Tool | Toolset | Callable[..., Any]], approver: Approver | None,
        subagents: Iterable[SubagentProfile], providers: dict[str, Provider] | None,
        instrument: bool | Instrumentation | None,
    ) -> None:
        self.model = model
        self.settings = settings
        self.approver = approver
        self.providers = dict(providers or {})
        # OpenTelemetry spans and metrics of every run (tether.telemetry): how this agent's
        # runs are observed, not how they are bounded, so not a setting. None: off, and
        # nothing of OpenTelemetry is imported.
        self.instrument: Instrumentation | None = None
        if instrument:
            from tether.telemetry import instrumentation

            self.instrument = instrumentation(instrument)
        self._toolsets = ensure_tools(tools)
        self._fitter: ContextFitter | None = None
        # What starting the toolsets (MCP servers) had to say; the next run emits it.
        self.start_notices: list[ev.Notice] = []
        self._reported_clashes: set[str] = set()
        # Runs of an agent not entered with ``async with`` start the toolsets nobody started
        # and close them when the last of them ends (see ``_toolsets_for_run``).
        self._entered = False
        self._run_users = 0
        self._starting: asyncio.Future[None] | None = None
        self._run_started: list[ManagedToolset] = []
        self.subagents = list(subagents)
        if self.subagents:
            from tether.subagents import delegation_tools

            # First among the toolsets: a delegation keeps its name before any server's.
            self._toolsets[0:0] = delegation_tools(self.subagents, self)
        self._check_tool_names()

    # --- public API -----------------------------------------------------------------------

    @classmethod
    def from_config(cls, workspace: str | Path = ".", **overrides: Any) -> Agent:
        """Build an agent from tether.toml (user file, ./tether.toml, TETHER_* env)."""
        from tether.config import agent_from_config

        return agent_from_config(workspace=workspace, **overrides)

    @property
    def toolsets(self) -> tuple[Tool | Toolset, ...]:
        """The tools and toolsets the agent was given, in order (delegations first): a
        ``Tool`` stands for itself, a ``Toolset`` offers whatever tools it has now."""
        return tuple(self._toolsets)

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools as they are now (MCP servers may change theirs during a run): your own
        tools first, then each toolset's; the first tool of a name keeps it (see
        ``tool_clashes``). Asking changes nothing."""
        tools, _ = collect_tools(self._toolsets)
        return tools

    def tool_clashes(self) -> list[ev.Notice]:
        """A warning for each tool left out because an earlier tool has its name."""
        _, clashes = collect_tools(self._toolsets)
        return [ev.Notice("warning", f"two tools are named {c.name!r}; the one from "
                                     f"{getattr(c.toolset, 'name', c.toolset)!r} is not offered",
                          source="tools") for c in clashes]

    def take_notices(self) -> list[ev.Notice]:
        """What the next run should tell its listener, handed over once: the start notices,
        a warning for toolsets that were never started (their tools are missing: the agent
        was not entered with ``async with``), and tool name clashes not reported before."""
        notices, self.start_notices = self.start_notices, []
        unstarted = [t for t in self._managed() if not t.started]
        if unstarted:
            names = ", ".join(repr(t.name) for t in unstarted)
            notices.append(ev.Notice("warning", f"toolsets not started, their tools are "
                                                f"missing: {names}. Use `async with agent:` "
                                                f"(it starts and closes them)."))
        if all(isinstance(t, Tool) for t in self._toolsets):
            return notices  # names of your own tools are unique (checked when given)
        _, clashes = collect_tools(self._toolsets)
        for clash, notice in zip(clashes, self.tool_clashes(), strict=True):
            if clash.name not in self._reported_clashes:
                self._reported_clashes.add(clash.name)
                notices.append(notice)
        return notices

    def add_tools(self, *tools: Tool | Toolset | Callable[..., Any]) -> None:
        self._toolsets.extend(ensure_tools(tools))
        self._check_tool_names()

    async def run(
        self,
        prompt: str | Sequence[Part],
        *,
        conversation: Conversation | None = None,
        session: SessionLike | None = None,
        interrupt: asyncio.Event | None = None,
    ) -> RunResult:
        """Run to an answer or a bound. A provider failure raises (with ``.result`` set).

        Setting ``interrupt`` stops the run with ``stop_cause == "interrupted"``: an answer
        the model is still writing is abandoned (and not kept), calls not yet run are
        answered "not run", a tool already running finishes first. The conversation stays
        valid to continue."""
        return _raised(await _collect(run_events(
            self, prompt, conversation=conversation, session=session, interrupt=interrupt,
            stream_requests=False)))

    def run_sync(self, prompt: str | Sequence[Part], **kwargs: Any) -> RunResult:
        """``run`` for scripts without an event loop of their own.

        The loop is the call's own: the providers' HTTP connections are closed before it
        ends (the next call, or another loop, opens new ones)."""
        return asyncio.run(self._run_then_release(prompt, **kwargs))

    async def _run_then_release(self, prompt: str | Sequence[Part], **kwargs: Any) -> RunResult:
        try:
            return await self.run(prompt, **kwargs)
        finally:
            await self._close_providers()

    async def stream(
        self,
        prompt: str | Sequence[Part],
        *,
        conversation: Conversation | None = None,
        session: SessionLike | None = None,
        interrupt: asyncio.Event | None = None,
    ) -> AsyncIterator[ev.Event]:
        """Every event of a run, ending with ``RunFinished``. Provider failures end the run
        with ``stop_cause == "error"`` instead of raising."""
        # Closed with this stream: a reader that stops early ends the run now (see run_events).
        async with contextlib.aclosing(run_events(
                self, prompt, conversation=conversation, session=session,
                interrupt=interrupt)) as events:
            async for event in events:
                yield event

    async def resume(
        self,
        conversation: Conversation | PendingState | SessionLike,
        decisions: Decisions,
        *,
        stream: bool = False,
    ) -> RunResult:
        """Continue a paused run (a ``Conversation``, a ``PendingState`` or a stored session).

        ``decisions`` answers pending calls, keyed by ``PendingCall`` (``result.pending[i]``)
        or by call id. Each decision is bound to the one call it answers (its position in
        the paused turn, its id, tool and exact arguments) and used up by that turn: nothing
        a later turn does inherits it. A key that answers no pending call raises
        ``PendingStateError`` naming the pending ones, as does an id two pending calls
        share. A pending call left without a decision goes to the approver again."""
        from tether.run.pending import PendingState, bind_decisions, paused_calls

        session: SessionLike | None = None
        if isinstance(conversation, PendingState):
            conversation = conversation.conversation
        elif not isinstance(conversation, Conversation):
            session, conversation = conversation, conversation.conversation()
        bound = bind_decisions(paused_calls(conversation), decisions)
        run = _Run(self, conversation, stream_requests=stream, decisions=bound)
        async with self._toolsets_for_run():
            return _raised(await _collect(_observed(run, None, session)))

    def prepare(
        self,
        prompt: str | Sequence[Part],
        *,
        output: OutputSpec | OutputReservation,
        conversation: Conversation | None = None,
    ) -> PreparedRun:
        """A run that must answer in ``output``'s shape: ``await agent.prepare(...).output()``."""
        from tether.output import PreparedRun

        return PreparedRun(self, prompt, output, conversation)

    async def aclose(self) -> None:
        await self._close_providers()
        # Side by side: each may wait out a child process's grace period.
        await asyncio.gather(*(t.aclose() for t in self._managed()))

    async def __aenter__(self) -> Agent:
        """Start every ``ManagedToolset`` (MCP servers), side by side, and keep them up
        across runs until the block ends. A toolset's ``start()`` may return ``Notice``
        events (a server that did not start): they are kept in ``start_notices`` and emitted
        by the next run. Without ``async with``, each run starts the toolsets nobody started
        and closes them when it ends."""
        try:
            await self._start_toolsets(self._managed())
        except BaseException:
            await self._close_providers()
            raise
        self._entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._entered = False
        await self.aclose()

    # --- internals --------------------------------------------------------------------------

    async def _start_toolsets(self, toolsets: Sequence[ManagedToolset]) -> None:
        outcomes = await asyncio.gather(*(t.start() for t in toolsets),
                                        return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            await asyncio.gather(*(t.aclose() for t in toolsets))
            raise failed[0]
        for outcome in outcomes:
            if not isinstance(outcome, BaseException) and outcome:
                self.start_notices.extend(e for e in outcome if isinstance(e, ev.Notice))

    @contextlib.asynccontextmanager
    async def _toolsets_for_run(self) -> AsyncIterator[None]:
        """Around one run of an agent not entered with ``async with``: the toolsets nobody
        started (MCP servers) start before its first turn and close when it ends, or when
        the last of the runs sharing them ends."""
        if self._entered:
            yield
            return
        if self._run_users == 0:
            idle = [t for t in self._managed() if not t.started]
            self._run_started = idle
            self._starting = (asyncio.ensure_future(self._start_toolsets(idle)) if idle
                              else None)
        self._run_users += 1
        try:
            if self._starting is not None:
                await asyncio.shield(self._starting)  # concurrent runs share one start
            yield
        finally:
            self._run_users -= 1
            if self._run_users == 0:
                started, self._run_started, self._starting = self._run_started, [], None
                await asyncio.gather(*(t.aclose() for t in started))

    def _context_fitter(self) -> ContextFitter:
        """The fitter of this agent's model: what it has learned (the window, the token
        estimate, the last summary) carries over from one run to the next."""
        fitter, settings = self._fitter, self.settings
        if fitter is None or fitter.provider is not self.model \
                or fitter.config is not settings.context \
                or fitter.max_output_tokens != settings.max_output_tokens:
            fitter = self._fitter = ContextFitter(settings.context, self.model,
                                                  settings.max_output_tokens)
        return fitter

    def _managed(self) -> list[ManagedToolset]:
        # A Tool is no toolset: known first, as a Protocol's isinstance is slow.
        return [t for t in self._toolsets
                if not isinstance(t, Tool) and isinstance(t, ManagedToolset)]

    async def _close_providers(self) -> None:
        await self.model.aclose()
        for provider in self.providers.values():
            await provider.aclose()

    def _check_tool_names(self) -> None:
        seen: set[str] = set()
        for source in self._toolsets:
            if isinstance(source, Tool):
                if source.name in seen:
                    raise ConfigError(f"two tools are named {source.name!r}; names must be unique")
                seen.add(source.name)


async def run_events(
    agent: Agent,
    prompt: str | Sequence[Part],
    *,
    conversation: Conversation | None = None,
    session: SessionLike | None = None,
    interrupt: asyncio.Event | None = None,
    stream_requests: bool = True,
    ending: Ending | None = None,
    within: RunScope | None = None,
) -> AsyncGenerator[ev.Event, None]:
    """A run's events: what ``Agent.stream`` and ``Agent.run`` are made of, and the entry
    point for what runs an agent inside tether (not a public API).

    ``stream_requests`` asks the provider for a streamed answer; ``ending`` says when the
    run has its answer (a structured-output run's plan; by default its text); ``within``
    is the run this one is delegated from (its path, interrupt and spend: see
    ``tether.tools.tool.RunScope``).
    """
    if session is not None:
        conversation = session.conversation()
    elif conversation is None:
        conversation = Conversation()
    if isinstance(prompt, str) and not prompt.strip() and not conversation.messages:
        raise TetherError("the prompt is empty: say what the agent should do")
    parts = (Text(prompt),) if isinstance(prompt, str) else tuple(prompt)
    run = _Run(agent, conversation, stream_requests=stream_requests, ending=ending,
               within=within, interrupt=interrupt)
    async with agent._toolsets_for_run():
        events = _observed(run, Message("user", parts), session)
        try:
            async for event in events:
                yield event
        finally:
            # A reader that stops early closes this stream: what it wraps learns it now (a
            # traced run ends its open spans), not when the collector finds it.
            await events.aclose()


async def _collect(events: AsyncIterator[ev.Event]) -> RunResult:
    result: RunResult | None = None
    async for event in events:
        if isinstance(event, ev.RunFinished) and not event.path:
            result = event.result
    assert result is not None, "a run always ends with RunFinished"
    return result


def _raised(result: RunResult) -> RunResult:
    """The result, or its provider failure raised with the result attached."""
    if result.error is not None:
        result.error.result = result
        raise result.error
    return result


async def _recorded(events: AsyncIterator[ev.Event],
                    session: SessionLike) -> AsyncGenerator[ev.Event, None]:
    """The events, each handed to ``session.record`` (a stored session) before it is seen."""
    try:
        async for event in events:
            session.record(event)
            yield event
    except BaseException:
        await abandon(events)
        raise


def _observed(run: _Run, prompt: Message | None,
              session: SessionLike | None) -> AsyncGenerator[ev.Event, None]:
    """The run's events, recorded in ``session``, and seen by its observer when it has
    one (spans and metrics made from them, tether.telemetry)."""
    events = run.execute(prompt)
    if session is not None:
        events = _recorded(events, session)
    return events if run.observer is None else run.observer.record(events)


class _Observer(Protocol):
    """What watches a run from outside the loop (``tether.telemetry``'s recorder of an
    instrumented agent): it reads the run's events as they pass, and names the context each
    task the run starts runs in, so what the task does is seen inside its call (``None``:
    a copy of the current one, as asyncio does)."""

    def record(self, events: AsyncIterator[ev.Event]) -> AsyncGenerator[ev.Event, None]:
        """The events, passed on unchanged."""
        ...

    def model_context(self) -> contextvars.Context | None:
        """Where the task reading this turn's model answer runs."""
        ...

    def tool_context(self, call: ToolCall) -> contextvars.Context | None:
        """Where the task running ``call`` runs."""
        ...


def _observer(run: _Run) -> _Observer | None:
    """An instrumented agent's recorder of this run; None when the agent has none."""
    if run.agent.instrument is None:
        return None
    from tether.telemetry import RunTelemetry

    observer: _Observer = RunTelemetry(run.agent.instrument, run.agent, run.conversation,
                                         run.path, run.stream_requests)
    return observer


_OUTCOMES = (Final, RunAgain, Paused, Stopped)


class _Run:
    """The state of one run; ``execute`` is the loop, ``_turn`` one turn, ``_calls`` one
    turn's calls."""

    def __init__(
        self,
        agent: Agent,
        conversation: Conversation,
        *,
        stream_requests: bool,
        ending: Ending | None = None,
        within: RunScope | None = None,
        decisions: dict[int, tuple[PendingCall, Decision]] | None = None,
        interrupt: asyncio.Event | None = None,
    ) -> None:
        self.agent = agent
        self.settings = agent.settings  # one value for the whole run
        self.conversation = conversation
        self.stream_requests = stream_requests
        self.ending = ending if ending is not None else TEXT_ENDING
        self.path = within.path if within is not None else ()
        self.interrupt = interrupt if interrupt is not None or within is None \
            else within.interrupt
        self.spend = Spend(self.settings, within.spend if within is not None else None)
        # A resumed run's decisions, by the position of the pending call each answers; they
        # apply to the resumed turn only (see ``_calls``).
        self.decisions = decisions or {}
        self.turns = 0
        self.text = ""  # the model's last text
        self.records: list[ToolCallRecord] = []
        self.events: list[ev.Event] = []
        self.start = len(conversation.messages)
        self.pending: list[PendingCall] = []
        self.error: TetherError | None = None
        self.observer = _observer(self)
        self.fitter = agent._context_fitter()
        # Calls that failed (or returned the same result) again and again in this run.
        self.repeats = Repeats(self.settings.max_repeated_failures)
        self.prompt_sent = False  # whether this run added a prompt (at index ``start``)
        # The tools offered: taken at the start of the run and of each turn, and used
        # throughout it (the request's declarations, the gate's verdicts).
        self.tools: dict[str, Tool] = {}

    async def execute(self, prompt: Message | None) -> AsyncGenerator[ev.Event, None]:
        conv = self.conversation
        outside: ev.Event | None = None
        if prompt is not None:
            conv.pending = []  # a new prompt: no earlier pause can be answered any more
            if any(isinstance(p, Image) for p in prompt.parts):
                conv.grow_taint(Taint(private=True))  # a user's picture is private data
            outside_sources = prompt.outside_sources
            if outside_sources and not conv.taint.untrusted:
                # Outside text given with the prompt: untrusted before the model reads it
                # (and stored so, with the message and as the event below).
                before = conv.taint
                conv.grow_taint(Taint(untrusted=True))
                outside = ev.TaintChanged(before, conv.taint, "outside text given with the "
                                          f"prompt ({', '.join(outside_sources)})")
            conv.append(prompt)
            self.prompt_sent = True
        self.tools = self._tools()
        yield self._event(ev.RunStarted(prompt.text if prompt else "", self.agent.model.model,
                                        tuple(self.tools), conv.taint))
        if outside is not None:
            yield self._event(outside)
        for notice in self.agent.take_notices():
            yield self._event(notice)
        offered = self._offered_taint()  # before a resumed turn's calls are checked, too
        if offered is not None:
            yield offered

        outcome: TurnOutcome = RunAgain()
        if prompt is None and conv.unanswered_calls:
            # A paused run resumes with the calls it stopped on (they passed the bounds when
            # the model asked for them); the host's decisions are used up by this turn.
            decisions, self.decisions = self.decisions, {}
            items = self._calls(conv.unanswered_calls, decisions)
            try:
                async for item in items:
                    if isinstance(item, _OUTCOMES):
                        outcome = item
                    else:
                        yield item
            except BaseException:
                await abandon(items)
                raise
        while isinstance(outcome, RunAgain):
            if outcome.say is not None:
                conv.append(Message.user(outcome.say))
            reached = self._reached()
            if reached is not None:
                outcome = Stopped(reached.bound.cause)
                break
            items = self._turn()
            try:
                async for item in items:
                    if isinstance(item, _OUTCOMES):
                        outcome = item
                    else:
                        yield item
            except BaseException:
                await abandon(items)
                raise
        yield self._finish(outcome)

    async def _turn(self) -> AsyncIterator[ev.Event | TurnOutcome]:
        """Ask the model once; then its text is weighed, or its calls judged and run."""
        conv = self.conversation
        self.turns += 1
        self.tools = self._tools()  # as they are now (an MCP server's may have changed)
        yield self._event(ev.TurnStarted(self.turns, max_output_tokens=self._allowance()))
        offered = self._offered_taint()
        if offered is not None:
            yield offered

        response: ModelResponse | None = None
        try:
            within = None if self.observer is None else self.observer.model_context()
            # Closed as soon as this turn is left early (its reader stopped, the run was
            # closed at one of these yields): the model is hung up on now, not when a
            # finalizer finds the answer abandoned. So is every stream read below.
            chunks = until_interrupted(self.interrupt, self._send(), within)
            try:
                async for chunk in chunks:
                    if isinstance(chunk, ev.ContextFitted):
                        self.spend.add(chunk.usage)  # what a summary cost
                        yield self._event(chunk)
                    elif isinstance(chunk, TextChunk):
                        yield self._event(ev.TextDelta(chunk.text))
                    elif isinstance(chunk, ReasoningChunk):
                        yield self._event(ev.ReasoningDelta(chunk.text))
                    elif isinstance(chunk, Retrying):
                        # A failed attempt's tokens are spent too (or unknown, never 0).
                        self.spend.add(chunk.usage)
                        if not self._interrupted():  # see below
                            yield self._event(ev.ProviderRetry(chunk.attempt, chunk.wait_secs,
                                                               chunk.error, usage=chunk.usage))
                    elif isinstance(chunk, Completed):
                        response = chunk.response
            except BaseException:
                await abandon(chunks)
                raise
        except TetherError as error:  # ProviderError and a scripted model's exhaustion
            # Once the run is interrupted, a failure (or a retry) is not the run's: a model
            # server in the terminal's process group gets the same Ctrl-C, and its broken
            # connection is a consequence of the interrupt.
            if isinstance(error, ProviderError):
                self.spend.add(attempt_usage(error))  # the last attempt's, as for a retry
            yield Stopped(StopCause.INTERRUPTED) if self._interrupted() else \
                Stopped(StopCause.ERROR, error=error)
            return
        if response is None:
            if self._interrupted():
                yield Stopped(StopCause.INTERRUPTED)  # mid-answer: the partial one is dropped
                return
            name = self.agent.model.name
            yield Stopped(StopCause.ERROR, error=MalformedResponseError(
                f"{name}: the response ended without completing", provider=name))
            return

        message = response.message
        conv.append(message)
        self.spend.add(response.usage)
        yield self._event(ev.ModelResponded(
            message, response.stop_reason, response.usage, model=response.model,
            response_id=response.id, raw_stop_reason=response.raw_stop_reason))
        yield self._event(ev.UsageUpdated(response.usage, self.spend.usage))
        self.text = message.text

        calls = message.tool_calls
        if response.stop_reason == "max_tokens" and self.spend.tokens_spent() is None:
            for item in self._cut_short(calls, response.raw_stop_reason):
                yield item
            return
        if not calls:
            if response.stop_reason == "max_tokens":
                yield Stopped(StopCause.OUTPUT_TOKEN_BUDGET)  # the run's budget cut the answer
            else:
                yield self.ending.after_text(self.text)
            return
        # On the last turn, results no model would read: calls run for nothing, unless one
        # of them can give the run its answer.
        reached = self._reached(last_turn_runs=self.ending.ends_with(calls))
        if reached is not None:
            yield self._close_unrun(calls, reached.why)
            yield Stopped(reached.bound.cause)
            return
        repeated = self.repeats.given_up(c for c in calls if not self.ending.ends_with((c,)))
        if repeated is not None:
            for item in self._gave_up(calls, *repeated):
                yield item
            return
        items = self._calls(calls)
        try:
            async for item in items:
                yield item
        except BaseException:
            await abandon(items)
            raise

    async def _calls(
        self, calls: Sequence[ToolCall],
        decisions: dict[int, tuple[PendingCall, Decision]] | None = None,
    ) -> AsyncIterator[ev.Event | TurnOutcome]:
        """Judge every call of a turn (``tether.gate``), ask where needed, then pause, or
        run the allowed ones side by side and append all results in call order.

        Every verdict is keyed by the call's position in the turn, never by its id (see
        ``tether.gate``); results still carry the call's own id, which is what the wire
        needs. ``decisions`` (a resumed turn) are a host's answers, by position."""
        done: dict[int, Done] = {}
        try:
            items = self._judge_and_run(calls, decisions or {}, done)
            try:
                async for item in items:
                    yield item
            except BaseException:
                await abandon(items)
                raise
        finally:
            # The run's records of the turn in call order, whatever order the calls finished
            # in (so a run reads the same replayed, durable or not); kept on a pause or a
            # cancellation too: nothing that ran is lost.
            self.records.extend(done[position].record for position in sorted(done))

    async def _judge_and_run(
        self, calls: Sequence[ToolCall], decisions: dict[int, tuple[PendingCall, Decision]],
        done: dict[int, Done],
    ) -> AsyncIterator[ev.Event | TurnOutcome]:
        conv, settings, tools = self.conversation, self.settings, self.tools
        # The texts seen are traced only where untrusted text could have chosen a value: once
        # the conversation holds some, or a call of this turn reads some (any call then, not
        # only a send: a result is a trusted source only if its call's values trace). Walking
        # the whole conversation for them is skipped on a turn with nothing exposed.
        traced = forecast(conv.taint, (tools[c.name].capabilities for c in calls
                                       if c.name in tools)).untrusted
        turn = gate.view_turn(calls, tools, conv.taint, settings.security,
                              settings.permission_mode,
                              conv.sources(settings.system_prompt) if traced else ())
        asking = gate.Asking(self.agent.approver, settings.permission_mode,
                             settings.approval_timeout_secs, conv.session_approvals,
                             self.interrupt)
        decisions = dict(decisions)
        allowed: list[Allowed] = []
        deferred: list[PendingCall] = []
        decided: list[PendingCall] = []  # calls a host's decision answered in this turn
        for position, call in enumerate(calls):
            tool = turn.tools.get(call.name)
            yield self._event(ev.ToolCallRequested(
                call, tool.spec.display_name if tool else call.name))
            checked = gate.check(call, position, turn)
            for event in checked.events:
                yield self._event(event)
            verdict: gate.Verdict = checked.verdict
            if isinstance(verdict, gate.Ask):
                answer = decisions.pop(position, None)
                given = gate.given_decision(answer, call, verdict)
                if isinstance(given, ev.Notice):
                    yield self._event(given)
                    given = None
                elif given is not None and answer is not None:
                    decided.append(answer[0])
                items = gate.decide(call, position, verdict, asking, conv.taint, given)
                try:
                    async for item in items:
                        if isinstance(item, gate.Run | gate.Refuse | gate.Defer):
                            verdict = item
                        else:
                            yield self._event(item)
                except BaseException:
                    await abandon(items)
                    raise
            if isinstance(verdict, gate.Refuse):
                done[position] = refused = settled(
                    call, verdict.status, self._noted(call, verdict.status, verdict.text))
                yield self._event(ev.ToolFinished(call.id, call.name, verdict.status,
                                                  refused.result, 0.0))
            elif isinstance(verdict, gate.Defer):
                deferred.append(verdict.pending)
            elif isinstance(verdict, gate.Run):
                allowed.append(Allowed(position, call, verdict.tool, verdict.arguments,
                                       gate.arguments_traced(position, verdict.tool,
                                                             verdict.arguments, turn)))

        if deferred:
            # Nothing of this turn runs until every pending call has a decision: the turn
            # is resumed whole (see Agent.resume). Calls a host decided this time are
            # pending again, so the next resume decides the whole turn, and sees it.
            self.pending = sorted([*decided, *deferred], key=lambda p: p.position or 0)
            conv.pending = list(self.pending)
            yield self._event(ev.RunPaused(tuple(p.call_id for p in self.pending)))
            yield Paused()
            return

        if allowed and self._interrupted():
            # Interrupted while the turn was judged (Ctrl-C at an approval prompt): nothing
            # starts after it. Each call still gets its result: the conversation stays valid.
            for waiting in allowed:
                done[waiting.position] = unrun = settled(
                    waiting.call, "denied", "Not run: the run was interrupted before it started.")
                yield self._event(ev.ToolFinished(waiting.call.id, waiting.call.name, "denied",
                                                  unrun.result, 0.0))
            allowed = []
        # Allowed calls side by side; their events (a sub-agent's) stream through.
        observer = self.observer
        events = run_calls(allowed, conv, settings, self._scope, done,
                           None if observer is None else observer.tool_context, self._noted)
        try:
            async for event in events:
                yield self._event(event)
        except BaseException:
            await abandon(events)
            raise
        conv.pending = []
        conv.append(Message("tool", tuple(done[i].result for i in range(len(calls)))))
        yield self.ending.after_calls()

    # --- what the loop consults --------------------------------------------------------------

    def _reached(self, *, last_turn_runs: bool = False) -> Reached | None:
        """The first bound this run has reached (``tether.bounds.BOUNDS``)."""
        progress = Progress(self.turns, self.settings.max_turns, self.interrupt, self.spend)
        return first_reached(progress, skip=_MAX_TURNS if last_turn_runs else _NOTHING)

    def _interrupted(self) -> bool:
        return self.interrupt is not None and self.interrupt.is_set()

    def _noted(self, call: ToolCall, status: ev.ToolStatus, content: str) -> str:
        """A call's result as the model reads it: with a note when the same call has failed,
        or returned the same result, ``max_repeated_failures`` times in this run. A call
        that can give a structured run its answer is left to its own retries."""
        if self.ending.ends_with((call,)):
            return content
        return self.repeats.finished(call, status, content)

    def _scope(self, call: ToolCall) -> RunScope:
        """The run a call belongs to, as its tool sees it (``ToolContext.run``)."""
        return RunScope(self.agent, (*self.path, call.id), self.interrupt, self.spend)

    def _tools(self) -> dict[str, Tool]:
        return self.ending.tools(self.agent.tools)

    def _send(self) -> AsyncIterator[StreamChunk | ev.ContextFitted]:
        """The next request, fitted into the model's window (the conversation stays whole:
        only what is sent is fitted), and the model's answer to it."""
        pins = (self.start,) if self.prompt_sent else ()
        return self.fitter.stream(self._request(), taint=self.conversation.taint, pins=pins,
                                  owner=self.conversation)

    def _request(self) -> ModelRequest:
        settings = self.settings
        specs = [t.spec for t in self.tools.values()]
        choice = self.ending.tool_choice()
        return ModelRequest(
            messages=tuple(self.conversation.messages),
            system=settings.system_prompt,
            tools=specs,
            tool_choice=choice if specs or choice == "none" else "auto",
            max_output_tokens=self._allowance(),
            temperature=settings.temperature,
            stream=self.stream_requests,
        )

    def _allowance(self) -> int | None:
        """The output tokens the next request may ask for: the fewest any budget on the
        chain has left (at least one), None for no bound."""
        left = self.spend.output_tokens_left()
        return max(1, left) if left is not None else None

    def _offered_taint(self) -> ev.Event | None:
        """Tools an untrusted source described (an untrusted MCP server's) show the model
        their text with every request: the conversation has seen untrusted text from the
        first turn that offers them. The change is an event, so the store keeps it."""
        conv = self.conversation
        if conv.taint.untrusted:
            return None
        servers = sorted({t.server or t.name for t in self.tools.values()
                          if t.spec_from_outside})
        if not servers:
            return None
        before = conv.taint
        conv.grow_taint(Taint(untrusted=True))
        return self._event(ev.TaintChanged(
            before, conv.taint, f"tools offered by untrusted MCP server(s) {', '.join(servers)}"))

    def _cut_short(self, calls: Sequence[ToolCall],
                   raw: str | None) -> list[ev.Event | TurnOutcome]:
        """The answer was cut by an output token limit that is not the run's own budget (the
        provider's or the server's) before the model finished it: the run stops, its text
        is what was written. No call of the answer runs: the last one's arguments may be
        cut too, and cut arguments can still parse (half a file's content, the first words
        of a command), and the model meant more calls than it wrote."""
        said = f" (stop reason {raw[:40]!r})" if raw else ""
        out: list[ev.Event | TurnOutcome] = []
        if calls:
            out.append(self._close_unrun(calls, "the answer that made it was cut short by "
                                                "the output token limit"))
        out.append(self._event(ev.Notice(
            "warning", f"the model's answer was cut by its output token limit{said} before "
                       f"it was complete; ask for a shorter answer, or raise the limit "
                       f"(max_output_tokens, tether run --max-tokens)", source="model")))
        out.append(Stopped(StopCause.TRUNCATED))
        return out

    def _gave_up(self, calls: Sequence[ToolCall], repeated: ToolCall,
                 failed: int) -> list[ev.Event | TurnOutcome]:
        """The model made a call again that failed ``failed`` times in this run, after its
        last result told it not to: the run ends, and nothing of this turn runs."""
        name = repeated.name if len(repeated.name) <= 64 else repeated.name[:64] + "..."
        return [
            self._close_unrun(calls, f"the run ended: the call to {name} was made again "
                                     f"with the same arguments after failing {failed} times"),
            self._event(ev.Notice(
                "warning", f"the model made the same call ({name!r} with the same "
                           f"arguments) again after it failed {failed} times "
                           f"(max_repeated_failures); the run stops", source="agent")),
            Stopped(StopCause.REPEATED_FAILURE)]

    def _close_unrun(self, calls: Sequence[ToolCall], why: str) -> ev.Event:
        """Answer calls that will never run, so the conversation stays valid to continue."""
        results = tuple(
            ToolResult(c.id, c.name, f"Not run: {why}.", True, "trusted") for c in calls)
        self.conversation.append(Message("tool", results))
        return self._event(ev.Notice("info", f"{len(calls)} tool call(s) not run: {why}"))

    # --- events and the result ----------------------------------------------------------------

    def _event(self, event: ev.Event) -> ev.Event:
        if self.path and not event.path:
            event = dataclasses.replace(event, path=self.path)
        self.events.append(event)
        return event

    def _finish(self, outcome: TurnOutcome) -> ev.Event:
        text = self.text
        if isinstance(outcome, Final):
            stop, text = StopCause.COMPLETED, outcome.text
        elif isinstance(outcome, Paused):
            stop = StopCause.PAUSED
        elif isinstance(outcome, Stopped):
            stop = outcome.cause
            text = outcome.text if outcome.text is not None else text
            self.error = outcome.error
        else:  # pragma: no cover - the loop ends on every outcome but RunAgain
            raise AssertionError(f"a run cannot finish on {outcome!r}")
        conv = self.conversation
        result = RunResult(
            text=text,
            stop_cause=stop,
            usage=self.spend.usage,
            turns=self.turns,
            tool_calls=self.records,
            blocked_sends=sum(r.status == "blocked" for r in self.records),
            taint=conv.taint,
            malformed_tool_args=sum(r.status == "invalid_args" for r in self.records),
            conversation=conv,
            new_messages=conv.messages[self.start:],
            # A copy taken before RunFinished joins: the result must not contain the event
            # that contains it (dataclasses.asdict, deepcopy and repr would recurse).
            events=list(self.events),
            error=self.error,
            pending=self.pending,
            output=self.ending.value,
            cost_usd=self.spend.cost(),
        )
        return self._event(ev.RunFinished(result))


_MAX_TURNS = frozenset({"max_turns"})
_NOTHING: frozenset[str] = frozenset()

