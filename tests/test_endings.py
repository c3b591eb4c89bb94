"""How a run ends when the model cannot finish: an answer cut by an output token limit
(``truncated``), and a call repeated after it failed again and again (``repeated_failure``),
on the scripted model. The wires' own signals are tested in test_provider_contract.py, the
command line's exit codes and batch's ``ok`` in test_cli_endings.py."""

from __future__ import annotations

import pytest

from tether import Agent, OutputSpec, StopCause, SubagentProfile, tool
from tether import events as ev
from tether.errors import OutputFailure
from tether.messages import ToolCall, ToolResult, Usage
from tether.providers import Reply, Scripted, call

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@tool
def write_note(path: str, content: str) -> str:
    """Write a note."""
    ran.append(f"{path}: {content}")
    return "written"


def cut(text: str = "", *calls: ToolCall) -> Reply:
    """An answer the output token limit cut (every wire's signal maps to ``max_tokens``)."""
    return Reply(text=text, calls=calls, stop_reason="max_tokens")


def tool_results(result: object) -> list[ToolResult]:
    return [p for m in result.messages for p in m.parts  # type: ignore[attr-defined]
            if isinstance(p, ToolResult)]


# --- a cut answer -------------------------------------------------------------------------


async def test_a_cut_answer_stops_the_run_as_truncated_not_completed() -> None:
    result = await Agent(Scripted([cut("The capital of France is")])).run("Capital?")
    assert result.stop_cause == StopCause.TRUNCATED == "truncated"
    assert result.text == "The capital of France is"  # what was written, for what it is
    notices = [e for e in result.events if isinstance(e, ev.Notice)]
    assert [n.level for n in notices] == ["warning"]
    assert "cut by its output token limit" in notices[0].message


async def test_no_call_of_a_cut_answer_runs_and_the_conversation_stays_valid() -> None:
    whole = ToolCall("c1", "write_note", '{"path": "a.txt", "content": "done"}')
    # The last call's arguments end where the limit fell; repaired, they would parse.
    halved = ToolCall("c2", "write_note", '{"path": "b.txt", "content": "the first ha')
    model = Scripted([cut("Writing both.", whole, halved), "Continued."])
    agent = Agent(model, tools=[write_note])
    result = await agent.run("Write two notes.")
    assert result.stop_cause == "truncated" and ran == []
    assert [r.content for r in tool_results(result)] == [
        "Not run: the answer that made it was cut short by the output token limit."] * 2
    assert result.conversation.unanswered_calls == []
    again = await agent.run("Go on.", conversation=result.conversation)
    assert again.stop_cause == "completed"


async def test_the_runs_own_budget_cutting_the_answer_stays_output_token_budget() -> None:
    spent = Reply(text="Half", usage=Usage(10, 50), stop_reason="max_tokens")
    result = await Agent(Scripted([spent]), max_output_tokens=50).run("Hi")
    assert result.stop_cause == "output_token_budget"
    # Under the budget, a lower limit of the provider's own is a cut answer.
    below = Reply(text="Half", usage=Usage(10, 20), stop_reason="max_tokens")
    result = await Agent(Scripted([below]), max_output_tokens=50).run("Hi")
    assert result.stop_cause == "truncated"


async def test_a_cut_structured_answer_is_a_truncated_failure_never_a_value() -> None:
    spec = OutputSpec("report", "The city.", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    reservation = spec.reserve()
    # The answering call's arguments parse (a cut string closed by a repair would too).
    answer = ToolCall("c1", reservation.tool_name, '{"city": "Par"}')
    agent = Agent(Scripted([cut("", answer)]))
    with pytest.raises(OutputFailure) as failure:
        await agent.prepare("City?", output=reservation).output()
    assert failure.value.reason == "truncated"
    assert failure.value.result is not None and failure.value.result.stop_cause == "truncated"


async def test_a_childs_cut_answer_reaches_its_parent_as_an_error_not_an_answer() -> None:
    profile = SubagentProfile("summarize", "Summarize.", provider="child")
    child = Scripted([cut("The report says that the")])
    parent = Scripted([call("summarize", task="Summarize the report."), "Sorry."])
    result = await Agent(parent, subagents=[profile], providers={"child": child}).run("go")
    assert [r.status for r in result.tool_calls] == ["error"]
    told = tool_results(result)[0].content
    assert "cut off by its output token limit" in told and "The report says that the" in told
    finished = [e for e in result.events if isinstance(e, ev.SubagentFinished)]
    assert [f.stop_cause for f in finished] == ["truncated"]
