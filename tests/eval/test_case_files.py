"""Case files are read strictly: a bad one is an EvalError naming the file, the line, the
case and the field, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.eval.cases import EvalError
from tether.eval.files import load_suite

GOOD = """\
cases:
  - id: weather
    prompt: What's the weather in Paris?
    tools:
      - name: get_weather
        result: "Paris: sunny"
    expect:
      calls: [get_weather]
"""


def write(tmp_path: Path, text: str, name: str = "cases.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(path: Path) -> str:
    with pytest.raises(EvalError) as caught:
        load_suite(path)
    return str(caught.value)




def test_a_yaml_suite_reads_with_its_defaults(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, GOOD + "repeat: 3\n"))
    assert suite.repeat == 3 and suite.cases[0].expect.calls[0].tool == "get_weather"  # type: ignore[index]


@pytest.mark.parametrize(("broken", "line", "field"), [
    (GOOD.replace("      calls: [get_weather]", "      cals: [get_weather]"), 8,
     "expect.cals: unknown key"),
    (GOOD.replace("      calls: [get_weather]", "      max_calls: many"), 8,
     "expect.max_calls: Input should be a valid integer"),
    (GOOD.replace("      calls: [get_weather]",
                  "      answer: {regex: '(unclosed'}"), 8,
     "expect.answer.regex: bad regular expression '(unclosed'"),
    (GOOD.replace("      - name: get_weather", "      - name: get weather"), 5,
     "tools[0].name: String should match pattern"),
    (GOOD.replace("      calls: [get_weather]", "      stop_cause: finished"), 8,
     "expect.stop_cause: Input should be 'completed'"),
    (GOOD.replace("        result: \"Paris: sunny\"",
                  "        parameters: {type: object, properties: {city: {type: 7}}}"), 6,
     "tools[0].parameters: not a valid JSON Schema"),
    (GOOD.replace("      calls: [get_weather]", "      order: exact"), 8,
     "expect: order and only apply to calls"),
])
def test_a_bad_field_is_named_with_its_case_and_line(tmp_path: Path, broken: str, line: int,
                                                     field: str) -> None:
    message = error_of(write(tmp_path, broken))
    assert message.startswith(f"{tmp_path / 'cases.yaml'} line {line}: case \"weather\": "
                              f"{field}"), message


def test_a_case_without_an_id_is_named_by_its_position(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "cases:\n  - prompt: hi\n  - id: b\n"))
    assert "line 2: case #1: id: Field required" in message
    assert "line 3: case \"b\": prompt: Field required" in message


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace("      calls: [get_weather]", "      calls: [a]\n      calls: [b]")
    assert error_of(write(tmp_path, text)).endswith(
        "line 9: key 'calls' appears twice in one mapping")


def test_repeated_case_ids_and_tools_are_refused(tmp_path: Path) -> None:
    twice = GOOD + GOOD.removeprefix("cases:\n")
    assert "case id 'weather' appears twice" in error_of(write(tmp_path, twice))
    tools = GOOD.replace("    expect:", "      - name: get_weather\n    expect:")
    assert "tool 'get_weather' is declared twice" in error_of(write(tmp_path, tools))


def test_an_output_expectation_needs_the_cases_output_shape(tmp_path: Path) -> None:
    text = GOOD.replace("      calls: [get_weather]", "      answer: {output: {a: 1}}")
    assert "line 2: case \"weather\": expect.answer.output needs the case's output" in \
        error_of(write(tmp_path, text))


def test_not_yaml_not_utf8_and_empty_files_say_so(tmp_path: Path) -> None:
    assert "line 3: not YAML (did not find expected ',' or ']')" in \
        error_of(write(tmp_path, "cases:\n  - [unclosed\n"))
    path = tmp_path / "latin.yaml"
    path.write_bytes("cases:\n  - id: caf\xe9\n".encode("latin-1"))
    assert error_of(path).endswith("line 2: not UTF-8 (byte 0xe9); a case file must be UTF-8")
    assert error_of(write(tmp_path, "")).endswith("no cases (the file is empty)")
    assert "expected a list of cases" in error_of(write(tmp_path, "just text\n"))


def test_a_jsonl_file_names_the_line_of_the_bad_case(tmp_path: Path) -> None:
    good = {"id": "a", "prompt": "hi"}
    lines = [json.dumps(good), "", json.dumps({"id": "b", "prompt": "hi", "repeat": 0})]
    path = write(tmp_path, "\n".join(lines) + "\n", "cases.jsonl")
    assert error_of(path) == (f"{path} line 3: case \"b\": repeat: Input should be greater "
                              f"than or equal to 1")
    path = write(tmp_path, json.dumps(good) + "\n{nope\n", "cases.jsonl")
    assert error_of(path).startswith(f"{path} line 2: not JSON")


def test_a_hostile_case_id_is_quoted_on_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"id": "x\n\x1b[31mok", "prompt": 5}) + "\n",
                 "cases.jsonl")
    message = error_of(path)
    assert "\n" not in message and "\x1b" not in message
    assert 'case "x\\n\\u001b[31mok": prompt: Input should be a valid string' in message


def test_tools_files_are_found_beside_the_case_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", "cases:\n  - id: a\n    prompt: hi\n"
                                   "    tools_file: ../tools.py:get_weather\n")
    (case,) = load_suite(path).cases
    assert case.tools_file == [f"{tmp_path / 'sub' / '..' / 'tools.py'}:get_weather"]


def test_aliases_that_expand_without_end_are_refused(tmp_path: Path) -> None:
    rows = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    rows += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, 9)]
    text = "\n".join(rows) + "\ncases: [{id: a, prompt: *a8}]\n"
    assert error_of(write(tmp_path, text)).endswith(
        "more than 200000 values once its aliases are expanded; a case file is not that big")


def test_every_case_of_the_shipped_smoke_suite_bounds_its_calls_and_its_turns() -> None:
    # A model that calls a tool after every result ends at the bound in seconds, its report
    # saying max_calls, instead of running turn after turn (7 minutes on 2 cores before).
    smoke = load_suite(Path(__file__).resolve().parents[2] / "examples/eval/smoke.yaml")
    for case in smoke.cases:
        assert case.max_turns is not None and case.max_turns <= 3, case.id
        assert case.expect.max_calls is not None and case.expect.max_calls <= 2, case.id
