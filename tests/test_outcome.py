"""A turn ends in a typed outcome; what counts as the run's answer is its ending's to say
(a text answer, or a structured-output run's answering tool, an ordinary tool)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from tether import Agent
from tether import events as ev
from tether.messages import ToolCall
from tether.outcome import Final, Paused, RunAgain, StopCause, Stopped, TurnOutcome
from tether.output import NUDGE, OutputPlan, OutputSpec
from tether.providers import Scripted, call
from tether.run import checks, gate
from tether.run.ending import TEXT_ENDING
from tether.trust import CLEAN, SecurityConfig

SRC = Path(inspect.getfile(gate)).parent


class Rating(BaseModel):
    stars: int


SPEC = OutputSpec("rating", "Rate it from 1 to 5.", Rating)


def plan(retries: int = 1) -> OutputPlan:
    return OutputPlan(SPEC.reserve(), retries)


# --- the outcome types -------------------------------------------------------------------


def test_the_outcomes_are_four_frozen_values() -> None:
    outcomes: list[TurnOutcome] = [Final("the answer"), RunAgain(), RunAgain(say="again"),
                                   Paused(), Stopped(StopCause.MAX_TURNS)]
    assert typing.get_args(TurnOutcome) == (Final, RunAgain, Paused, Stopped)
    for outcome in outcomes:
        for f in dataclasses.fields(outcome):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(outcome, f.name, "changed")
    assert Stopped(StopCause.ERROR) == Stopped(StopCause.ERROR, text=None, error=None)


async def test_a_text_ending_ends_on_a_text_answer_and_goes_on_after_calls() -> None:
    assert await TEXT_ENDING.after_text("42") == Final("42")
    assert await TEXT_ENDING.after_text("  \n") == Stopped(StopCause.NO_OUTPUT)
    assert TEXT_ENDING.after_calls() == RunAgain()
    assert TEXT_ENDING.ends_with([ToolCall("c", "anything", "{}")]) is False
    assert TEXT_ENDING.tool_choice() == "auto"


async def test_a_structured_ending_nudges_once_after_prose_then_stops() -> None:
    ending = plan()
    assert await ending.after_text("five stars") == RunAgain(
        say=NUDGE.format(tool=ending.tool_name))
    assert await ending.after_text("really, five") == Stopped(StopCause.NO_OUTPUT)
    assert ending.failure == "prose"


def test_a_structured_ending_ends_with_a_turn_that_calls_its_answering_tool() -> None:
    ending = plan()
    assert ending.ends_with([ToolCall("c", ending.tool_name, "{}")])
    assert not ending.ends_with([ToolCall("c", "search", "{}")])
    assert ending.after_calls() == RunAgain()  # no answer recorded yet


# --- the answering tool is an ordinary tool ----------------------------------------------


def test_the_answering_tool_passes_the_gate_like_any_tool() -> None:
    ending = plan(retries=1)
    tools = ending.tools({})
    good = ToolCall("c", ending.tool_name, '{"stars": 5}')
    bad = ToolCall("c", ending.tool_name, '{"stars": "many"}')
    turn = checks.view_turn([good], tools, CLEAN, SecurityConfig(), "ask")
    assert checks.check(good, 0, turn).verdict == checks.Run(ending.tool, {"stars": 5})
    refused = checks.check(bad, 0, turn).verdict
    assert isinstance(refused, checks.Refuse) and refused.status == "invalid_args"
    # The correction is the tool's own (it counts the retries left).
    assert refused.text.startswith("Error: the answer does not match the schema")
    assert ending.retries_left == 0


async def test_the_answering_tools_handler_records_the_answer() -> None:
    ending = plan()
    text = await ending.tool.handler({"stars": 4}, None)  # type: ignore[arg-type]
    assert text == "Answer recorded." and ending.value == Rating(stars=4)
    assert ending.after_calls() == Final("")


async def test_a_read_only_agent_still_takes_a_structured_answer() -> None:
    reservation = SPEC.reserve()
    model = Scripted([call(reservation.tool_name, stars=3)])
    agent = Agent(model, permission_mode="read-only")
    report = await agent.prepare("rate it", output=reservation).output()
    assert report.value == Rating(stars=3)
    finished = [e for e in report.result.events if isinstance(e, ev.ToolFinished)]
    assert [e.status for e in finished] == ["ok"]


def names_in(path: Path, within: str | None = None) -> set[str]:
    """Every name and attribute read in ``path`` (only in class ``within``, if given)."""
    tree: ast.AST = ast.parse(path.read_text(encoding="utf-8"))
    if within is not None:
        tree = next(n for n in ast.walk(tree)
                    if isinstance(n, ast.ClassDef) and n.name == within)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
    return out


def test_neither_the_gate_nor_the_loop_branch_on_the_answering_tool() -> None:
    for path, within in ((SRC / "gate.py", None), (SRC / "loop.py", "_Run")):
        seen = names_in(path, within)
        for word in ("OutputPlan", "origin", "output", "tool_name", "owns", "on_answer"):
            assert word not in seen, f"{path.name} reads {word!r}"

