"""What a run comes back with: ``RunResult`` and the records in it (its ``StopCause`` is
``tether.outcome``'s); the result a stream of events ends with (``final_result``); the
results of several runs on one conversation as one (``summed``)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import events as ev
from tether.conversation import Conversation, PendingCall
from tether.errors import TetherError
from tether.events import ToolStatus
from tether.messages import Message, Usage, usage_to_dict
from tether.outcome import StopCause
from tether.trust import Taint


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """What became of one tool call: ``status`` is ok, error, denied, blocked, unknown_tool
    or invalid_args."""

    call_id: str
    name: str
    input: Any
    status: ToolStatus
    output: str

    @property
    def error(self) -> bool:
        return self.status != "ok"

    @property
    def denied(self) -> bool:
        return self.status == "denied"

    @property
    def blocked(self) -> bool:
        return self.status == "blocked"


@dataclass(slots=True)
class RunResult:
    """The outcome of one run.

    - ``text``: the final answer; ``stop_cause``: why the run ended.
    - ``usage``: tokens over every model turn, sub-agents' included; ``turns``: model turns.
    - ``tool_calls``: what became of each call (ran, failed, denied, blocked...).
    - ``blocked_sends``: sends the trifecta interlock refused; ``taint``: what the
      conversation has seen, at the end; ``malformed_tool_args``: calls whose arguments did
      not parse or fit the schema.
    - ``conversation`` (pass it to the next run to continue), ``new_messages`` (this run's),
      ``events`` (every event of the run up to, not including, its own
      ``RunFinished``, which holds this result), ``error`` (when the provider failed),
      ``pending`` (calls awaiting a decision when paused), ``output`` (a structured-output
      run's value), ``cost_usd`` (when prices are known).
    """

    text: str
    stop_cause: StopCause
    usage: Usage
    turns: int
    tool_calls: list[ToolCallRecord]
    blocked_sends: int
    taint: Taint
    malformed_tool_args: int
    conversation: Conversation
    new_messages: list[Message]
    events: list[ev.Event] = field(default_factory=list)
    error: TetherError | None = None
    pending: list[PendingCall] = field(default_factory=list)
    output: Any = None
    cost_usd: float | None = None

    @property
    def messages(self) -> list[Message]:
        return self.conversation.messages

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``tether run --json``); events and the full transcript are left out."""
        return {
            "text": self.text,
            "stop_cause": str(self.stop_cause),
            "usage": usage_to_dict(self.usage),
            "turns": self.turns,
            "tool_calls": [
                {"call_id": r.call_id, "name": r.name, "input": r.input, "status": r.status,
                 "output": r.output, "error": r.error, "denied": r.denied,
                 "blocked": r.blocked}
                for r in self.tool_calls
            ],
            "blocked_sends": self.blocked_sends,
            "taint": self.taint.to_dict(),
            "malformed_tool_args": self.malformed_tool_args,
            "cost_usd": self.cost_usd,
            "error": str(self.error) if self.error else None,
            "pending": [
                {"call_id": p.call_id, "tool": p.tool, "arguments": p.arguments,
                 "reason": p.reason, "explanation": p.explanation, "position": p.position}
                for p in self.pending
            ],
            **({"output": _jsonable_output(self.output)} if self.output is not None else {}),
        }


def _jsonable_output(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if dump is not None else value


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
