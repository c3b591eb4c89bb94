"""Output validators: a host's check of the validated answer; ``ModelRetry`` sends the model
back with its message up to the output retries, anything else a validator raises ends the run
without an answer (it fails closed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from tests.test_output import WEATHER, answer
from tether import Agent, ModelRetry, OutputFailure, OutputSpec
from tether import events as ev
from tether.messages import ToolResult
from tether.outcome import StopCause
from tether.providers import Scripted

SPEC = OutputSpec("report", "The city and its temperature.", WEATHER)


class Weather(BaseModel):
    city: str
    celsius: float


def plausible(value: Any) -> None:
    celsius = value.celsius if isinstance(value, Weather) else value["celsius"]
    if not -90 <= celsius <= 60:
        raise ModelRetry(f"{celsius} C is not a temperature on Earth; check the reading")


async def test_a_validator_sees_the_validated_value_and_sends_the_model_back() -> None:
    seen: list[Any] = []

    def check(value: Weather) -> None:
        seen.append(value)
        plausible(value)

    spec = OutputSpec("report", "The weather.", Weather).with_validator(check)
    model = Scripted([answer({"city": "Paris", "celsius": 2150}),
                      answer({"city": "Paris", "celsius": 21.5})])
    report = await Agent(model).prepare("Weather?", output=spec).output()
    assert report.value == Weather(city="Paris", celsius=21.5)
    assert [type(v) for v in seen] == [Weather, Weather]
    [told] = [p for p in model.requests[1].messages[-1].parts if isinstance(p, ToolResult)]
    assert told.is_error and told.content == (
        f"Error: the answer was not accepted: 2150.0 C is not a temperature on Earth; check "
        f"the reading. Call {model.requests[0].tools[0].name} again with a corrected answer.")


async def test_validators_run_in_order_and_an_async_one_is_awaited() -> None:
    order: list[str] = []

    async def first(value: dict[str, Any]) -> None:
        order.append("first")

    def second(value: dict[str, Any]) -> None:
        order.append("second")

    spec = SPEC.with_validator(first).with_validator(second)
    assert SPEC.validators == () and len(spec.validators) == 2  # a copy
    report = await Agent(Scripted([answer({"city": "Oslo", "celsius": 3})])).prepare(
        "Weather?", output=spec).output()
    assert report.value["city"] == "Oslo" and order == ["first", "second"]


async def test_a_model_that_keeps_failing_the_validator_gets_output_retries_then_no_answer(
        ) -> None:
    spec = SPEC.with_validator(plausible)
    model = Scripted([answer({"city": "Paris", "celsius": 999})] * 5)
    with pytest.raises(OutputFailure) as failed:
        await Agent(model, output_retries=2).prepare("Weather?", output=spec).output()
    assert failed.value.reason == "rejected"
    assert "999 C is not a temperature on Earth" in (failed.value.validation_error or "")
    assert len(model.requests) == 3  # the first answer and two retries


async def test_a_validator_that_breaks_ends_the_run_without_an_answer_at_once() -> None:
    def broken(value: Any) -> None:
        raise KeyError("no such column")

    model = Scripted([answer({"city": "Paris", "celsius": 20})] * 3)
    with pytest.raises(OutputFailure) as failed:
        await Agent(model).prepare("Weather?", output=SPEC.with_validator(broken)).output()
    assert failed.value.reason == "rejected" and len(model.requests) == 1
    assert "the output validator failed (KeyError" in str(failed.value)


async def test_a_text_answer_is_checked_by_the_runs_validators() -> None:
    def cites(text: str) -> None:
        if "[source]" not in text:
            raise ModelRetry("cite your source as [source]")

    model = Scripted(["Paris is the capital.", "Paris is the capital [source]."])
    result = await Agent(model).run("Capital of France?", output_validators=[cites])
    assert result.text == "Paris is the capital [source]." and result.turns == 2
    said = model.requests[1].messages[-1]
    assert said.role == "user" and said.text == (
        "Your answer was not accepted: cite your source as [source]. Answer again.")


async def test_a_text_answer_the_validators_never_accept_is_no_answer() -> None:
    def never(text: str) -> None:
        raise ModelRetry("no")

    model = Scripted(["one", "two", "three", "four"])
    with pytest.raises(OutputFailure) as failed:
        await Agent(model, output_retries=1).run("hi", output_validators=[never])
    assert failed.value.reason == "rejected"
    result = failed.value.result
    assert result is not None and result.text == "" and result.stop_cause == StopCause.NO_OUTPUT
    assert len(model.requests) == 2


async def test_a_streamed_run_checks_its_answer_too() -> None:
    def never(text: str) -> None:
        raise ModelRetry("no")

    agent = Agent(Scripted(["one", "two"]), output_retries=1)
    events = [e async for e in agent.stream("hi", output_validators=[never])]
    assert isinstance(events[-1], ev.RunFinished)
    result = events[-1].result
    assert isinstance(result.error, OutputFailure) and result.text == ""
