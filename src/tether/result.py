"""What a run comes back with: ``RunResult`` and the records in it (its ``StopCause`` is
``tether.outcome``'s); the result a stream of events ends with (``final_result``); the
results of several runs on one conversation as one (``summed``)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence

from tether import events as ev

# RunResult and ToolCallRecord live with the events (a run's result holds its events, and
# the last of them, RunFinished, holds the result): their home for people is this module.
from tether.events import RunResult as RunResult
from tether.events import ToolCallRecord as ToolCallRecord
from tether.messages import Usage


def run_finished(event: ev.Event, path: tuple[str, ...] = ()) -> RunResult | None:
    """The result ``event`` holds if it is the ``RunFinished`` of the run at ``path`` (the
    top-level run by default; a sub-agent's events come with theirs), else None."""
    if isinstance(event, ev.RunFinished) and event.path == path:
        return event.result
    return None


async def final_result(events: AsyncIterable[ev.Event], path: tuple[str, ...] = ()) -> RunResult:
    """The result of the run whose events these are (read to their end): what its
    ``RunFinished`` holds."""
    result: RunResult | None = None
    async for event in events:
        # run_finished's test, inline: it is asked of every event of every run.
        if isinstance(event, ev.RunFinished) and event.path == path:
            result = event.result
    assert result is not None, "a run always ends with RunFinished"
    return result


def summed(results: Sequence[RunResult]) -> RunResult:
    """Several runs on one conversation, one after the other (a batch item's turns, a
    durable run's), as one result: the last one's text, stop cause, taint (it only grows),
    error, conversation, pending calls and output; their usage, model turns, tool calls,
    blocked sends, malformed arguments, new messages and events together; the cost when any
    run's is known."""
    if not results:
        raise ValueError("summed() needs at least one result")
    last = results[-1]
    usage = Usage()
    for result in results:
        usage = usage + result.usage
    costs = [r.cost_usd for r in results if r.cost_usd is not None]
    return RunResult(
        text=last.text, stop_cause=last.stop_cause, usage=usage,
        turns=sum(r.turns for r in results),
        tool_calls=[c for r in results for c in r.tool_calls],
        blocked_sends=sum(r.blocked_sends for r in results), taint=last.taint,
        malformed_tool_args=sum(r.malformed_tool_args for r in results),
        conversation=last.conversation,
        new_messages=[m for r in results for m in r.new_messages],
        events=[e for r in results for e in r.events], error=last.error,
        pending=last.pending, output=last.output, cost_usd=sum(costs) if costs else None)
