"""Structured output (seed 004): OutputSpec, reservations, PreparedRun.output and its failures."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel

from tether import Agent, OutputFailure, OutputSpec, tool
from tether import events as ev
from tether.errors import ConfigError, ServerError
from tether.messages import ToolResult
from tether.providers import NamedToolChoice, Reply, Scripted, call
from tether.providers.base import ModelRequest

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
    "additionalProperties": False,
}
SPEC = OutputSpec("report", "The city and its temperature.", WEATHER)


def answer(arguments: dict[str, Any] | str) -> Any:
    """A scripted reply calling whichever tool is the answering one in this request."""
    def reply(request: ModelRequest) -> Reply:
        name = next(t.name for t in request.tools if t.name.startswith("report_"))
        return call(name, arguments)
    return reply


@tool
def get_weather(city: str) -> str:
    """Get the weather."""
    return f"{city}: 21.5C"


async def test_a_valid_first_answer_is_the_value() -> None:
    model = Scripted([answer({"city": "Paris", "celsius": 21.5})])
    report = await Agent(model).prepare("Weather in Paris?", output=SPEC).output()
    assert report.value == {"city": "Paris", "celsius": 21.5}
    assert report.result.stop_cause == "completed"
    request = model.requests[0]
    assert len(request.tools) == 1  # a shaping turn offers only the answering tool
    assert request.tool_choice == NamedToolChoice(request.tools[0].name)
    assert request.tools[0].schema_json == WEATHER
    assert request.tools[0].description == SPEC.description


async def test_an_invalid_answer_is_corrected_after_the_validation_message() -> None:
    model = Scripted([answer({"city": "Paris"}), answer({"city": "Paris", "celsius": 20})])
    report = await Agent(model).prepare("Weather?", output=SPEC).output()
    assert report.value == {"city": "Paris", "celsius": 20}
    error = model.requests[1].messages[-1].parts[0]
    assert isinstance(error, ToolResult) and error.is_error
    assert "'celsius' is a required property" in error.content


async def test_invalid_answers_until_retries_run_out_are_a_mismatch_with_the_error() -> None:
    model = Scripted([answer({"city": 3, "celsius": 1})] * 3)
    with pytest.raises(OutputFailure) as info:
        await Agent(model, output_retries=2).prepare("Weather?", output=SPEC).output()
    failure = info.value
    assert failure.reason == "mismatch"
    assert failure.validation_error is not None and "is not of type 'string'" in \
        failure.validation_error
    assert len(model.requests) == 3  # the first try plus two corrections
    assert failure.result is not None and failure.result.usage.requests == 3


async def test_malformed_json_counts_as_an_invalid_answer() -> None:
    model = Scripted([answer('{"city": '), answer({"city": "Oslo", "celsius": -3})])
    report = await Agent(model).prepare("Weather?", output=SPEC).output()
    assert report.value["city"] == "Oslo"
    assert report.result.malformed_tool_args == 1


async def test_a_text_answer_gets_one_nudge_then_fails_as_prose() -> None:
    model = Scripted(["It is sunny.", "Still sunny, I promise."])
    with pytest.raises(OutputFailure) as info:
        await Agent(model).prepare("Weather?", output=SPEC).output()
    assert info.value.reason == "prose"
    nudge = model.requests[1].messages[-1]
    assert nudge.role == "user" and "must be answered by calling" in nudge.text
    assert info.value.result is not None


async def test_a_nudge_can_rescue_the_run() -> None:
    model = Scripted(["Sunny.", answer({"city": "Rome", "celsius": 30})])
    report = await Agent(model).prepare("Weather?", output=SPEC).output()
    assert report.value["city"] == "Rome"


async def test_a_working_turn_keeps_the_tools_and_ends_when_the_answer_is_valid() -> None:
    model = Scripted([call("get_weather", city="Paris"),
                      answer({"city": "Paris", "celsius": 21.5})])
    report = await Agent(model, tools=[get_weather]).prepare(
        "Weather in Paris?", output=SPEC.with_tools()).output()
    assert report.value == {"city": "Paris", "celsius": 21.5}
    first = model.requests[0]
    assert first.tools[0].name == "get_weather"
    assert first.tool_choice == "auto"
    assert report.result.tool_calls[0].name == "get_weather"


async def test_max_turns_during_a_working_turn_is_a_bound_naming_max_turns() -> None:
    model = Scripted([call("get_weather", city="Paris")] * 5)
    with pytest.raises(OutputFailure) as info:
        await Agent(model, tools=[get_weather], max_turns=3).prepare(
            "Weather?", output=SPEC.with_tools()).output()
    assert info.value.reason == "bound"
    assert info.value.bound == "max_turns"
    assert "(max_turns, 3 turns)" in info.value.message


async def test_a_provider_error_is_reason_provider_with_the_error() -> None:
    model = Scripted([ServerError("HTTP 500: upstream broke")])
    with pytest.raises(OutputFailure) as info:
        await Agent(model).prepare("Weather?", output=SPEC).output()
    assert info.value.reason == "provider"
    assert isinstance(info.value.error, ServerError)
    assert info.value.result is not None and info.value.result.stop_cause == "error"


async def test_a_blank_prompt_is_empty_prompt_and_nothing_is_sent() -> None:
    model = Scripted([])
    with pytest.raises(OutputFailure) as info:
        await Agent(model).prepare("  \n", output=SPEC).output()
    assert info.value.reason == "empty_prompt"
    assert model.requests == []


class Weather(BaseModel):
    city: str
    celsius: float


async def test_a_pydantic_model_type_end_to_end() -> None:
    spec = OutputSpec("report", "The weather.", Weather)
    model = Scripted([answer({"city": "Paris"}), answer({"city": "Paris", "celsius": "21.5"})])
    report = await Agent(model).prepare("Weather?", output=spec).output()
    assert report.value == Weather(city="Paris", celsius=21.5)
    assert model.requests[0].tools[0].schema_json["required"] == ["city", "celsius"]
    error = model.requests[1].messages[-1].parts[0]
    assert isinstance(error, ToolResult) and "celsius" in error.content


async def test_the_stream_shows_the_answer_as_the_answering_tools_call() -> None:
    reservation = SPEC.reserve()
    model = Scripted([answer({"city": "Paris", "celsius": 1})])
    run = Agent(model).prepare("Weather?", output=reservation)
    events = [e async for e in run.stream()]
    requested = [e for e in events if isinstance(e, ev.ToolCallRequested)]
    assert [e.call.name for e in requested] == [reservation.tool_name]
    assert (await run.output()).value["city"] == "Paris"  # the same run, not a second one
    assert len(model.requests) == 1


# --- the spec and its reservations -----------------------------------------------------------


def test_specs_compare_by_value_and_with_tools_is_a_copy() -> None:
    a = OutputSpec("report", "d", dict(WEATHER))
    assert a == OutputSpec("report", "d", dict(WEATHER))
    b = a.with_tools()
    assert b.keeps_tools and not a.keeps_tools and b != a


def test_all_three_fields_are_required() -> None:
    with pytest.raises(TypeError):
        OutputSpec("report", "d")  # type: ignore[call-arg]
    with pytest.raises(ConfigError):
        OutputSpec("", "d", WEATHER)
    with pytest.raises(ConfigError):
        OutputSpec("x", "d", "not a schema")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["report", "submit findings!", "x" * 100, "ünïcode-name", "a"])
def test_reserved_names_follow_the_rules(name: str) -> None:
    tool_name = OutputSpec(name, "d", WEATHER).reserve().tool_name
    assert re.fullmatch(r"[A-Za-z0-9_]{1,64}", tool_name)
    base, suffix = tool_name.rsplit("_", 1)
    assert re.fullmatch(r"[0-9a-f]{12}", suffix)
    assert base == re.sub(r"[^A-Za-z0-9_]", "_", name)[:32]
    assert tool_name != name


def test_two_reservations_never_collide() -> None:
    names = {SPEC.reserve().tool_name for _ in range(1000)}
    assert len(names) == 1000


async def test_a_reservation_makes_the_run_use_exactly_that_name() -> None:
    reservation = SPEC.reserve()
    model = Scripted([call(reservation.tool_name, {"city": "Paris", "celsius": 1})])
    report = await Agent(model).prepare("Weather?", output=reservation).output()
    assert model.requests[0].tools[0].name == reservation.tool_name
    assert report.value["celsius"] == 1


async def test_a_spec_is_reusable_across_runs_with_fresh_names() -> None:
    names = []
    for _ in range(2):
        model = Scripted([answer({"city": "Paris", "celsius": 1})])
        await Agent(model).prepare("Weather?", output=SPEC).output()
        names.append(model.requests[0].tools[0].name)
    assert names[0] != names[1]
