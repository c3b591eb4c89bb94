"""The loop, top to bottom: a run's events, turn by turn, driving a ``RunHost``.

One run: the prompt joins the conversation; then, turn by turn, the bounds are checked, the
model is asked, its answer kept, and the gate judges the turn's tool calls
(``tether.run.gate.judge_turn``: lookup -> argument validation -> provenance or the
trifecta interlock -> permission mode -> approval); the turn pauses for a host's
decisions, or the allowed calls run side by side (``tether.run.execution``). Every turn
ends in a ``TurnOutcome`` (``tether.outcome``): the answer, another turn, a pause for
decisions, or a stop with a cause. The bounds are one table (``tether.bounds``), checked
before every model request and before every batch of calls. What the loop reads of the
agent that runs it is the ``RunHost`` protocol (``tether.run.host``): it never imports the
``Agent``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether import events as ev
from tether.approval import Decision
from tether.bounds import Progress, Reached, Spend, first_reached
from tether.conversation import Conversation, PendingCall, SessionLike
from tether.errors import HookError, MalformedResponseError, ProviderError, TetherError
from tether.messages import Image, Message, Part, Text, ToolCall, ToolResult, Usage
from tether.outcome import Final, Paused, RunAgain, StopCause, Stopped, TurnOutcome
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    attempt_usage,
)
from tether.result import RunResult, ToolCallRecord
from tether.run import gate
from tether.run.ending import TEXT_ENDING, Ending
from tether.run.execution import CallEnv, Done, Noting, Ran, run_calls, settled
from tether.run.hooks import (
    RequestView,
    RunEnd,
    amend_request,
    failed,
    observe_response,
    run_ended,
)
from tether.run.host import RunHost
from tether.run.interrupts import abandon, until_interrupted
from tether.run.repeats import Repeats
from tether.run.staged import Staged
from tether.run.turn import Take, Triaged, Unrun, Weigh, hook_failed, triage
from tether.tools.tool import RunScope, Tool
from tether.tools.toolsets import freshen
from tether.trust import Taint


async def run_events(
    host: RunHost,
    prompt: str | Sequence[Part],
    *,
    conversation: Conversation | None = None,
    session: SessionLike | None = None,
    interrupt: asyncio.Event | None = None,
    stream_requests: bool = True,
    ending: Ending | None = None,
    within: RunScope | None = None,
    deps: Any = None,
) -> AsyncGenerator[ev.Event, None]:
    """A run's events: what ``Agent.stream`` and ``Agent.run`` are made of, and the entry
    point for what runs an agent inside tether (structured output, sub-agents, batches).

    ``stream_requests`` asks the provider for a streamed answer; ``ending`` says when the
    run has its answer (a structured-output run's plan; by default its text); ``within``
    is the run this one is delegated from (its path, interrupt, spend and dependencies:
    see ``tether.tools.tool.RunScope``); ``deps`` the host's dependencies, handed to every
    tool of the run (``ToolContext.deps``) and to nothing else.
    """
    if session is not None:
        conversation = session.conversation()
    elif conversation is None:
        conversation = Conversation()
    if isinstance(prompt, str) and not prompt.strip() and not conversation.messages:
        raise TetherError("the prompt is empty: say what the agent should do")
    parts = (Text(prompt),) if isinstance(prompt, str) else tuple(prompt)
    run = _Run(host, conversation, stream_requests=stream_requests, ending=ending,
               within=within, interrupt=interrupt, deps=deps)
    async with host.toolsets_for_run():
        events = _observed(run, Message("user", parts), session)
        try:
            async for event in events:
                yield event
        finally:
            # A reader that stops early closes this stream: what it wraps learns it now (a
            # traced run ends its open spans), not when the collector finds it.
            await events.aclose()


async def resume_events(
    host: RunHost,
    conversation: Conversation,
    decisions: Mapping[int, tuple[PendingCall, Decision]],
    *,
    session: SessionLike | None = None,
    stream_requests: bool = True,
    deps: Any = None,
) -> AsyncGenerator[ev.Event, None]:
    """A paused run's events as it continues on ``conversation``: the paused turn's calls
    judged again, with ``decisions`` (a host's, each bound to the call at its position:
    ``tether.run.pending.bind_decisions``), then the run goes on as any."""
    run = _Run(host, conversation, stream_requests=stream_requests, decisions=decisions,
               deps=deps)
    async with host.toolsets_for_run():
        events = _observed(run, None, session)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()


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
    one (spans and metrics made from them: the host's instrument)."""
    events = run.execute(prompt)
    if session is not None:
        events = _recorded(events, session)
    return events if run.observer is None else run.observer.record(events)


_OUTCOMES = (Final, RunAgain, Paused, Stopped)


@dataclass(frozen=True, slots=True)
class _Heard:
    """The model's answer as it ended: None if it never completed; ``streamed``: the
    server began its answer (the request was read)."""

    response: ModelResponse | None
    streamed: bool


class _Run:
    """The state of one run; ``execute`` is the loop: bounds, then a turn (``_turn``: ask
    the model, triage its answer, take its calls), until the turn's outcome ends the run."""

    def __init__(
        self,
        host: RunHost,
        conversation: Conversation,
        *,
        stream_requests: bool,
        ending: Ending | None = None,
        within: RunScope | None = None,
        decisions: Mapping[int, tuple[PendingCall, Decision]] | None = None,
        interrupt: asyncio.Event | None = None,
        deps: Any = None,
    ) -> None:
        self.host = host
        # The host's dependencies: held here for the tools, never put in an event, a
        # message or the result. A delegated run is given its parent's.
        self.deps = deps if deps is not None or within is None else within.deps
        self.settings = host.settings  # one value for the whole run
        self.conversation = conversation
        self.stream_requests = stream_requests
        self.ending = ending if ending is not None else TEXT_ENDING
        self.path = within.path if within is not None else ()
        self.interrupt = interrupt if interrupt is not None or within is None \
            else within.interrupt
        self.spend = Spend(self.settings, within.spend if within is not None else None)
        # A resumed run's decisions, by the position of the pending call each answers; they
        # apply to the resumed turn only (see ``_take``).
        self.decisions = dict(decisions or {})
        self.turns = 0
        self.text = ""  # the model's last text
        self.records: list[ToolCallRecord] = []
        self.events: list[ev.Event] = []
        self.start = len(conversation.messages)
        self.pending: list[PendingCall] = []
        self.error: TetherError | None = None
        self.observer = host.observer(conversation, self.path, stream_requests)
        self.fitter = host.context_fitter()
        # Calls that failed (or returned the same result) again and again in this run, and
        # what the model reads of a result because of them.
        self.repeats = Repeats(self.settings.max_repeated_failures)
        self.noting = Noting(self.repeats, self.ending)
        # The run its calls belong to (each call's is this one with its id on the path).
        self.scope = RunScope(host, self.path, self.interrupt, self.spend, self.deps)
        self.prompt_sent = False  # whether this run added a prompt (at index ``start``)
        # The tools offered: taken at the start of the run and of each turn, and used
        # throughout it (the request's declarations, the gate's verdicts).
        self.tools: dict[str, Tool] = {}
        # The host's hooks (found once per agent) and what they add to this turn's request.
        self.hooks = host.hooks
        self.instructions: tuple[str, ...] = ()
        self.prompt_text: str | None = None
        self.dropped: frozenset[str] = frozenset()  # tools a hook took out of this turn

    async def execute(self, prompt: Message | None) -> AsyncGenerator[ev.Event, None]:
        conv = self.conversation
        for event in self._begin(prompt):
            yield event
        outcome: TurnOutcome = RunAgain()
        if prompt is None and conv.unanswered_calls:
            # A paused run resumes with the calls it stopped on (they passed the bounds when
            # the model asked for them); the host's decisions are used up by this turn.
            decisions, self.decisions = self.decisions, {}
            async with Staged[TurnOutcome](
                    self._take(conv.unanswered_calls, decisions), *_OUTCOMES) as taken:
                async for event in taken:
                    yield event
            outcome = taken.value
        while isinstance(outcome, RunAgain):
            if outcome.say is not None:
                conv.append(Message.user(outcome.say))
            reached = self._reached()
            if reached is not None:
                outcome = Stopped(reached.bound.cause)
                break
            async with Staged[TurnOutcome](self._turn(), *_OUTCOMES) as turn:
                async for event in turn:
                    yield event
            outcome = turn.value
        if self.hooks.on_run_end:
            try:
                await run_ended(self.hooks, self._run_end(outcome),
                                self.settings.hook_timeout_secs)
            except HookError as error:
                yield self._event(failed(error))
                outcome = Stopped(StopCause.ERROR, error=error)
        yield self._finish(outcome)

    def _begin(self, prompt: Message | None) -> list[ev.Event]:
        """The prompt joins the conversation (a new prompt: no earlier pause can be
        answered any more); the run's first events."""
        conv = self.conversation
        outside: ev.Event | None = None
        if prompt is not None:
            conv.pending = []
            outside = self._outside(prompt)
            conv.append(prompt)
            self.prompt_sent = True
            self.prompt_text = prompt.text
        self.tools = self._tools()
        events = [self._event(ev.RunStarted(prompt.text if prompt else "",
                                            self.host.model.model, tuple(self.tools),
                                            conv.taint))]
        if outside is not None:
            events.append(self._event(outside))
        events.extend(self._event(notice) for notice in self.host.take_notices())
        offered = self._offered_taint()  # before a resumed turn's calls are checked, too
        if offered is not None:
            events.append(offered)
        return events

    def _outside(self, prompt: Message) -> ev.Event | None:
        """Outside content given with the prompt: untrusted before the model reads it (and
        stored so, with the message and as the event this returns)."""
        conv = self.conversation
        outside_sources = prompt.outside_sources
        images = any(isinstance(p, Image) for p in prompt.parts)
        if images:
            # A picture is the user's private data and outside content at once: a
            # screenshot's words can ask for a send as a text file's can, and no value
            # in it can be traced (it is not text), so every value found in no trusted
            # text may be the image's.
            outside_sources = (*outside_sources, "an image")
        grown = Taint(private=images, untrusted=bool(outside_sources))
        if conv.taint | grown == conv.taint:
            return None
        before = conv.taint
        conv.grow_taint(grown)
        return ev.TaintChanged(before, conv.taint, "outside text given with the prompt "
                                                   f"({', '.join(outside_sources)})")

    async def _turn(self) -> AsyncGenerator[ev.Event | TurnOutcome, None]:
        """One turn: ask the model once; triage its answer; take its calls."""
        self.turns += 1
        self.tools = self._tools()  # as they are now (an MCP server's may have changed)
        self.dropped = frozenset()
        yield self._event(ev.TurnStarted(self.turns, max_output_tokens=self._allowance()))
        offered = self._offered_taint()
        if offered is not None:
            yield offered
        async with Staged[ModelResponse | Stopped](self._ask(), ModelResponse,
                                                   Stopped) as asked:
            async for event in asked:
                yield event
        answer = asked.value
        if isinstance(answer, Stopped):
            yield answer
            return
        triaged = self._triage(answer)
        if isinstance(triaged, Take):
            async with Staged[TurnOutcome](self._take(triaged.calls), *_OUTCOMES) as taken:
                async for event in taken:
                    yield event
            yield taken.value
        elif isinstance(triaged, Unrun):
            for event in self._unrun(triaged):
                yield event
            yield triaged.stop
        elif isinstance(triaged, Weigh):
            yield await self.ending.after_text(triaged.text)
        else:
            yield triaged

    def _triage(self, response: ModelResponse) -> Triaged:
        """``turn.triage`` of the kept answer, with what it reads of the run."""
        calls = response.message.tool_calls
        # Read only for an answer a limit cut: whose limit it was.
        own_budget = response.stop_reason == "max_tokens" \
            and self.spend.tokens_spent() is not None
        if not calls:
            return triage(response, own_budget=own_budget, last_turn=None, repeated=None)
        # On the last turn, results no model would read: calls run for nothing, unless one
        # of them can give the run its answer.
        return triage(response, own_budget=own_budget,
                      last_turn=self._reached(last_turn_runs=self.ending.ends_with(calls)),
                      repeated=self.repeats.given_up(
                          c for c in calls if not self.ending.ends_with((c,))))

    # --- ask the model ------------------------------------------------------------------------

    async def _ask(self) -> AsyncGenerator[ev.Event | ModelResponse | Stopped, None]:
        """Ask the model once: the request as the hooks amend it, the answer heard, weighed
        by the hooks and kept. Ends in the answer, or in why the turn stops."""
        if self.hooks.before_model_request:
            said, stop = await self._amend()
            for event in said:
                yield event
            if stop is not None:
                yield stop
                return
        # A blocking output guardrail judges the answer before anyone sees it: its streamed
        # text is held back until then (dropped if it trips, or if the answer never ends).
        held: list[ev.Event] | None = [] if self.hooks.holds_text else None
        async with Staged[_Heard | Stopped](self._hear(held), _Heard, Stopped) as hearing:
            async for event in hearing:
                yield event
        heard = hearing.value
        if isinstance(heard, Stopped):
            yield heard
            return
        response = heard.response
        if response is None:
            yield self._unfinished(heard.streamed)
            return
        if self.hooks.after_model_response:
            said, stop = await self._observe(response)
            for event in said:
                yield event
            if stop is not None:
                yield stop
                return
        for event in held or ():
            yield self._event(event)
        for event in self._keep(response):
            yield event
        yield response

    async def _amend(self) -> tuple[list[ev.Event], Stopped | None]:
        """The ``before_model_request`` hooks' instructions and tools dropped for this
        turn, and what they said; or the stop their failure is."""
        try:
            amended = await amend_request(self.hooks, self._request_view(),
                                          self.settings.hook_timeout_secs)
        except HookError as error:
            return [self._event(failed(error))], Stopped(StopCause.ERROR, error=error)
        said = [self._event(event) for event in amended.events]
        self.instructions = amended.instructions
        self.dropped = amended.dropped
        if amended.dropped:  # not offered, and a call to one is refused as unknown
            self.tools = {n: t for n, t in self.tools.items() if n not in amended.dropped}
        return said, None

    async def _hear(self, held: list[ev.Event] | None,
                    ) -> AsyncGenerator[ev.Event | _Heard | Stopped, None]:
        """The model's answer as it streams: its events, then the answer (None if it never
        completed), or the stop a provider's failure is."""
        response: ModelResponse | None = None
        streamed = False  # the server began its answer: the request was read
        try:
            within = None if self.observer is None else self.observer.model_context()
            # Closed as soon as this turn is left early (its reader stopped, the run was
            # closed at one of these yields): the model is hung up on now, not when a
            # finalizer finds the answer abandoned.
            chunks = until_interrupted(self.interrupt, self._send(), within)
            try:
                async for chunk in chunks:
                    if isinstance(chunk, ev.ContextFitted):
                        self.spend.add(chunk.usage)  # what a summary cost
                        yield self._event(chunk)
                    elif isinstance(chunk, TextChunk):
                        streamed = True
                        if held is None:
                            yield self._event(ev.TextDelta(chunk.text))
                        else:  # shown once a blocking output guardrail has passed it
                            held.append(ev.TextDelta(chunk.text))
                    elif isinstance(chunk, ReasoningChunk):
                        streamed = True
                        yield self._event(ev.ReasoningDelta(chunk.text))
                    elif isinstance(chunk, Retrying):
                        retried = self._retried(chunk)
                        if retried is not None:
                            yield retried
                    elif isinstance(chunk, Completed):
                        response = chunk.response
            except BaseException:
                await abandon(chunks)
                raise
        except TetherError as error:  # ProviderError and a scripted model's exhaustion
            yield self._failed(error)
            return
        yield _Heard(response, streamed)

    def _retried(self, chunk: Retrying) -> ev.Event | None:
        """A failed attempt's tokens are spent too (or unknown, never 0); the retry is an
        event unless the run is interrupted (see ``_failed``)."""
        self.spend.add(chunk.usage)
        if self._interrupted():
            return None
        return self._event(ev.ProviderRetry(chunk.attempt, chunk.wait_secs, chunk.error,
                                            usage=chunk.usage, fallback=chunk.fallback,
                                            reason=chunk.reason))

    def _failed(self, error: TetherError) -> Stopped:
        """Once the run is interrupted, a failure (or a retry) is not the run's: a model
        server in the terminal's process group gets the same Ctrl-C, and its broken
        connection is a consequence of the interrupt."""
        if isinstance(error, ProviderError):
            self.spend.add(attempt_usage(error))  # the last attempt's, as for a retry
        return Stopped(StopCause.INTERRUPTED) if self._interrupted() else \
            Stopped(StopCause.ERROR, error=error)

    def _unfinished(self, streamed: bool) -> Stopped:
        """The answer never completed: interrupted mid-answer (the partial one is dropped),
        or a response that ended without completing."""
        if self._interrupted():
            if streamed:  # an answer cut off: its tokens were spent, and never reported
                self.spend.add(Usage.unreported())
            return Stopped(StopCause.INTERRUPTED)
        name = self.host.model.name
        return Stopped(StopCause.ERROR, error=MalformedResponseError(
            f"{name}: the response ended without completing", provider=name))

    async def _observe(self, response: ModelResponse) -> tuple[list[ev.Event], Stopped | None]:
        """What the ``after_model_response`` hooks said of the answer (frozen), or the stop
        their failure is: the answer is then withheld, not kept in the conversation, the
        result or an event (a blocking output guardrail). Its tokens were spent all the
        same."""
        try:
            answers = tuple(c for c in response.message.tool_calls
                            if self.ending.ends_with((c,)))
            said = await observe_response(self.hooks, response,
                                          self.settings.hook_timeout_secs, answers)
        except HookError as error:
            self.spend.add(response.usage)
            return [self._event(failed(error))], Stopped(StopCause.ERROR, error=error, text="")
        return [self._event(event) for event in said], None

    def _keep(self, response: ModelResponse) -> list[ev.Event]:
        """The answer kept: in the conversation, the spend and the run's text."""
        message = response.message
        self.conversation.append(message)
        self.spend.add(response.usage)
        self.text = message.text
        return [
            self._event(ev.ModelResponded(
                message, response.stop_reason, response.usage, model=response.model,
                response_id=response.id, raw_stop_reason=response.raw_stop_reason)),
            self._event(ev.UsageUpdated(response.usage, self.spend.usage))]

    # --- take the calls -----------------------------------------------------------------------

    async def _take(
        self, calls: Sequence[ToolCall],
        decisions: dict[int, tuple[PendingCall, Decision]] | None = None,
    ) -> AsyncGenerator[ev.Event | TurnOutcome, None]:
        """The gate judges the turn's calls (``gate.judge_turn``); then the turn pauses, or
        the allowed calls run side by side and all results are appended in call order.

        Every verdict is keyed by the call's position in the turn, never by its id (see
        ``tether.run.gate``); results still carry the call's own id, which is what the wire
        needs. ``decisions`` (a resumed turn) are a host's answers, by position. The run's
        records of the turn are in call order, whatever order the calls finished in (so a
        run reads the same replayed, durable or not)."""
        conv, settings = self.conversation, self.settings
        asking = gate.Asking(self.host.approver, settings.permission_mode,
                             settings.approval_timeout_secs, conv.session_approvals,
                             self.interrupt)
        if await freshen(self.host.toolsets, {c.name for c in calls}):
            # A list past its time to live was read again: the calls are judged by what
            # their tools say now, never by an old annotation.
            self.tools = {n: t for n, t in self._tools().items() if n not in self.dropped}
        try:
            async with Staged[gate.TurnVerdict](
                    gate.judge_turn(calls, self.tools, conv, settings, asking, decisions or {},
                                    self.noting, self.hooks), gate.TurnVerdict) as judged:
                async for event in judged:
                    yield self._event(event)
        except HookError as error:
            unrun = hook_failed(calls, {}, error)
            for event in self._unrun(unrun):
                yield event
            yield unrun.stop
            return
        verdict = judged.value
        if verdict.deferred:
            # Nothing of this turn runs until every pending call has a decision: the turn
            # is resumed whole (see Agent.resume).
            self._record(verdict.refused)
            self.pending = verdict.pending
            conv.pending = list(self.pending)
            yield self._event(ev.RunPaused(tuple(p.call_id for p in self.pending)))
            yield Paused()
            return
        # Allowed calls side by side; their events (a sub-agent's) stream through.
        env = CallEnv(conv, settings, self.scope,
                      None if self.observer is None else self.observer.tool_context,
                      self.noting, self.hooks)
        async with Staged[Ran](run_calls(verdict.allowed, env), Ran) as running:
            async for event in running:
                yield self._event(event)
        ran = running.value
        done = {**verdict.refused, **ran.done}
        if ran.error is not None:
            unrun = hook_failed(calls, done, ran.error)
            for event in self._unrun(unrun):
                yield event
            yield unrun.stop
            return
        self._record(done)
        conv.pending = []
        conv.append(Message("tool", tuple(done[i].result for i in range(len(calls)))))
        yield self.ending.after_calls()

    def _record(self, done: Mapping[int, Done]) -> None:
        """The run's records of a turn's calls, in call order."""
        self.records.extend(done[position].record for position in sorted(done))

    def _unrun(self, unrun: Unrun) -> list[ev.Event]:
        """A turn ended before its calls ran (``turn.Unrun``): every call not run answered,
        so the conversation stays valid to continue; what the run says of it."""
        events: list[ev.Event] = []
        if unrun.done is not None:
            done = dict(unrun.done)
            for position, call in enumerate(unrun.calls):
                if position not in done:
                    done[position] = settled(call, "denied", f"Not run: {unrun.why}.")
            self._record(done)
            self.conversation.pending = []
            self.conversation.append(Message("tool", tuple(done[i].result
                                                           for i in range(len(unrun.calls)))))
        elif unrun.calls:
            events.append(self._close_unrun(unrun.calls, unrun.why))
        if unrun.said is not None:
            events.append(self._event(unrun.said))
        return events

    def _request_view(self) -> RequestView:
        """The request as ``before_model_request`` hooks see it: frozen values (the
        messages and their parts, the taint) and tuples."""
        conv = self.conversation
        return RequestView(self.turns, self.prompt_text, tuple(conv.messages),
                           self.settings.system_prompt, tuple(self.tools), conv.taint)

    def _run_end(self, outcome: TurnOutcome) -> RunEnd:
        """The run's end as ``on_run_end`` hooks see it (frozen: no hook changes the result)."""
        stop, text, error = self._ended(outcome)
        return RunEnd(text, stop, self.turns, tuple(self.records), self.conversation.taint,
                      error, self.ending.value)

    # --- what the loop consults --------------------------------------------------------------

    def _reached(self, *, last_turn_runs: bool = False) -> Reached | None:
        """The first bound this run has reached (``tether.bounds.BOUNDS``)."""
        progress = Progress(self.turns, self.settings.max_turns, self.interrupt, self.spend)
        return first_reached(progress, skip=_MAX_TURNS if last_turn_runs else _NOTHING)

    def _interrupted(self) -> bool:
        return self.interrupt is not None and self.interrupt.is_set()

    def _tools(self) -> dict[str, Tool]:
        return self.ending.tools(self.host.tools)

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
        system = settings.system_prompt
        if self.instructions:  # a hook's, for this request only
            system = "\n\n".join((*((system,) if system else ()), *self.instructions))
        return ModelRequest(
            messages=tuple(self.conversation.messages),
            system=system,
            tools=specs,
            tool_choice=choice if specs or choice == "none" else "auto",
            max_output_tokens=self._allowance(),
            temperature=settings.temperature,
            stream=self.stream_requests,
            seed=settings.seed,
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

    def _ended(self, outcome: TurnOutcome) -> tuple[StopCause, str, TetherError | None]:
        """Why the run ended, its text and its error."""
        if isinstance(outcome, Final):
            return StopCause.COMPLETED, outcome.text, None
        if isinstance(outcome, Paused):
            return StopCause.PAUSED, self.text, None
        if isinstance(outcome, Stopped):
            return (outcome.cause, outcome.text if outcome.text is not None else self.text,
                    outcome.error)
        raise AssertionError(f"a run cannot finish on {outcome!r}")  # pragma: no cover

    def _finish(self, outcome: TurnOutcome) -> ev.Event:
        stop, text, error = self._ended(outcome)
        if error is not None:
            self.error = error
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

