"""The engine's stage shape (run/staged.py) and its pure triage (run/turn.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from tether import events as ev
from tether.messages import Message, ToolCall, Usage
from tether.outcome import StopCause, Stopped
from tether.providers.base import ModelResponse
from tether.run.staged import Staged
from tether.run.turn import Take, Unrun, Weigh, triage


async def test_a_stage_passes_its_events_on_and_keeps_its_value() -> None:
    async def stage(staged: Staged[int], start: int) -> AsyncGenerator[ev.Event, None]:
        yield ev.TextDelta("a")
        staged.give(start + 1)

    async with Staged(stage, 6) as staged:
        seen = [e async for e in staged]
    assert seen == [ev.TextDelta("a")] and staged.value == 7


async def test_what_a_stage_does_after_its_value_runs_before_its_reader_goes_on() -> None:
    done = []

    async def stage(staged: Staged[int]) -> AsyncGenerator[ev.Event, None]:
        try:
            yield ev.TextDelta("a")
            staged.give(1)
        finally:
            done.append("cleaned")

    async with Staged(stage) as staged:
        async for _ in staged:
            pass
        assert done == ["cleaned"] and staged.value == 1


async def test_a_stage_its_reader_leaves_is_closed_then() -> None:
    closed = []

    async def stage(staged: Staged[int]) -> AsyncGenerator[ev.Event, None]:
        try:
            yield ev.TextDelta("a")
            yield ev.TextDelta("b")
            staged.give(1)
        finally:
            closed.append(True)

    with pytest.raises(RuntimeError):
        async with Staged(stage) as staged:
            async for _ in staged:
                raise RuntimeError("the reader left")
    assert closed == [True]


def test_triage_of_an_answer_is_a_value() -> None:
    call = ToolCall("c1", "t", "{}")
    text = ModelResponse(Message.assistant("done"), "end_turn", Usage())
    assert triage(text, own_budget=False, last_turn=None, repeated=None) == Weigh("done")
    calls = ModelResponse(Message("assistant", (call,)), "tool_calls", Usage())
    assert isinstance(triage(calls, own_budget=False, last_turn=None, repeated=None), Take)
    cut = ModelResponse(Message("assistant", (call,)), "max_tokens", Usage())
    unrun = triage(cut, own_budget=False, last_turn=None, repeated=None)
    assert isinstance(unrun, Unrun) and unrun.stop.cause is StopCause.TRUNCATED
    gave_up = triage(cut, own_budget=True, last_turn=None, repeated=(call, 3))
    assert isinstance(gave_up, Unrun) and gave_up.stop.cause is StopCause.REPEATED_FAILURE
    budget = ModelResponse(Message.assistant("x"), "max_tokens", Usage())
    assert triage(budget, own_budget=True, last_turn=None, repeated=None) == \
        Stopped(StopCause.OUTPUT_TOKEN_BUDGET)
