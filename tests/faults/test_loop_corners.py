"""The loop's own corners: a RunResult that does not contain itself, and the branches of the
loop no other test reaches (a resumed run that pauses again, max_turns at the top of the
loop, a forwarded ReasoningDelta, a stream that ends without completing, an interrupt
after a response with tool calls, tool_timeout_secs)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import statuses
from tether import Agent, Decision, StopCause, SubagentProfile, tool
from tether import events as ev
from tether.cli.render import EventRenderer
from tether.errors import MalformedResponseError, OutputFailure, ProviderError
from tether.messages import Message, Text, ToolResult, Usage
from tether.output import OutputSpec
from tether.providers import Scripted, call
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    ReasoningChunk,
    StreamChunk,
    TextChunk,
)
from tether.result import RunResult
from tether.run.pending import DeferringApprover
from tether.store import Session, SQLiteStore


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(needs_approval=True)
def wipe(path: str) -> str:
    """Wipe a path."""
    return f"wiped {path}"


class Chunks:
    """A provider that streams the given chunks, then nothing (no Completed unless given)."""

    name = model = "chunks"

    def __init__(self, *turns: list[StreamChunk]) -> None:
        self.turns = list(turns)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        for chunk in self.turns.pop(0):
            yield chunk

    async def aclose(self) -> None:
        return None


def completed(text: str) -> Completed:
    return Completed(ModelResponse(Message.assistant(text), "end_turn", Usage(3, 2, requests=1)))


# --- RunResult and RunFinished ------------------------------------------------------------


async def test_a_run_result_does_not_contain_the_run_finished_event_that_holds_it() -> None:
    model = Scripted([call("add", a=1, b=2), "3"])
    events = [e async for e in Agent(model, tools=[add]).stream("1+2?")]
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished)
    result = finished.result
    assert result.events == events[:-1]  # every event before its own RunFinished
    assert dataclasses.asdict(result)["text"] == "3"  # recursed for ever before
    assert dataclasses.asdict(finished)["result"]["stop_cause"] == "completed"
    copy.deepcopy(result)
    assert "..." not in repr(result)  # the dataclass repr's guard against cycles never fires
    json.dumps(ev.event_to_dict(finished))


async def test_a_parent_result_holds_each_child_run_finished_and_still_no_cycle() -> None:
    summarize = SubagentProfile("summarize", "Summarize text.", provider="child")
    parent = Scripted([call("summarize", task="Summarize: hello"), "ok"])
    agent = Agent(parent, subagents=[summarize], providers={"child": Scripted(["Short."])})
    result = await agent.run("go")
    [child] = [e for e in result.events if isinstance(e, ev.RunFinished)]
    assert child.path and child.result.text == "Short."
    assert not any(isinstance(e, ev.RunFinished) for e in child.result.events)
    dataclasses.asdict(result)


async def test_the_result_of_a_stored_session_run_converts_with_asdict(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    try:
        session = Session.create(store)
        result = await Agent(Scripted(["hi"])).run("go", session=session)
        assert dataclasses.asdict(result)["text"] == "hi"
        assert copy.deepcopy(result).text == "hi"
        session.conversation().append(Message.user("still recorded"))
        assert Session.load(session.id, store).messages[-1].text == "still recorded"
    finally:
        store.close()


async def test_the_result_on_a_raised_error_is_free_of_cycles_too() -> None:
    with pytest.raises(ProviderError) as info:
        await Agent(Scripted([ProviderError("boom")])).run("go")
    result = info.value.result
    assert isinstance(result, RunResult)
    assert result.stop_cause == "error"
    assert dataclasses.asdict(result)["stop_cause"] == "error"


# --- the loop's branches --------------------------------------------------------------------


async def test_a_resumed_run_that_pauses_again_ends_paused_with_the_call_still_pending() -> None:
    approver = DeferringApprover()
    agent = Agent(Scripted([call("wipe", path="/tmp/x", id="w1"), "wiped"]), tools=[wipe],
                  approver=approver)
    paused = await agent.run("wipe it")
    assert paused.stop_cause == "paused" and [p.call_id for p in paused.pending] == ["w1"]
    # No decision for w1: the approver is asked again, and defers again.
    again = await agent.resume(paused.conversation, {})
    assert again.stop_cause == StopCause.PAUSED and again.turns == 0
    assert [p.call_id for p in again.pending] == ["w1"]
    assert isinstance(again.events[-1], ev.RunPaused)
    done = await agent.resume(again.conversation, {"w1": Decision.allow()})
    assert done.text == "wiped" and statuses(done) == ["ok"]


async def test_max_turns_is_checked_at_the_top_of_the_loop_after_a_nudge() -> None:
    spec = OutputSpec("verdict", "The verdict.", {"type": "object",
                                                  "properties": {"ok": {"type": "boolean"}}})
    model = Scripted(["I think it is fine."])  # prose: nudged, but no turn is left
    with pytest.raises(OutputFailure) as info:
        await Agent(model, max_turns=1).prepare("judge", output=spec).output()
    result = info.value.result
    assert isinstance(result, RunResult)
    assert result.stop_cause == "max_turns" and result.turns == 1
    assert len(model.requests) == 1
    assert result.conversation.messages[-1].role == "user"  # the nudge, valid to continue


async def test_a_reasoning_delta_is_forwarded_before_the_answer() -> None:
    model = Chunks([ReasoningChunk("Let me think"), ReasoningChunk(" about it."),
                    TextChunk("Four."), completed("Four.")])
    events = [e async for e in Agent(model).stream("2+2?")]
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ReasoningDelta") < kinds.index("TextDelta") < \
        kinds.index("ModelResponded")
    reasoning = "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta))
    assert reasoning == "Let me think about it."
    renderer = EventRenderer(out=open("/dev/null", "w"))  # noqa: SIM115
    for event in events:
        renderer(event)
    renderer.out.close()
    assert events[-1].result.text == "Four."  # type: ignore[union-attr]


async def test_a_stream_that_ends_without_completing_is_a_typed_error_result() -> None:
    model = Chunks([TextChunk("Half an ans")])
    events = [e async for e in Agent(model).stream("go")]
    assert isinstance(events[-1], ev.RunFinished)
    result = events[-1].result
    assert result.stop_cause == "error"
    assert isinstance(result.error, MalformedResponseError)
    assert "ended without completing" in str(result.error)
    assert [m.role for m in result.conversation.messages] == ["user"]  # nothing half-kept
    with pytest.raises(MalformedResponseError) as info:
        await Agent(Chunks([TextChunk("Half")])).run("go")
    assert info.value.result is not None and info.value.result.stop_cause == "error"


async def test_an_interrupt_after_a_response_with_tool_calls_runs_none_of_them() -> None:
    interrupt = asyncio.Event()
    ran: list[int] = []

    @tool
    def step() -> str:
        """A step."""
        ran.append(1)
        return "stepped"

    def respond_then_interrupt(request: ModelRequest) -> object:
        interrupt.set()  # Ctrl-C as the answer with its calls arrives
        return call("step")

    model = Scripted([respond_then_interrupt, "never asked"])
    result = await Agent(model, tools=[step]).run("go", interrupt=interrupt)
    assert result.stop_cause == "interrupted" and ran == []
    assert len(model.requests) == 1
    last = result.conversation.messages[-1]
    assert last.role == "tool"  # every call answered: valid to continue
    assert last.parts == (ToolResult("call_0", "step", "Not run: the run was interrupted.",
                                     True, "trusted"),)
    notices = [e for e in result.events if isinstance(e, ev.Notice)]
    assert any("not run: the run was interrupted" in n.message for n in notices)


async def test_tool_timeout_secs_ends_a_hung_async_tool_with_an_error_result() -> None:
    @tool
    async def hang() -> str:
        """Never answers."""
        await asyncio.Event().wait()
        return "never"

    model = Scripted([call("hang"), call("add", a=2, b=2), "4"])
    result = await Agent(model, tools=[hang, add], tool_timeout_secs=0.1).run("go")
    assert statuses(result) == ["error", "ok"] and result.text == "4"
    assert "did not finish within 0.1s" in result.tool_calls[0].output
    sent = model.requests[1].messages[-1].parts[0]
    assert isinstance(sent, ToolResult) and sent.is_error


async def test_a_conversation_after_each_corner_is_valid_to_continue() -> None:
    interrupt = asyncio.Event()

    def interrupted(request: ModelRequest) -> object:
        interrupt.set()
        return call("add", a=1, b=1)

    agent = Agent(Scripted([interrupted, "two"]), tools=[add])
    first = await agent.run("1+1?", interrupt=interrupt)
    second = await agent.run("go on", conversation=first.conversation)
    assert second.text == "two"
    roles = [m.role for m in second.conversation.messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]
    assert second.conversation.messages[-1].parts == (Text("two"),)
