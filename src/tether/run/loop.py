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
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether import events as ev
from tether.approval import Decision
from tether.bounds import Progress, Reached, first_reached
from tether.conversation import Conversation, PendingCall, SessionLike
from tether.errors import HookError, MalformedResponseError, ProviderError, TetherError
from tether.messages import Image, Message, Part, Text, Usage
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
from tether.result import RunResult
from tether.run.calls import settle, take
from tether.run.ending import Ending
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
from tether.run.staged import Staged
from tether.run.state import RunFrame, RunState, shelved, start
from tether.run.turn import Take, Triaged, Unrun, Weigh, triage
from tether.tools.tool import RunScope
from tether.trust import Taint


def run_events(
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
    return _hosted(host, session, lambda: _prepared(
        host, prompt, conversation=conversation, session=session, interrupt=interrupt,
        stream_requests=stream_requests, ending=ending, within=within, deps=deps))


async def run_result(
    host: RunHost,
    prompt: str | Sequence[Part],
    *,
    conversation: Conversation | None = None,
    session: SessionLike | None = None,
    interrupt: asyncio.Event | None = None,
    stream_requests: bool = True,
    ending: Ending | None = None,
    deps: Any = None,
) -> RunResult:
    """``run_events`` read to its end, for its result (``Agent.run``): the run's events
    read here, with no generator between them and this reader (each would cost every
    event, and every wait of every request, a step)."""
    run, message = _prepared(host, prompt, conversation=conversation, session=session,
                             interrupt=interrupt, stream_requests=stream_requests,
                             ending=ending, within=None, deps=deps)
    result: RunResult | None = None
    async with host.toolsets_for_run():
        events = _observed(run, message, session)
        try:
            async for event in events:
                # final_result's test, inline: the run's own end, not a delegated run's.
                if isinstance(event, ev.RunFinished) and not event.path:
                    result = event.result
        finally:
            await events.aclose()
    assert result is not None, "a run always ends with RunFinished"
    return result


def _prepared(
    host: RunHost, prompt: str | Sequence[Part], *, conversation: Conversation | None,
    session: SessionLike | None, interrupt: asyncio.Event | None, stream_requests: bool,
    ending: Ending | None, within: RunScope | None, deps: Any,
) -> tuple[_Run, Message]:
    """A new run on the session's conversation (or ``conversation``, or a new one), and its
    prompt as the user's message."""
    if session is not None:
        conversation = session.conversation()
    elif conversation is None:
        conversation = Conversation()
    if isinstance(prompt, str) and not prompt.strip() and not conversation.messages:
        raise TetherError("the prompt is empty: say what the agent should do")
    parts = (Text(prompt),) if isinstance(prompt, str) else tuple(prompt)
    run = _Run(*start(host, conversation, stream_requests=stream_requests, ending=ending,
                      within=within, interrupt=interrupt, deps=deps))
    return run, Message("user", parts)


def resume_events(
    host: RunHost,
    conversation: Conversation,
    decisions: Mapping[int, tuple[PendingCall, Decision]],
    *,
    session: SessionLike | None = None,
    stream_requests: bool = True,
    deps: Any = None,
    interrupt: asyncio.Event | None = None,
) -> AsyncGenerator[ev.Event, None]:
    """A paused run's events as it continues on ``conversation``: the paused turn's calls
    judged again, with ``decisions`` (a host's, each bound to the call at its position:
    ``tether.run.pending.bind_decisions``), then the run goes on as any. Setting
    ``interrupt`` stops it as it stops a run (``stop_cause == "interrupted"``): a server
    shutting down ends the runs it resumed too."""
    return _hosted(host, session, lambda: (_Run(*start(
        host, conversation, stream_requests=stream_requests, decisions=decisions,
        interrupt=interrupt, deps=deps)), None))


async def _hosted(host: RunHost, session: SessionLike | None,
                  prepare: Callable[[], tuple[_Run, Message | None]],
                  ) -> AsyncGenerator[ev.Event, None]:
    """The events of the run ``prepare`` makes (made when they are first read, as a
    generator's body is run), inside the host's toolsets for a run."""
    run, prompt = prepare()
    async with host.toolsets_for_run():
        events = _observed(run, prompt, session)
        try:
            async for event in events:
                yield event
        finally:
            # A reader that stops early closes this stream: what it wraps learns it now (a
            # traced run ends its open spans), not when the collector finds it.
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


@dataclass(slots=True)
class _Hearing:
    """The model's answer as it streams in: the text held back for a blocking output
    guardrail (None: shown as it comes), the answer once it completed, and whether the
    server began answering (the request was read)."""

    held: list[ev.Event] | None
    response: ModelResponse | None = None
    streamed: bool = False


class _Run:
    """One run: its ``frame`` (what it was given, fixed) and its ``state`` (what changes);
    ``execute`` is the loop: bounds, ask the model, triage its answer, take its calls, turn
    by turn until a turn's outcome ends the run."""

    def __init__(self, frame: RunFrame, state: RunState) -> None:
        self.frame = frame
        self.state = state
        self.observer = frame.observer

    async def execute(self, prompt: Message | None) -> AsyncGenerator[ev.Event, None]:
        state = self.state
        conv = state.conversation
        for event in self._begin(prompt):
            yield event
        outcome: TurnOutcome = RunAgain()
        if prompt is None and conv.unanswered_calls:
            # A paused run resumes with the calls it stopped on (they passed the bounds when
            # the model asked for them); the host's decisions are used up by this turn.
            decisions, state.decisions = state.decisions, {}
            async with Staged(take, self.frame, state, conv.unanswered_calls,
                              decisions) as taken:
                async for event in taken:
                    yield self.emit(event)
            outcome = taken.value
        while isinstance(outcome, RunAgain):
            if outcome.say is not None:
                conv.append(Message.user(outcome.say))
            reached = self._reached()
            if reached is not None:
                outcome = Stopped(reached.bound.cause)
                break
            async with Staged(self._ask) as asked:
                async for event in asked:
                    yield event
            answer = asked.value
            if isinstance(answer, Stopped):
                outcome = answer
                break
            triaged = self._triage(answer)
            if isinstance(triaged, Take):
                async with Staged(take, self.frame, state, triaged.calls) as taken:
                    async for event in taken:
                        yield self.emit(event)
                outcome = taken.value
            else:
                said, outcome = await self._untaken(triaged)
                for event in said:
                    yield event
        for event in await self._end(outcome):
            yield event

    def _begin(self, prompt: Message | None) -> list[ev.Event]:
        """The prompt joins the conversation (a new prompt: no earlier pause can be
        answered any more); the run's first events."""
        state = self.state
        conv = state.conversation
        outside: ev.Event | None = None
        if prompt is not None:
            conv.pending = []
            outside = self._outside(prompt)
            conv.append(prompt)
            state.prompt_sent = True
            state.prompt_text = prompt.text
        tools = self.frame.offered()
        state.shelf = shelved(self.frame, conv, tools)
        state.tools = state.offer(tools)
        host = self.frame.host
        events = [self.emit(ev.RunStarted(prompt.text if prompt else "", host.model.model,
                                          tuple(state.tools), conv.taint))]
        if outside is not None:
            events.append(self.emit(outside))
        events.extend(self.emit(notice) for notice in host.take_notices())
        offered = self._offered_taint()  # before a resumed turn's calls are checked, too
        if offered is not None:
            events.append(offered)
        return events

    def _outside(self, prompt: Message) -> ev.Event | None:
        """Outside content given with the prompt: untrusted before the model reads it (and
        stored so, with the message and as the event this returns)."""
        conv = self.state.conversation
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

    def _turn_started(self) -> list[ev.Event]:
        """A turn begins: the tools as they are now (an MCP server's may have changed)."""
        state = self.state
        state.turns += 1
        state.tools = state.offer(self.frame.offered())
        state.dropped = frozenset()
        events = [self.emit(ev.TurnStarted(state.turns, max_output_tokens=self._allowance()))]
        offered = self._offered_taint()
        if offered is not None:
            events.append(offered)
        return events

    async def _untaken(self, triaged: Unrun | Stopped | Weigh,
                       ) -> tuple[list[ev.Event], TurnOutcome]:
        """An answer whose calls are not taken (``turn.triage``): its text weighed by the
        run's ending, or the turn's end before any call ran (``Unrun``)."""
        if isinstance(triaged, Weigh):
            return [], await self.frame.ending.after_text(triaged.text)
        if isinstance(triaged, Unrun):
            return [self.emit(event) for event in settle(self.state, triaged)], triaged.stop
        return [], triaged

    def _triage(self, response: ModelResponse) -> Triaged:
        """``turn.triage`` of the kept answer, with what it reads of the run."""
        calls = response.message.tool_calls
        ending = self.frame.ending
        # Read only for an answer a limit cut: whose limit it was.
        own_budget = response.stop_reason == "max_tokens" \
            and self.state.spend.tokens_spent() is not None
        if not calls:
            return triage(response, own_budget=own_budget, last_turn=None, repeated=None)
        # On the last turn, results no model would read: calls run for nothing, unless one
        # of them can give the run its answer.
        return triage(response, own_budget=own_budget,
                      last_turn=self._reached(last_turn_runs=ending.ends_with(calls)),
                      repeated=self.state.repeats.given_up(
                          c for c in calls if not ending.ends_with((c,))))

    async def _end(self, outcome: TurnOutcome) -> list[ev.Event]:
        """The run's last events: the ``on_run_end`` hooks see its end (a failure of theirs
        is its error), then it finishes."""
        hooks = self.frame.hooks
        if not hooks.on_run_end:
            return [self._finish(outcome)]
        try:
            await run_ended(hooks, self._run_end(outcome), self.frame.settings.hook_timeout_secs)
        except HookError as error:
            failure = self.emit(failed(error))
            return [failure, self._finish(Stopped(StopCause.ERROR, error=error))]
        return [self._finish(outcome)]

    # --- ask the model ------------------------------------------------------------------------

    async def _ask(self, staged: Staged[ModelResponse | Stopped],
                   ) -> AsyncGenerator[ev.Event, None]:
        """A turn begins, and asks the model once: the request as the hooks amend it, the
        answer heard as it streams, weighed by the hooks and kept. Ends in the answer, or
        in why the turn stops. (One stage, with the stream read in it: every streamed
        delta crosses it.)"""
        for event in self._turn_started():
            yield event
        if self.frame.hooks.before_model_request:
            said, stop = await self._amend()
            for event in said:
                yield event
            if stop is not None:
                staged.give(stop)
                return
        # A blocking output guardrail judges the answer before anyone sees it: its streamed
        # text is held back until then (dropped if it trips, or if the answer never ends).
        hearing = _Hearing([] if self.frame.hooks.holds_text else None)
        try:
            observer = self.observer
            within = None if observer is None else observer.model_context()
            # Closed as soon as this turn is left early (its reader stopped, the run was
            # closed at one of these yields): the model is hung up on now, not when a
            # finalizer finds the answer abandoned.
            chunks = until_interrupted(self.frame.interrupt, self._send(), within)
            try:
                async for chunk in chunks:
                    heard = self._heard(chunk, hearing)
                    if heard is not None:
                        yield heard
            except BaseException:
                await abandon(chunks)
                raise
        except TetherError as error:  # ProviderError and a scripted model's exhaustion
            staged.give(self._failed(error))
            return
        said, answer = await self._weighed(hearing)
        for event in said:
            yield event
        if isinstance(answer, Stopped):
            staged.give(answer)
            return
        for event in hearing.held or ():
            yield self.emit(event)
        for event in self._keep(answer):
            yield event
        staged.give(answer)

    def _heard(self, chunk: StreamChunk | ev.ContextFitted,
               hearing: _Hearing) -> ev.Event | None:
        """One piece of the model's answer as it streams: the event it is, if any."""
        if isinstance(chunk, TextChunk):
            hearing.streamed = True
            if hearing.held is None:
                return self.emit(ev.TextDelta(chunk.text))
            # shown once a blocking output guardrail has passed it
            hearing.held.append(ev.TextDelta(chunk.text))
        elif isinstance(chunk, ev.ContextFitted):
            self.state.spend.add(chunk.usage)  # what a summary cost
            return self.emit(chunk)
        elif isinstance(chunk, ReasoningChunk):
            hearing.streamed = True
            return self.emit(ev.ReasoningDelta(chunk.text))
        elif isinstance(chunk, Retrying):
            return self._retried(chunk)
        elif isinstance(chunk, Completed):
            hearing.response = chunk.response
        return None

    async def _weighed(self, hearing: _Hearing,
                       ) -> tuple[list[ev.Event], ModelResponse | Stopped]:
        """The answer as it ended, weighed by the ``after_model_response`` hooks; or why
        the turn stops (it never completed, or a hook withheld it)."""
        response = hearing.response
        if response is None:
            return [], self._unfinished(hearing.streamed)
        if not self.frame.hooks.after_model_response:
            return [], response
        said, stop = await self._observe(response)
        return said, response if stop is None else stop

    async def _amend(self) -> tuple[list[ev.Event], Stopped | None]:
        """The ``before_model_request`` hooks' instructions and tools dropped for this
        turn, and what they said; or the stop their failure is."""
        state = self.state
        try:
            amended = await amend_request(self.frame.hooks, self._request_view(),
                                          self.frame.settings.hook_timeout_secs)
        except HookError as error:
            return [self.emit(failed(error))], Stopped(StopCause.ERROR, error=error)
        said = [self.emit(event) for event in amended.events]
        state.instructions = amended.instructions
        state.dropped = amended.dropped
        if amended.dropped:  # not offered, and a call to one is refused as unknown
            state.tools = {n: t for n, t in state.tools.items() if n not in amended.dropped}
        return said, None

    def _retried(self, chunk: Retrying) -> ev.Event | None:
        """A failed attempt's tokens are spent too (or unknown, never 0); the retry is an
        event unless the run is interrupted (see ``_failed``)."""
        self.state.spend.add(chunk.usage)
        if self.frame.interrupted():
            return None
        return self.emit(ev.ProviderRetry(chunk.attempt, chunk.wait_secs, chunk.error,
                                          usage=chunk.usage, fallback=chunk.fallback,
                                          reason=chunk.reason))

    def _failed(self, error: TetherError) -> Stopped:
        """Once the run is interrupted, a failure (or a retry) is not the run's: a model
        server in the terminal's process group gets the same Ctrl-C, and its broken
        connection is a consequence of the interrupt."""
        if isinstance(error, ProviderError):
            self.state.spend.add(attempt_usage(error))  # the last attempt's, as for a retry
        return Stopped(StopCause.INTERRUPTED) if self.frame.interrupted() else \
            Stopped(StopCause.ERROR, error=error)

    def _unfinished(self, streamed: bool) -> Stopped:
        """The answer never completed: interrupted mid-answer (the partial one is dropped),
        or a response that ended without completing."""
        if self.frame.interrupted():
            if streamed:  # an answer cut off: its tokens were spent, and never reported
                self.state.spend.add(Usage.unreported())
            return Stopped(StopCause.INTERRUPTED)
        name = self.frame.host.model.name
        return Stopped(StopCause.ERROR, error=MalformedResponseError(
            f"{name}: the response ended without completing", provider=name))

    async def _observe(self, response: ModelResponse) -> tuple[list[ev.Event], Stopped | None]:
        """What the ``after_model_response`` hooks said of the answer (frozen), or the stop
        their failure is: the answer is then withheld, not kept in the conversation, the
        result or an event (a blocking output guardrail). Its tokens were spent all the
        same."""
        ending = self.frame.ending
        try:
            answers = tuple(c for c in response.message.tool_calls if ending.ends_with((c,)))
            said = await observe_response(self.frame.hooks, response,
                                          self.frame.settings.hook_timeout_secs, answers)
        except HookError as error:
            self.state.spend.add(response.usage)
            return [self.emit(failed(error))], Stopped(StopCause.ERROR, error=error, text="")
        return [self.emit(event) for event in said], None

    def _keep(self, response: ModelResponse) -> list[ev.Event]:
        """The answer kept: in the conversation, the spend and the run's text."""
        state = self.state
        message = response.message
        state.conversation.append(message)
        state.spend.add(response.usage)
        state.text = message.text
        return [
            self.emit(ev.ModelResponded(
                message, response.stop_reason, response.usage, model=response.model,
                response_id=response.id, raw_stop_reason=response.raw_stop_reason)),
            self.emit(ev.UsageUpdated(response.usage, state.spend.usage))]

    def _request_view(self) -> RequestView:
        """The request as ``before_model_request`` hooks see it: frozen values (the
        messages and their parts, the taint) and tuples."""
        state = self.state
        conv = state.conversation
        return RequestView(state.turns, state.prompt_text, tuple(conv.messages),
                           self.frame.settings.system_prompt, tuple(state.tools), conv.taint)

    def _run_end(self, outcome: TurnOutcome) -> RunEnd:
        """The run's end as ``on_run_end`` hooks see it (frozen: no hook changes the result)."""
        state = self.state
        stop, text, error = self._ended(outcome)
        return RunEnd(text, stop, state.turns, tuple(state.records),
                      state.conversation.taint, error, self.frame.ending.value)

    # --- what the loop consults --------------------------------------------------------------

    def _reached(self, *, last_turn_runs: bool = False) -> Reached | None:
        """The first bound this run has reached (``tether.bounds.BOUNDS``)."""
        frame = self.frame
        progress = Progress(self.state.turns, frame.settings.max_turns, frame.interrupt,
                            self.state.spend)
        return first_reached(progress, skip=_MAX_TURNS if last_turn_runs else _NOTHING,
                             bounds=frame.bounds)

    def _send(self) -> AsyncIterator[StreamChunk | ev.ContextFitted]:
        """The next request, fitted into the model's window (the conversation stays whole:
        only what is sent is fitted), and the model's answer to it."""
        state = self.state
        pins = (self.frame.start,) if state.prompt_sent else ()
        return self.frame.fitter.stream(self._request(), taint=state.conversation.taint,
                                        pins=pins, owner=state.conversation)

    def _request(self) -> ModelRequest:
        frame, state = self.frame, self.state
        settings = frame.settings
        specs = [t.spec for t in state.tools.values()]
        choice = frame.ending.tool_choice()
        system = settings.system_prompt
        if state.instructions:  # a hook's, for this request only
            system = "\n\n".join((*((system,) if system else ()), *state.instructions))
        return ModelRequest(
            messages=tuple(state.conversation.messages),
            system=system,
            tools=specs,
            tool_choice=choice if specs or choice == "none" else "auto",
            max_output_tokens=self._allowance(),
            temperature=settings.temperature,
            stream=frame.stream_requests,
            seed=settings.seed,
        )

    def _allowance(self) -> int | None:
        """The output tokens the next request may ask for: the fewest any budget on the
        chain has left (at least one), None for no bound."""
        left = self.state.spend.output_tokens_left()
        return max(1, left) if left is not None else None

    def _offered_taint(self) -> ev.Event | None:
        """Tools an untrusted source described (an untrusted MCP server's) show the model
        their text with every request: the conversation has seen untrusted text from the
        first turn that offers them. The change is an event, so the store keeps it."""
        conv = self.state.conversation
        if conv.taint.untrusted:
            return None
        servers = sorted({t.server or t.name for t in self.state.tools.values()
                          if t.spec_from_outside})
        if not servers:
            return None
        before = conv.taint
        conv.grow_taint(Taint(untrusted=True))
        return self.emit(ev.TaintChanged(
            before, conv.taint, f"tools offered by untrusted MCP server(s) {', '.join(servers)}"))

    # --- events and the result ----------------------------------------------------------------

    def emit(self, event: ev.Event) -> ev.Event:
        """The event as the run gives it: stamped with the run's path (a delegated run's
        events say whose they are), and kept for the result."""
        path = self.frame.path
        if path and not event.path:
            event = dataclasses.replace(event, path=path)
        self.state.events.append(event)
        return event

    def _ended(self, outcome: TurnOutcome) -> tuple[StopCause, str, TetherError | None]:
        """Why the run ended, its text and its error."""
        if isinstance(outcome, Final):
            return StopCause.COMPLETED, outcome.text, None
        if isinstance(outcome, Paused):
            return StopCause.PAUSED, self.state.text, None
        if isinstance(outcome, Stopped):
            return (outcome.cause,
                    outcome.text if outcome.text is not None else self.state.text,
                    outcome.error)
        raise AssertionError(f"a run cannot finish on {outcome!r}")  # pragma: no cover

    def _finish(self, outcome: TurnOutcome) -> ev.Event:
        state = self.state
        stop, text, error = self._ended(outcome)
        if error is not None:
            state.error = error
        conv = state.conversation
        records = state.records
        result = RunResult(
            text=text,
            stop_cause=stop,
            usage=state.spend.usage,
            turns=state.turns,
            tool_calls=records,
            blocked_sends=sum(r.status == "blocked" for r in records),
            taint=conv.taint,
            malformed_tool_args=sum(r.status == "invalid_args" for r in records),
            conversation=conv,
            new_messages=conv.messages[self.frame.start:],
            # A copy taken before RunFinished joins: the result must not contain the event
            # that contains it (dataclasses.asdict, deepcopy and repr would recurse).
            events=list(state.events),
            error=state.error,
            pending=state.pending,
            output=self.frame.ending.value,
            cost_usd=state.spend.cost(),
        )
        return self.emit(ev.RunFinished(result))


_MAX_TURNS = frozenset({"max_turns"})
_NOTHING: frozenset[str] = frozenset()

