"""The agent loop, top to bottom.

One run: the prompt joins the conversation; then, turn by turn, the model is asked, its
answer kept, and every tool call it made passes the gate (lookup -> argument validation ->
trifecta check -> approval -> run). A turn ends in one of three ways: a final answer, more
tool rounds, or a stop with a cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import events as ev
from tether.approval import (
    PERMISSION_MODES,
    ApprovalReason,
    ApprovalRequest,
    Approver,
    Decision,
    PermissionMode,
    ask,
)
from tether.conversation import Conversation, PendingCall
from tether.errors import ConfigError, MalformedResponseError, TetherError
from tether.messages import (
    Image,
    Message,
    Part,
    Text,
    ToolCall,
    ToolResult,
    Trust,
    Usage,
)
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    NamedToolChoice,
    Provider,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    ToolChoice,
)
from tether.result import Prices, RunResult, StopCause, ToolCallRecord
from tether.tools import (
    ArgumentError,
    Tool,
    ToolContext,
    ToolOutput,
    Toolset,
    ToolSpec,
    ensure_tools,
)
from tether.trust import (
    SecurityConfig,
    Taint,
    armed_calls,
    forecast,
    truncate,
    untrusted_block,
)

if TYPE_CHECKING:
    from tether.output import OutputPlan, OutputReservation, OutputSpec, PreparedRun
    from tether.pending import Decisions, PendingState
    from tether.subagents import SubagentProfile


class Agent:
    """An LLM on a tether: a model, tools, and the rules every tool call must pass.

    ::

        agent = Agent(model=OpenAIChat(base_url=..., model="qwen"), tools=[add])
        result = await agent.run("What is 2+3?")
    """

    def __init__(
        self,
        model: Provider,
        tools: Iterable[Tool | Toolset | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        max_turns: int = 40,
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
    ) -> None:
        if max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, not {max_turns}")
        if permission_mode not in PERMISSION_MODES:
            raise ConfigError(
                f"permission_mode must be one of {', '.join(PERMISSION_MODES)}, "
                f"not {permission_mode!r}"
            )
        self.model = model
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.max_output_tokens = max_output_tokens
        self.approver = approver
        self.security = security or SecurityConfig()
        self.permission_mode: PermissionMode = permission_mode
        self.workspace = Path(workspace).resolve()
        self.providers = dict(providers or {})
        self.approval_timeout_secs = approval_timeout_secs
        self.tool_timeout_secs = tool_timeout_secs
        self.temperature = temperature
        self.output_retries = output_retries
        if max_cost_usd is not None and prices is None:
            raise ConfigError("max_cost_usd needs the model's prices (prices=Prices(...), or "
                              "[providers.NAME.prices] in tether.toml)")
        self.max_cost_usd = max_cost_usd
        self.prices = prices
        self._sources = ensure_tools(tools)
        self._static: dict[str, Tool] | None = None
        # What starting the sources (MCP servers) had to say; the next run emits it.
        self.start_notices: list[ev.Notice] = []
        self._shadowed: set[str] = set()
        # Runs of an agent not entered with ``async with`` start the sources nobody started
        # and close them when the last of them ends (see ``_sources_for_run``).
        self._entered = False
        self._run_users = 0
        self._starting: asyncio.Future[None] | None = None
        self._run_started: list[Toolset] = []
        self.subagents = list(subagents)
        if self.subagents:
            from tether.subagents import delegation_tools

            # First among the tool sources: a delegation keeps its name before any server's.
            self._sources[0:0] = delegation_tools(self.subagents, self)
            self._static = None
        self._check_tool_names()

    # --- public API -----------------------------------------------------------------------

    @classmethod
    def from_config(cls, workspace: str | Path = ".", **overrides: Any) -> Agent:
        """Build an agent from tether.toml (user file, ./tether.toml, TETHER_* env)."""
        from tether.config import agent_from_config

        return agent_from_config(workspace=workspace, **overrides)

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools as they are now (MCP servers may change theirs during a run)."""
        if self._static is not None:
            return self._static
        current: dict[str, Tool] = {}
        dynamic = False
        for source in self._sources:
            if isinstance(source, Tool):
                current[source.name] = source
        for source in self._sources:
            if isinstance(source, Tool):
                continue
            dynamic = True
            for t in source.tools():
                if t.name not in current:
                    current[t.name] = t
                elif current[t.name] is not t and t.name not in self._shadowed:
                    # Never silently: the first tool of a name keeps it (your own tools
                    # before any server's), and the user hears about the other one.
                    self._shadowed.add(t.name)
                    self.start_notices.append(ev.Notice(
                        "warning", f"two tools are named {t.name!r}; the one from "
                                   f"{getattr(source, 'name', source)!r} is not offered",
                        source="tools"))
        if not dynamic:
            self._static = current
        return current

    def add_tools(self, *tools: Tool | Toolset | Callable[..., Any]) -> None:
        self._sources.extend(ensure_tools(tools))
        self._static = None
        self._check_tool_names()

    async def run(
        self,
        prompt: str | Sequence[Part],
        *,
        conversation: Conversation | None = None,
        session: Any = None,
        interrupt: asyncio.Event | None = None,
    ) -> RunResult:
        """Run to an answer or a bound. A provider failure raises (with ``.result`` set).

        Setting ``interrupt`` stops the run with ``stop_cause == "interrupted"``: an answer
        the model is still writing is abandoned (and not kept), calls not yet run are
        answered "not run", a tool already running finishes first. The conversation stays
        valid to continue."""
        result = await _collect(self.stream(prompt, conversation=conversation, session=session,
                                            interrupt=interrupt, _stream_requests=False))
        if result.error is not None:
            result.error.result = result  # type: ignore[attr-defined]
            raise result.error
        return result

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
        session: Any = None,
        interrupt: asyncio.Event | None = None,
        _stream_requests: bool = True,
        _output: OutputPlan | None = None,
        _path: tuple[str, ...] = (),
    ) -> AsyncIterator[ev.Event]:
        """Every event of a run, ending with ``RunFinished``. Provider failures end the run
        with ``stop_cause == "error"`` instead of raising."""
        conversation = _bind_session(conversation, session)
        if isinstance(prompt, str) and not prompt.strip() and not conversation.messages:
            raise TetherError("the prompt is empty: say what the agent should do")
        parts = (Text(prompt),) if isinstance(prompt, str) else tuple(prompt)
        run = _Run(self, conversation, _stream_requests, _output, _path, interrupt=interrupt)
        async with self._sources_for_run():
            async for event in _recorded(run.execute(Message("user", parts)), session):
                yield event

    async def resume(
        self,
        conversation: Conversation | PendingState | Any,
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
        from tether.pending import PendingState, bind_decisions

        session = None
        if isinstance(conversation, PendingState):
            conversation = conversation.conversation
        elif not isinstance(conversation, Conversation):
            session, conversation = conversation, _bind_session(None, conversation)
        bound = bind_decisions(_pending_of(conversation), decisions)
        run = _Run(self, conversation, stream, None, (), decisions=bound)
        async with self._sources_for_run():
            result = await _collect(_recorded(run.execute(None), session))
        if result.error is not None:
            result.error.result = result  # type: ignore[attr-defined]
            raise result.error
        return result

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
        await asyncio.gather(*(close() for close in _source_methods(self._sources, "aclose")))

    async def __aenter__(self) -> Agent:
        """Start every tool source that has ``start()`` (MCP servers), side by side, and keep
        them up across runs until the block ends. A source's ``start()`` may return
        ``Notice`` events (a server that did not start): they are kept in ``start_notices``
        and emitted by the next run. Without ``async with``, each run starts the sources
        nobody started and closes them when it ends."""
        try:
            await self._start_sources(self._sources)
        except BaseException:
            await self._close_providers()
            raise
        self._entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._entered = False
        await self.aclose()

    # --- internals --------------------------------------------------------------------------

    async def _start_sources(self, sources: Sequence[Tool | Toolset]) -> None:
        outcomes = await asyncio.gather(
            *(start() for start in _source_methods(sources, "start")),
            return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            await asyncio.gather(*(close() for close in _source_methods(sources, "aclose")))
            raise failed[0]
        for outcome in outcomes:
            if not isinstance(outcome, BaseException) and outcome:
                self.start_notices.extend(outcome)
        self._static = None

    @contextlib.asynccontextmanager
    async def _sources_for_run(self) -> AsyncIterator[None]:
        """Around one run of an agent not entered with ``async with``: the sources nobody
        started (``started`` is False: MCP servers) start before its first turn and close
        when it ends, or when the last of the runs sharing them ends."""
        if self._entered:
            yield
            return
        if self._run_users == 0:
            idle = [s for s in self._sources
                    if not isinstance(s, Tool) and getattr(s, "started", True) is False]
            self._run_started = idle
            self._starting = asyncio.ensure_future(self._start_sources(idle)) if idle else None
        self._run_users += 1
        try:
            if self._starting is not None:
                await asyncio.shield(self._starting)  # concurrent runs share one start
            yield
        finally:
            self._run_users -= 1
            if self._run_users == 0:
                started, self._run_started, self._starting = self._run_started, [], None
                await asyncio.gather(*(close() for close in _source_methods(started, "aclose")))
                self._static = None

    async def _close_providers(self) -> None:
        await self.model.aclose()
        for provider in self.providers.values():
            await provider.aclose()

    def _check_tool_names(self) -> None:
        seen: set[str] = set()
        for source in self._sources:
            if isinstance(source, Tool):
                if source.name in seen:
                    raise ConfigError(f"two tools are named {source.name!r}; names must be unique")
                seen.add(source.name)


def _source_methods(sources: Iterable[Tool | Toolset], method: str) -> list[Any]:
    return [getattr(s, method) for s in sources
            if not isinstance(s, Tool) and getattr(s, method, None) is not None]


def _start_notices(agent: Agent) -> list[ev.Notice]:
    """The start notices not yet emitted, and a warning for sources that were never started
    (their tools are missing: the agent was not entered with ``async with``)."""
    notices, agent.start_notices = agent.start_notices, []
    unstarted = [s for s in agent._sources if getattr(s, "started", True) is False]
    if unstarted:
        names = ", ".join(repr(getattr(s, "name", s)) for s in unstarted)
        notices.append(ev.Notice("warning", f"tool sources not started, their tools are "
                                            f"missing: {names}. Use `async with agent:` "
                                            f"(it starts and closes them)."))
    return notices


async def _until(
    interrupt: asyncio.Event | None, chunks: AsyncIterator[StreamChunk]
) -> AsyncIterator[StreamChunk]:
    """A model's chunks until ``interrupt`` is set; then the response is abandoned at once
    (the provider closes its connection) instead of running to its end.

    The provider's stream is read in a task of its own, so its HTTP client's cancel scopes
    stay in one task, and cancelling that task is how the response is abandoned.
    """
    if interrupt is None:
        async for chunk in chunks:
            yield chunk
        return
    queue: asyncio.Queue[StreamChunk | BaseException | None] = asyncio.Queue()

    async def read() -> None:
        try:
            async for chunk in chunks:
                queue.put_nowait(chunk)
            queue.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # handed over whole: the loop decides what it means
            queue.put_nowait(e)

    async def watch() -> None:
        await interrupt.wait()
        queue.put_nowait(None)  # ends the iteration; the loop sees the interrupt is set

    tasks = (asyncio.create_task(read()), asyncio.create_task(watch()))
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _collect(events: AsyncIterator[ev.Event]) -> RunResult:
    result: RunResult | None = None
    async for event in events:
        if isinstance(event, ev.RunFinished) and not event.path:
            result = event.result
    assert result is not None, "a run always ends with RunFinished"
    return result


def _bind_session(conversation: Conversation | None, session: Any) -> Conversation:
    if session is None:
        return conversation if conversation is not None else Conversation()
    bound: Conversation = session.conversation()
    return bound


def _pending_of(conversation: Conversation) -> list[PendingCall]:
    """The calls a paused conversation waits on, each at its position in the paused turn.

    A conversation saved without them (by an older tether) waits on every unanswered call.
    """
    unanswered = conversation.pending_calls
    if not unanswered:
        return []
    if conversation.pending:
        from tether.pending import place_calls

        return list(place_calls(conversation.pending, unanswered))
    calls = []
    for position, call in enumerate(unanswered):
        try:
            arguments = call.parsed_arguments()
        except ValueError:
            arguments = call.arguments
        calls.append(PendingCall(call.id, call.name, arguments, "needs_approval", "", position))
    return calls


async def _recorded(events: AsyncIterator[ev.Event], session: Any) -> AsyncIterator[ev.Event]:
    """The events, each handed to ``session.record`` (a stored session) before it is seen."""
    record = getattr(session, "record", None) if session is not None else None
    async for event in events:
        if record is not None:
            record(event)
        yield event


class _Run:
    """The state of one run; ``execute`` is the loop."""

    def __init__(
        self,
        agent: Agent,
        conversation: Conversation,
        stream_requests: bool,
        output: OutputPlan | None,
        path: tuple[str, ...],
        decisions: dict[int, tuple[PendingCall, Decision]] | None = None,
        interrupt: asyncio.Event | None = None,
    ) -> None:
        self.agent = agent
        self.interrupt = interrupt
        self.conversation = conversation
        self.stream_requests = stream_requests
        self.output = output
        self.path = path
        # A resumed run's decisions, by the position of the pending call each answers; they
        # apply to the resumed turn only (see ``_handle_calls``).
        self.decisions = decisions or {}
        self.usage = Usage()
        self.turns = 0
        self.records: list[ToolCallRecord] = []
        self.blocked_sends = 0
        self.malformed = 0
        self.events: list[ev.Event] = []
        self.start = len(conversation.messages)
        self.pending: list[PendingCall] = []
        self.error: TetherError | None = None

    async def execute(self, prompt: Message | None) -> AsyncIterator[ev.Event]:
        agent, conv = self.agent, self.conversation
        if prompt is not None:
            conv.pending = []  # a new prompt: no earlier pause can be answered any more
            if any(isinstance(p, Image) for p in prompt.parts):
                conv.grow_taint(Taint(private=True))  # a user's picture is private data
            conv.append(prompt)
        tools = self._turn_tools()
        yield self._event(ev.RunStarted(prompt.text if prompt else "", agent.model.model,
                                        tuple(tools), conv.taint))
        for notice in _start_notices(agent):
            yield self._event(notice)
        offered = self._offered_taint()  # before a resumed turn's calls are checked, too
        if offered is not None:
            yield offered

        # A paused run resumes with the calls it stopped on.
        if prompt is None and conv.pending_calls:
            decisions, self.decisions = self.decisions, {}  # used up by this turn alone
            async for event in self._handle_calls(conv.pending_calls, decisions):
                yield event
            if self.pending:
                yield self._finish(StopCause.PAUSED, "")
                return

        stop: StopCause | None = None
        text = ""
        while stop is None:
            if self._interrupted():
                stop = StopCause.INTERRUPTED
                break
            if self.turns >= agent.max_turns:
                stop = StopCause.MAX_TURNS
                break
            self.turns += 1
            yield self._event(ev.TurnStarted(self.turns))
            offered = self._offered_taint()
            if offered is not None:
                yield offered

            response: ModelResponse | None = None
            try:
                async for chunk in _until(self.interrupt, agent.model.stream(self._request())):
                    if isinstance(chunk, TextChunk):
                        yield self._event(ev.TextDelta(chunk.text))
                    elif isinstance(chunk, ReasoningChunk):
                        yield self._event(ev.ReasoningDelta(chunk.text))
                    elif isinstance(chunk, Retrying):
                        yield self._event(ev.ProviderRetry(chunk.attempt, chunk.wait_secs,
                                                           chunk.error))
                    elif isinstance(chunk, Completed):
                        response = chunk.response
            except TetherError as error:  # ProviderError and a scripted model's exhaustion
                self.error = error
                stop = StopCause.ERROR
                break
            if response is None and self._interrupted():
                stop = StopCause.INTERRUPTED  # mid-answer: the partial answer is dropped
                break
            if response is None:
                self.error = MalformedResponseError(
                    f"{agent.model.name}: the response ended without completing",
                    provider=agent.model.name,
                )
                stop = StopCause.ERROR
                break

            message = response.message
            conv.append(message)
            self.usage = self.usage + response.usage
            yield self._event(ev.ModelResponded(message, response.stop_reason, response.usage))
            yield self._event(ev.UsageUpdated(response.usage, self.usage))
            text = message.text

            calls = message.tool_calls
            if not calls:
                if self.output is not None:
                    nudge = self.output.on_prose(text)
                    if nudge is not None:
                        conv.append(Message.user(nudge))
                        continue
                    stop = StopCause.NO_OUTPUT
                elif response.stop_reason == "max_tokens" and self._budget_spent():
                    stop = StopCause.OUTPUT_TOKEN_BUDGET
                else:
                    stop = StopCause.COMPLETED if text.strip() else StopCause.NO_OUTPUT
                break

            if self._interrupted():
                yield self._close_unrun(calls, "the run was interrupted")
                stop = StopCause.INTERRUPTED
                break
            if self._budget_spent():
                yield self._close_unrun(calls, "the run's output token budget is spent")
                stop = StopCause.OUTPUT_TOKEN_BUDGET
                break
            if self._cost_spent():
                yield self._close_unrun(calls, f"the run's cost budget "
                                               f"(max_cost_usd={agent.max_cost_usd:g}) is spent")
                stop = StopCause.COST_BUDGET
                break
            answering = self.output is not None and any(self.output.owns(c.name) for c in calls)
            if self.turns >= agent.max_turns and not answering:
                # Results the model would never read: do not run side effects for nothing.
                yield self._close_unrun(calls, f"the run reached max_turns ({agent.max_turns})")
                stop = StopCause.MAX_TURNS
                break

            async for event in self._handle_calls(calls):
                yield event
            if self.pending:
                stop = StopCause.PAUSED
            elif self.output is not None and self.output.done:
                stop = StopCause.COMPLETED if self.output.succeeded else StopCause.NO_OUTPUT
                text = ""

        yield self._finish(stop, text)

    # --- one turn's calls: the gate --------------------------------------------------------

    async def _handle_calls(
        self, calls: Sequence[ToolCall],
        decisions: dict[int, tuple[PendingCall, Decision]] | None = None,
    ) -> AsyncIterator[ev.Event]:
        """Check every call of a turn, ask where needed, run the allowed ones concurrently,
        then append all results in call order.

        A call is known by its position in the turn, never by its id: ids are whatever the
        model or the server wrote, and two calls (of this turn, or of an earlier one) may
        claim the same one. Every verdict (armed, decided, refused, its result) is keyed by
        position; results still carry the call's own id, which is what the wire needs.
        ``decisions`` (a resumed turn) are a host's answers, by position."""
        agent, conv = self.agent, self.conversation
        tools = self._turn_tools()
        decisions = dict(decisions or {})
        known = [i for i, c in enumerate(calls) if c.name in tools]
        capabilities = [tools[calls[i].name].capabilities for i in known]
        turn_forecast = forecast(conv.taint, capabilities)
        armed = dict(zip(known, armed_calls(conv.taint, capabilities), strict=True))

        results: dict[int, ToolResult] = {}
        runnable: list[tuple[int, ToolCall, Tool, dict[str, Any]]] = []
        decided: list[PendingCall] = []  # calls a host's decision answered in this turn
        for position, call in enumerate(calls):
            tool = tools.get(call.name)
            yield self._event(ev.ToolCallRequested(
                call, tool.spec.display_name if tool else call.name))

            # 1. lookup
            if tool is None:
                available = ", ".join(sorted(tools)) or "none"
                yield self._refuse(results, position, call, "unknown_tool",
                                   f"Error: there is no tool named {call.name!r}. "
                                   f"Available tools: {available}.")
                continue

            # 2. argument validation (the answering tool of structured output included)
            try:
                arguments = tool.validate(call.parsed_arguments())
            except ValueError as e:  # json's errors and ArgumentError are both ValueErrors
                self.malformed += 1
                what = ("the arguments are not valid JSON" if not isinstance(e, ArgumentError)
                        else "the arguments do not match the tool's schema")
                content = f"Error: {what}: {e}. Call {call.name} again with corrected arguments."
                if self.output is not None and self.output.owns(call.name):
                    content = self.output.on_invalid(str(e)) or content
                yield self._refuse(results, position, call, "invalid_args", content)
                continue
            if self.output is not None and self.output.owns(call.name):
                content, valid = self.output.on_answer(arguments)
                yield self._settle(results, position, call,
                                   "ok" if valid else "invalid_args", content, is_error=not valid)
                continue

            # 3. the trifecta interlock
            ask_reason: ApprovalReason | None = None
            explanation = ""
            if armed[position]:
                policy = agent.security.trifecta
                why = ("this call can send data out, and the conversation holds private data "
                       "and untrusted text, so it could leak the private data")
                if policy == "block":
                    self.blocked_sends += 1
                    yield self._event(ev.TrifectaBlocked(call.id, call.name, turn_forecast,
                                                         policy, why))
                    yield self._refuse(
                        results, position, call, "blocked",
                        f"Blocked by policy: {why}. It was not run. To allow such calls, set "
                        f"security.trifecta = \"ask\" (a person decides) or \"allow\"; or do "
                        f"this step in a fresh conversation without the untrusted text.")
                    continue
                if policy == "ask":
                    yield self._event(ev.TrifectaBlocked(call.id, call.name, turn_forecast,
                                                         policy, why + "; asking the approver"))
                    ask_reason, explanation = "trifecta", f"Trifecta check: {why}."
                if policy == "allow":
                    yield self._event(ev.TrifectaWaived(call.id, call.name, turn_forecast, why))

            # 4. permission mode and approval
            if agent.permission_mode == "read-only" and not tool.read_only:
                yield self._event(ev.ApprovalDecided(call.id, call.name, False, "deny",
                                                     "permission_mode", "read-only mode"))
                yield self._refuse(
                    results, position, call, "denied",
                    f"Blocked by policy: {tool.spec.display_name} can change things and the "
                    f"agent runs in read-only mode. It was not run.")
                continue
            if ask_reason is None and tool.needs_approval:
                ask_reason = "needs_approval"
                explanation = f"{tool.spec.display_name} needs approval before it runs."
            if ask_reason is not None:
                decision: Decision | None = None
                answer = decisions.pop(position, None)
                given = _given_decision(answer, call, tool, arguments, ask_reason)
                if isinstance(given, ev.Notice):
                    yield self._event(given)
                    given = None
                elif given is not None and answer is not None:
                    decided.append(answer[0])
                async for event in self._approve(call, tool, arguments, ask_reason, explanation,
                                                 given):
                    if isinstance(event, Decision):
                        decision = event
                    else:
                        yield event
                assert decision is not None
                if decision.scope == "defer":
                    self.pending.append(PendingCall(call.id, call.name, arguments, ask_reason,
                                                    explanation, position))
                    continue
                if not decision.allowed:
                    yield self._refuse(results, position, call, "denied",
                                       decision.reason or "denied")
                    continue
            runnable.append((position, call, tool, arguments))

        if self.pending:
            # Nothing of this turn runs until every pending call has a decision: the turn
            # is resumed whole (see Agent.resume). Calls a host decided this time are
            # pending again, so the next resume decides the whole turn, and sees it.
            self.pending = sorted([*decided, *self.pending], key=lambda p: p.position or 0)
            conv.pending = list(self.pending)
            yield self._event(ev.RunPaused(tuple(p.call_id for p in self.pending)))
            return

        # 5. run: allowed calls side by side; their events (a sub-agent's) stream through.
        async for event in self._run_tools(runnable, results):
            yield event
        conv.pending = []
        conv.append(Message("tool", tuple(results[i] for i in range(len(calls)))))

    async def _approve(
        self, call: ToolCall, tool: Tool, arguments: dict[str, Any], reason: ApprovalReason,
        explanation: str, given: Decision | None = None,
    ) -> AsyncIterator[ev.Event | Decision]:
        """Yields the approval events and, last, the Decision. ``given`` is a host's
        decision for exactly this call (a resumed run)."""
        agent, conv = self.agent, self.conversation
        if given is not None:
            decision, by = given, "approver"
        elif reason == "needs_approval" and call.name in conv.session_approvals:
            decision, by = Decision.allow(), "session_cache"
        elif reason == "needs_approval" and agent.permission_mode == "allow":
            decision, by = Decision.allow(), "permission_mode"
        elif agent.approver is None:
            how = ("set security.trifecta = \"allow\" to waive the check, or run with an "
                   "approver" if reason == "trifecta" else
                   "run with an approver, or use permission_mode=\"allow\" (tether run --yes)")
            decision, by = Decision.deny(
                f"Blocked by policy: {tool.spec.display_name} needs approval and there is "
                f"nobody to ask. It was not run. To allow it, {how}."), "policy"
        else:
            request = ApprovalRequest(call.id, call.name, tool.spec.display_name, arguments,
                                      reason, explanation, conv.taint, tool.capabilities,
                                      tool.cache_approval)
            yield self._event(ev.ApprovalRequested(call.id, call.name, tool.spec.display_name,
                                                   arguments, reason, conv.taint))
            decision, by = await ask(agent.approver, request, agent.approval_timeout_secs)
            if decision.scope == "deny":
                said = decision.reason or "no reason given"
                # An approver that failed or timed out did not refuse: the gate failed closed.
                who = "Denied by the user" if by == "approver" else "Blocked by policy"
                decision = Decision.deny(f"{who}: {said}. "
                                         f"{tool.spec.display_name} was not run.")
        if decision.scope == "session" and reason == "needs_approval" and tool.cache_approval:
            conv.session_approvals.add(call.name)
        yield self._event(ev.ApprovalDecided(call.id, call.name, decision.allowed,
                                             decision.scope, by, decision.reason))
        yield decision

    async def _run_tools(
        self, runnable: list[tuple[int, ToolCall, Tool, dict[str, Any]]],
        results: dict[int, ToolResult],
    ) -> AsyncIterator[ev.Event]:
        if not runnable:
            return
        queue: asyncio.Queue[ev.Event | None] = asyncio.Queue()

        async def emit(event: ev.Event) -> None:
            queue.put_nowait(event)

        async def run_one(position: int, call: ToolCall, tool: Tool,
                          arguments: dict[str, Any]) -> None:
            try:
                results[position] = await self._run_tool(call, tool, arguments, emit)
            finally:
                queue.put_nowait(None)

        tasks = [asyncio.create_task(run_one(*item)) for item in runnable]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is None:
                    remaining -= 1
                else:
                    yield self._event(item)
        finally:
            for task in tasks:
                task.cancel()
            if not all(task.done() for task in tasks):
                await asyncio.wait(tasks)  # a cancelled run: its tools clean up first
        for task in tasks:
            task.result()  # re-raise what the gate itself got wrong; tools' errors are results

    async def _run_tool(
        self, call: ToolCall, tool: Tool, arguments: dict[str, Any],
        emit: Callable[[ev.Event], Any],
    ) -> ToolResult:
        agent, conv = self.agent, self.conversation
        await emit(ev.ToolStarted(call.id, call.name, tool.spec.display_name, arguments))
        ctx = ToolContext(call.id, call.name, conv.taint, agent.workspace, agent.security,
                          emit, {"agent": agent, "path": (*self.path, call.id),
                                 "interrupt": self.interrupt})
        started = time.perf_counter()
        output = await _call_handler(call.name, tool, arguments, ctx, agent.tool_timeout_secs)
        if output.usage is not None:
            self.usage = self.usage + output.usage
        from_outside = output.from_outside if output.from_outside is not None \
            else tool.capabilities.untrusted_input
        before = conv.taint
        conv.grow_taint(before.after_call(tool.capabilities, content_from_outside=from_outside))
        if output.taint is not None:  # a sub-agent's own exposure
            conv.grow_taint(output.taint)
        if conv.taint != before:
            await emit(ev.TaintChanged(before, conv.taint, call.name))
        content = truncate(output.content, agent.security.max_result_chars)
        trust: Trust = "untrusted" if from_outside else "trusted"
        if trust == "untrusted" and agent.security.mark_untrusted_output:
            content = untrusted_block(tool.spec.display_name, content)
        result = ToolResult(call.id, call.name, content, output.is_error, trust,
                            output.structured)
        status: ev.ToolStatus = "error" if output.is_error else "ok"
        self.records.append(ToolCallRecord(call.id, call.name, arguments, status, result.content))
        await emit(ev.ToolFinished(call.id, call.name, status, result,
                                   time.perf_counter() - started))
        return result

    def _refuse(self, results: dict[int, ToolResult], position: int, call: ToolCall,
                status: ev.ToolStatus, content: str) -> ev.Event:
        """A call that did not run; its result tells the model why. Taint is unchanged."""
        return self._settle(results, position, call, status, content, is_error=True)

    def _settle(self, results: dict[int, ToolResult], position: int, call: ToolCall,
                status: ev.ToolStatus, content: str, is_error: bool = False) -> ev.Event:
        """Record the result of a call the gate answered itself; returns its event."""
        try:
            arguments = call.parsed_arguments()
        except ValueError:
            arguments = call.arguments
        self.records.append(ToolCallRecord(call.id, call.name, arguments, status, content))
        results[position] = result = ToolResult(call.id, call.name, content, is_error, "trusted")
        return self._event(ev.ToolFinished(call.id, call.name, status, result, 0.0))

    def _close_unrun(self, calls: Sequence[ToolCall], why: str) -> ev.Event:
        """Answer calls that will never run, so the conversation stays valid to continue."""
        results = tuple(
            ToolResult(c.id, c.name, f"Not run: {why}.", True, "trusted") for c in calls)
        self.conversation.append(Message("tool", results))
        return self._event(ev.Notice("info", f"{len(calls)} tool call(s) not run: {why}"))

    # --- requests -------------------------------------------------------------------------

    def _turn_tools(self) -> dict[str, Tool]:
        tools = self.agent.tools
        if self.output is None:
            return tools
        return self.output.tools(tools)

    def _request(self) -> ModelRequest:
        agent = self.agent
        tools = self._turn_tools()
        specs: list[ToolSpec] = [t.spec for t in tools.values()]
        choice: ToolChoice = "auto"
        if self.output is not None:
            choice = self.output.tool_choice()
        max_tokens = agent.max_output_tokens
        if max_tokens is not None:
            max_tokens = max(1, max_tokens - self.usage.output_tokens)
        return ModelRequest(
            messages=tuple(self.conversation.messages),
            system=agent.system_prompt,
            tools=specs,
            tool_choice=choice if specs or choice == "none" else "auto",
            max_output_tokens=max_tokens,
            temperature=agent.temperature,
            stream=self.stream_requests,
        )

    def _offered_taint(self) -> ev.Event | None:
        """Tools an untrusted source described (an untrusted MCP server's) show the model
        their text with every request: the conversation has seen untrusted text from the
        first turn that offers them. The change is an event, so the store keeps it."""
        conv = self.conversation
        if conv.taint.untrusted:
            return None
        sources = sorted({t.source_name or t.name for t in self._turn_tools().values()
                          if t.spec_from_outside})
        if not sources:
            return None
        before = conv.taint
        conv.grow_taint(Taint(untrusted=True))
        return self._event(ev.TaintChanged(
            before, conv.taint, f"tools offered by untrusted MCP server(s) {', '.join(sources)}"))

    def _interrupted(self) -> bool:
        return self.interrupt is not None and self.interrupt.is_set()

    def _cost_spent(self) -> bool:
        agent = self.agent
        return (agent.max_cost_usd is not None and agent.prices is not None
                and agent.prices.cost(self.usage) >= agent.max_cost_usd)

    def _budget_spent(self) -> bool:
        budget = self.agent.max_output_tokens
        return budget is not None and self.usage.output_tokens >= budget

    # --- events and the result ----------------------------------------------------------------

    def _stamp(self, event: ev.Event) -> ev.Event:
        if self.path and not event.path:
            import dataclasses

            return dataclasses.replace(event, path=self.path)
        return event

    def _event(self, event: ev.Event) -> ev.Event:
        event = self._stamp(event)
        self.events.append(event)
        return event

    def _finish(self, stop: StopCause, text: str) -> ev.Event:
        conv = self.conversation
        result = RunResult(
            text=text,
            stop_cause=stop,
            usage=self.usage,
            turns=self.turns,
            tool_calls=self.records,
            blocked_sends=self.blocked_sends,
            taint=conv.taint,
            malformed_tool_args=self.malformed,
            conversation=conv,
            new_messages=conv.messages[self.start:],
            # A copy taken before RunFinished joins: the result must not contain the event
            # that contains it (dataclasses.asdict, deepcopy and repr would recurse).
            events=list(self.events),
            error=self.error,
            pending=self.pending,
            output=self.output.value if self.output is not None else None,
            cost_usd=self.agent.prices.cost(self.usage) if self.agent.prices else None,
        )
        return self._event(ev.RunFinished(result))


def _given_decision(
    given: tuple[PendingCall, Decision] | None, call: ToolCall, tool: Tool,
    arguments: dict[str, Any], reason: ApprovalReason,
) -> Decision | ev.Notice | None:
    """A host's decision, if it answers this very call: the pending call it was made for
    has this call's id, tool, arguments and reason for asking. Otherwise a Notice saying it
    was not applied (the call is then asked about as if no decision had been given)."""
    if given is None:
        return None
    pending, decision = given
    same = pending.call_id == call.id and pending.tool == call.name \
        and pending.reason == reason and _same_arguments(tool, pending.arguments, arguments)
    if same:
        return decision
    return ev.Notice("warning", f"the decision given for pending call {pending.call_id} "
                                f"({pending.tool}) was not applied: the call in its place is "
                                f"{call.name} with other arguments or another reason to ask; "
                                f"it is asked about anew", source="approval")


def _same_arguments(tool: Tool, decided: Any, arguments: dict[str, Any]) -> bool:
    """Whether the arguments a decision was made for are the ones that would run. Both are
    compared as the tool's validator shapes them (a saved state holds them as JSON)."""
    import copy

    if decided == arguments:
        return True
    try:
        return tool.validate(copy.deepcopy(decided)) == arguments
    except ValueError:
        return False


async def _call_handler(name: str, tool: Tool, arguments: dict[str, Any], ctx: ToolContext,
                        timeout: float | None) -> ToolOutput:
    """What the tool's handler returned, or an error output the model can act on: a
    failure, a timeout, a cancellation the run did not ask for.

    The handler runs in a task of its own, so a timeout stops the wait at once: a handler
    that ignores its cancellation (or a sync tool's thread, which cannot be stopped) is
    abandoned, not waited for. Only the run's own cancellation propagates.
    """
    try:
        task = asyncio.ensure_future(tool.handler(arguments, ctx))
    except Exception as e:  # a handler that is not async, or fails before its first await
        return ToolOutput(f"Error: {name} failed: {_described(e)}", is_error=True)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:  # the run is cancelled: so is the tool, which may clean up
        task.cancel()
        await asyncio.wait({task})
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_forget)
        assert timeout is not None
        return ToolOutput(
            f"Error: {name} did not finish within {timeout:g}s. The run stopped waiting for "
            f"it, but nothing it did was undone: it may still be running, and what it does "
            f"may still take effect. Check before you call it again.", is_error=True)
    if task.cancelled():  # the handler raised CancelledError itself: the run goes on
        return ToolOutput(f"Error: {name} failed: it was cancelled (CancelledError) while "
                          f"the run was not; it may not have finished its work.",
                          is_error=True)
    try:
        value = task.result()
        return value if isinstance(value, ToolOutput) else ToolOutput(_render(value))
    except Exception as e:  # a tool's failure is the model's information, not a crash
        return ToolOutput(f"Error: {name} failed: {_described(e)}", is_error=True)


def _described(error: Exception) -> str:
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # an exception whose own message fails
        return f"{type(error).__name__} (its message could not be shown)"


def _forget(task: asyncio.Future[Any]) -> None:
    """An abandoned handler's outcome is nobody's: retrieve it so asyncio does not warn."""
    if not task.cancelled():
        task.exception()


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "(no output)"
    dump = getattr(value, "model_dump_json", None)
    if dump is not None:
        return str(dump())
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


__all__ = [
    "Agent",
    "Conversation",
    "NamedToolChoice",
    "PendingCall",
    "Prices",
    "RunResult",
    "StopCause",
    "ToolCallRecord",
]
