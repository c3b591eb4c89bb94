"""Take a turn's calls: the gate judges them, then the turn pauses for decisions, or the
allowed calls run side by side and every result joins the conversation in call order; and
``settle``, what a turn that ended before its calls ran (``tether.run.turn.Unrun``) leaves.

Every verdict is keyed by the call's position in the turn, never by its id (see
``tether.run.gate``); results still carry the call's own id, which is what the wire needs.
The run's records of a turn are in call order, whatever order the calls finished in (so a
run reads the same replayed, durable or not). The events these stages give are the loop's
to stamp with the run's path (``tether.run.loop``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence

from tether import events as ev
from tether.approval import Decision
from tether.conversation import PendingCall
from tether.errors import HookError
from tether.messages import Message, ToolCall, ToolResult
from tether.outcome import Paused, TurnOutcome
from tether.run import gate
from tether.run.execution import Done, run_calls, settled
from tether.run.staged import Staged
from tether.run.state import RunFrame, RunState
from tether.run.turn import Unrun, hook_failed
from tether.tools.toolsets import freshen


async def take(
    staged: Staged[TurnOutcome], frame: RunFrame, state: RunState, calls: Sequence[ToolCall],
    decisions: Mapping[int, tuple[PendingCall, Decision]] | None = None,
) -> AsyncGenerator[ev.Event, None]:
    """The gate judges the turn's calls (``gate.judge_turn``); then the turn pauses, or the
    allowed calls run side by side and all results are appended in call order; the turn's
    outcome given last. ``decisions`` (a resumed turn) are a host's answers, by position."""
    conv, settings = state.conversation, frame.settings
    asking = gate.Asking(frame.host.approver, settings.permission_mode,
                         settings.approval_timeout_secs, conv.session_approvals,
                         frame.interrupt)
    if await freshen(frame.host.toolsets, {c.name for c in calls}):
        # A list past its time to live was read again: the calls are judged by what their
        # tools say now, never by an old annotation.
        state.tools = {n: t for n, t in state.offer(frame.offered()).items()
                       if n not in state.dropped}
    try:
        async with Staged(gate.judge_turn, calls, state.tools, conv, settings, asking,
                          decisions or {}, state.noting, frame.hooks) as judged:
            async for event in judged:
                yield event
    except HookError as error:
        unrun = hook_failed(calls, {}, error)
        for event in settle(state, unrun):
            yield event
        staged.give(unrun.stop)
        return
    verdict = judged.value
    if verdict.deferred:
        # Nothing of this turn runs until every pending call has a decision: the turn is
        # resumed whole (see Agent.resume).
        _record(state, verdict.refused)
        state.pending = verdict.pending
        conv.pending = list(state.pending)
        yield ev.RunPaused(tuple(p.call_id for p in state.pending))
        staged.give(Paused())
        return
    # Allowed calls side by side; their events (a sub-agent's) stream through.
    async with Staged(run_calls, verdict.allowed, frame.calls) as running:
        async for event in running:
            yield event
    ran = running.value
    done = {**verdict.refused, **ran.done}
    if ran.error is not None:
        unrun = hook_failed(calls, done, ran.error)
        for event in settle(state, unrun):
            yield event
        staged.give(unrun.stop)
        return
    _record(state, done)
    conv.pending = []
    conv.append(Message("tool", tuple(done[i].result for i in range(len(calls)))))
    staged.give(frame.ending.after_calls())


def settle(state: RunState, unrun: Unrun) -> list[ev.Event]:
    """A turn ended before its calls ran: every call not run is answered, so the
    conversation stays valid to continue; the events that say so."""
    conv = state.conversation
    events: list[ev.Event] = []
    if unrun.done is not None:
        done = dict(unrun.done)
        for position, call in enumerate(unrun.calls):
            if position not in done:
                done[position] = settled(call, "denied", f"Not run: {unrun.why}.")
        _record(state, done)
        conv.pending = []
        conv.append(Message("tool", tuple(done[i].result for i in range(len(unrun.calls)))))
    elif unrun.calls:
        conv.append(Message("tool", tuple(
            ToolResult(c.id, c.name, f"Not run: {unrun.why}.", True, "trusted")
            for c in unrun.calls)))
        events.append(ev.Notice("info", f"{len(unrun.calls)} tool call(s) not run: "
                                        f"{unrun.why}"))
    if unrun.said is not None:
        events.append(unrun.said)
    return events


def _record(state: RunState, done: Mapping[int, Done]) -> None:
    """The run's records of a turn's calls, in call order."""
    state.records.extend(done[position].record for position in sorted(done))
