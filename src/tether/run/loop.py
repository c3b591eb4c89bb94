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
from tether.run.execution import Done, run_calls, settled
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


class _Run:
    """The state of one run; ``execute`` is the loop, ``_turn`` one turn, ``_calls`` one
    turn's calls."""

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
        # apply to the resumed turn only (see ``_calls``).
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
        # Calls that failed (or returned the same result) again and again in this run.
        self.repeats = Repeats(self.settings.max_repeated_failures)
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
        outside: ev.Event | None = None
        if prompt is not None:
            conv.pending = []  # a new prompt: no earlier pause can be answered any more
            outside_sources = prompt.outside_sources
            images = any(isinstance(p, Image) for p in prompt.parts)
            if images:
                # A picture is the user's private data and outside content at once: a
                # screenshot's words can ask for a send as a text file's can, and no value
                # in it can be traced (it is not text), so every value found in no trusted
                # text may be the image's.
                outside_sources = (*outside_sources, "an image")
            grown = Taint(private=images, untrusted=bool(outside_sources))
            if conv.taint | grown != conv.taint:
                # Outside content given with the prompt: untrusted before the model reads
                # it (and stored so, with the message and as the event below).
                before = conv.taint
                conv.grow_taint(grown)
                outside = ev.TaintChanged(before, conv.taint, "outside text given with the "
                                          f"prompt ({', '.join(outside_sources)})")
            conv.append(prompt)
            self.prompt_sent = True
            self.prompt_text = prompt.text
        self.tools = self._tools()
        yield self._event(ev.RunStarted(prompt.text if prompt else "", self.host.model.model,
                                        tuple(self.tools), conv.taint))
        if outside is not None:
            yield self._event(outside)
        for notice in self.host.take_notices():
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
        if self.hooks.on_run_end:
            try:
                await run_ended(self.hooks, self._run_end(outcome),
                                self.settings.hook_timeout_secs)
            except HookError as error:
                yield self._event(failed(error))
                outcome = Stopped(StopCause.ERROR, error=error)
        yield self._finish(outcome)

    async def _turn(self) -> AsyncIterator[ev.Event | TurnOutcome]:
        """Ask the model once; then its text is weighed, or its calls judged and run."""
        conv = self.conversation
        self.turns += 1
        self.tools = self._tools()  # as they are now (an MCP server's may have changed)
        self.dropped = frozenset()
        yield self._event(ev.TurnStarted(self.turns, max_output_tokens=self._allowance()))
        offered = self._offered_taint()
        if offered is not None:
            yield offered
        if self.hooks.before_model_request:
            try:
                amended = await amend_request(self.hooks, self._request_view(),
                                              self.settings.hook_timeout_secs)
            except HookError as error:
                yield self._event(failed(error))
                yield Stopped(StopCause.ERROR, error=error)
                return
            for event in amended.events:
                yield self._event(event)
            self.instructions = amended.instructions
            self.dropped = amended.dropped
            if amended.dropped:  # not offered, and a call to one is refused as unknown
                self.tools = {n: t for n, t in self.tools.items() if n not in amended.dropped}

        response: ModelResponse | None = None
        streamed = False  # the server began its answer: the request was read
        # A blocking output guardrail judges the answer before anyone sees it: its streamed
        # text is held back until then (dropped if it trips, or if the answer never ends).
        held: list[ev.Event] | None = [] if self.hooks.holds_text else None
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
                        streamed = True
                        if held is None:
                            yield self._event(ev.TextDelta(chunk.text))
                        else:  # shown once a blocking output guardrail has passed it
                            held.append(ev.TextDelta(chunk.text))
                    elif isinstance(chunk, ReasoningChunk):
                        streamed = True
                        yield self._event(ev.ReasoningDelta(chunk.text))
                    elif isinstance(chunk, Retrying):
                        # A failed attempt's tokens are spent too (or unknown, never 0).
                        self.spend.add(chunk.usage)
                        if not self._interrupted():  # see below
                            yield self._event(ev.ProviderRetry(chunk.attempt, chunk.wait_secs,
                                                               chunk.error, usage=chunk.usage,
                                                               fallback=chunk.fallback,
                                                               reason=chunk.reason))
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
                if streamed:  # an answer cut off: its tokens were spent, and never reported
                    self.spend.add(Usage.unreported())
                yield Stopped(StopCause.INTERRUPTED)  # mid-answer: the partial one is dropped
                return
            name = self.host.model.name
            yield Stopped(StopCause.ERROR, error=MalformedResponseError(
                f"{name}: the response ended without completing", provider=name))
            return

        message = response.message
        if self.hooks.after_model_response:
            try:
                answers = tuple(c for c in message.tool_calls if self.ending.ends_with((c,)))
                said = await observe_response(self.hooks, response,  # frozen
                                              self.settings.hook_timeout_secs, answers)
            except HookError as error:
                # The answer is withheld: not kept in the conversation, the result or an
                # event (a blocking output guardrail). Its tokens were spent all the same.
                self.spend.add(response.usage)
                yield self._event(failed(error))
                yield Stopped(StopCause.ERROR, error=error, text="")
                return
            for event in said:
                yield self._event(event)
        if held:
            for event in held:
                yield self._event(event)
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
        if response.stop_reason == "content_filter":
            for item in self._filtered(calls, response.raw_stop_reason):
                yield item
            return
        if not calls:
            if response.stop_reason == "max_tokens":
                yield Stopped(StopCause.OUTPUT_TOKEN_BUDGET)  # the run's budget cut the answer
            else:
                yield await self.ending.after_text(self.text)
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
        """The gate judges the turn's calls (``gate.judge_turn``); then the turn pauses, or
        the allowed calls run side by side and all results are appended in call order.

        Every verdict is keyed by the call's position in the turn, never by its id (see
        ``tether.run.gate``); results still carry the call's own id, which is what the wire
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
        conv, settings = self.conversation, self.settings
        asking = gate.Asking(self.host.approver, settings.permission_mode,
                             settings.approval_timeout_secs, conv.session_approvals,
                             self.interrupt)
        verdict: gate.TurnVerdict | None = None
        if await freshen(self.host.toolsets, {c.name for c in calls}):
            # A list past its time to live was read again: the calls are judged by what
            # their tools say now, never by an old annotation.
            self.tools = {n: t for n, t in self._tools().items() if n not in self.dropped}
        judged = gate.judge_turn(calls, self.tools, conv, settings, asking, decisions,
                                 self._noted, self.hooks)
        try:
            async for item in judged:
                if isinstance(item, gate.TurnVerdict):
                    verdict = item
                else:
                    yield self._event(item)
        except HookError as error:
            for ended in self._hook_failed(calls, done, error):
                yield ended
            return
        except BaseException:
            await abandon(judged)
            raise
        assert verdict is not None, "the gate ends every turn in a verdict"
        done.update(verdict.refused)
        if verdict.deferred:
            # Nothing of this turn runs until every pending call has a decision: the turn
            # is resumed whole (see Agent.resume).
            self.pending = verdict.pending
            conv.pending = list(self.pending)
            yield self._event(ev.RunPaused(tuple(p.call_id for p in self.pending)))
            yield Paused()
            return
        # Allowed calls side by side; their events (a sub-agent's) stream through.
        observer = self.observer
        events = run_calls(verdict.allowed, conv, settings, self._scope, done,
                           None if observer is None else observer.tool_context, self._noted,
                           self.hooks)
        try:
            async for event in events:
                yield self._event(event)
        except HookError as error:
            for ended in self._hook_failed(calls, done, error):
                yield ended
            return
        except BaseException:
            await abandon(events)
            raise
        conv.pending = []
        conv.append(Message("tool", tuple(done[i].result for i in range(len(calls)))))
        yield self.ending.after_calls()

    def _hook_failed(self, calls: Sequence[ToolCall], done: dict[int, Done],
                     error: HookError) -> list[ev.Event | TurnOutcome]:
        """A hook failed while the turn's calls were judged or run: the run ends with its
        error. Every call still gets a result (the conversation stays valid to continue):
        its own if it has one, else "not run" (a call whose result a hook was rewriting is
        withheld: it failed closed)."""
        why = f"Not run: the run stopped because a hook failed ({error.hook or 'a hook'})."
        for position, call in enumerate(calls):
            if position not in done:
                done[position] = settled(call, "denied", why)
        self.conversation.pending = []
        self.conversation.append(Message("tool", tuple(done[i].result
                                                       for i in range(len(calls)))))
        return [self._event(failed(error)), Stopped(StopCause.ERROR, error=error)]

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

    def _noted(self, call: ToolCall, status: ev.ToolStatus, content: str) -> str:
        """A call's result as the model reads it: with a note when the same call has failed,
        or returned the same result, ``max_repeated_failures`` times in this run. A call
        that can give a structured run its answer is left to its own retries."""
        if self.ending.ends_with((call,)):
            return content
        return self.repeats.finished(call, status, content)

    def _scope(self, call: ToolCall) -> RunScope:
        """The run a call belongs to, as its tool sees it (``ToolContext.run``)."""
        return RunScope(self.host, (*self.path, call.id), self.interrupt, self.spend,
                        self.deps)

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

    def _filtered(self, calls: Sequence[ToolCall],
                  raw: str | None) -> list[ev.Event | TurnOutcome]:
        """The provider filtered or refused the answer (its stop reason says so): the run
        stops and says why, never as a completed answer; its text is what was written, and
        no call in it runs (the provider stopped the model mid-answer)."""
        said = f" (stop reason {raw[:40]!r})" if raw else ""
        out: list[ev.Event | TurnOutcome] = []
        if calls:
            out.append(self._close_unrun(calls, "the provider filtered the answer that "
                                                "made it"))
        out.append(self._event(ev.Notice(
            "warning", f"the provider filtered or refused the model's answer{said}; what "
                       f"it wrote is kept, and the run stops", source="model")))
        out.append(Stopped(StopCause.CONTENT_FILTER))
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

