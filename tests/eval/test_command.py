"""`tether eval` as a user runs it, against a loopback Chat Completions server: progress on
standard error, the table and summary on standard output, the JSON report, each run logged
(a failure opens with `tether sessions show`), the baseline's regressions and the exit
codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.servers.http import Canned, LoopbackServer
from tests.test_batch import WAIT, chat_completion, tether, workspace

SUITE = """\
cases:
  - id: weather
    prompt: What's the weather in Paris?
    repeat: 2
    tools:
      - name: get_weather
        parameters: {type: object, properties: {city: {type: string}}, required: [city]}
        result: "Paris: sunny, 21°C"
    expect:
      calls: [{tool: get_weather, args: {city: {regex: "(?i)paris"}}}]
      answer: {contains: sunny}
"""


def tool_call(name: str, arguments: dict[str, Any]) -> Canned:
    return Canned.json({
        "id": "x", "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5}})


def run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = tether(tmp_path, env, "eval", *args)
    stdout, stderr = proc.communicate(timeout=WAIT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_a_suite_runs_with_progress_a_table_a_summary_and_a_report(tmp_path: Path) -> None:
    (tmp_path / "cases.yaml").write_text(SUITE)
    with LoopbackServer() as server:
        server.queue(tool_call("get_weather", {"city": "Paris"}),
                     chat_completion("It is sunny in Paris."),
                     tool_call("get_weather", {"city": "Lyon"}),
                     chat_completion("Rain\n\x1b[32m✓ passed"))
        env = workspace(tmp_path, server.url)
        done = run(tmp_path, env, "cases.yaml", "-c", "1", "-o", "report.json")
    assert done.returncode == 1, done.stderr
    logged, announce, first, second = done.stderr.splitlines()
    assert logged.startswith("eval ") and "each run is logged" in logged
    assert announce == "eval: 2 run(s) to run"
    assert first.startswith("[1/2] ok     weather#1  ")
    assert second.startswith("[2/2] FAILED weather#2  ") and "calls.any: expected" in second
    assert "\x1b" not in done.stdout + done.stderr  # the model's escape shown, not obeyed
    row = next(line for line in done.stdout.splitlines() if "weather" in line)
    assert "1/2 FAIL" in row and "#2 calls.any: expected" in row
    session = row.split("tether sessions show ")[1].split(")")[0]
    assert done.stdout.splitlines()[-2].startswith(
        "eval FAILED: 0/1 cases passed · runs 1/2 · tokens in 62 · out 16 · ")
    assert done.stdout.splitlines()[-1] == "report: report.json"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["model"] == "loop:m" and report["cases"][0]["passes"] == 1
    assert [r["id"] for r in map(json.loads, (tmp_path / "report.runs.jsonl").read_text()
                                 .splitlines())] == ["weather#1", "weather#2"]
    shown = tether(tmp_path, env, "sessions", "show", session)
    transcript, _ = shown.communicate(timeout=WAIT)
    assert shown.returncode == 0 and "Lyon" in transcript


def test_a_regression_against_the_baseline_is_listed_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "cases.yaml").write_text(SUITE)

    def good() -> tuple[Canned, Canned]:
        return tool_call("get_weather", {"city": "Paris"}), chat_completion("sunny")

    with LoopbackServer() as server:
        env = workspace(tmp_path, server.url)
        server.queue(*good(), *good())
        done = run(tmp_path, env, "cases.yaml", "-c", "1", "-o", "old.json", "--no-log")
        assert done.returncode == 0, done.stderr
        assert "eval passed: 1/1 cases passed · runs 2/2" in done.stdout
        server.queue(*good(), *good())
        done = run(tmp_path, env, "cases.yaml", "-c", "1", "--baseline", "old.json",
                   "--no-log")
        assert done.returncode == 0, done.stderr
        assert "no regression against old.json" in done.stdout
        server.queue(*good(), chat_completion("I do not know."))
        done = run(tmp_path, env, "cases.yaml", "-c", "1", "--baseline", "old.json",
                   "--no-log")
        assert done.returncode == 1, done.stderr
        assert "1 regression(s) against old.json:\n  weather: passed 2/2 before, now 1/2\n" \
            in done.stdout
        # With --min-pass 0.5, one pass in two is a pass: no regression.
        server.queue(*good(), chat_completion("I do not know."))
        done = run(tmp_path, env, "cases.yaml", "-c", "1", "--baseline", "old.json",
                   "--no-log", "--min-pass", "0.5")
    assert done.returncode == 0, done.stderr
    assert "eval passed: 1/1 cases passed (at least 50% of their repeats) · runs 1/2" \
        in done.stdout


def test_a_bad_case_file_stops_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "cases.yaml").write_text(SUITE.replace("answer: {contains: sunny}",
                                                       "answr: {contains: sunny}"))
    with LoopbackServer() as server:
        env = workspace(tmp_path, server.url)
        done = run(tmp_path, env, "cases.yaml", "-o", "report.json")
        assert not server.requests
    assert done.returncode == 1
    assert "cases.yaml line 11: case \"weather\": expect.answr: unknown key" in done.stderr
    assert not (tmp_path / "report.json").exists()


def test_case_picks_cases_and_a_runs_file_with_runs_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    other = SUITE.replace("id: weather", "id: other").removeprefix("cases:\n")
    (tmp_path / "cases.yaml").write_text(SUITE + other)
    with LoopbackServer() as server:
        env = workspace(tmp_path, server.url)
        server.queue(tool_call("get_weather", {"city": "Paris"}), chat_completion("sunny"))
        done = run(tmp_path, env, "cases.yaml", "--case", "oth*", "--repeat", "1", "-o",
                   "report.json", "--no-log")
        assert done.returncode == 0, done.stderr
        report = json.loads((tmp_path / "report.json").read_text())
        assert [c["id"] for c in report["cases"]] == ["other"]
        done = run(tmp_path, env, "cases.yaml", "--case", "oth*", "-o", "report.json")
        assert done.returncode == 1
        assert "report.runs.jsonl already holds runs: --resume runs only the rest" in \
            done.stderr
        assert "each run is logged" not in done.stderr
        done = run(tmp_path, env, "cases.yaml", "--case", "nothing*")
        assert len(server.requests) == 2
    assert done.returncode == 1
    assert "--case nothing*: no case of 2 matches" in done.stderr


LOOPING = """\
cases:
  - id: calls-bounded
    prompt: What's the weather in Paris?
    tools: [{name: get_weather, result: "Paris: sunny, 21°C"}]
    expect: {max_calls: 2, answer: {contains: sunny}}
  - id: turns-bounded
    prompt: What's the weather in Paris?
    max_turns: 2
    tools: [{name: get_weather, result: "Paris: sunny, 21°C"}]
    expect: {answer: {contains: sunny}}
"""


def test_a_run_that_ends_at_its_bound_says_which_not_that_its_answer_is_empty(
        tmp_path: Path) -> None:
    # A model that calls the tool again after every result: one case bounds its calls, the
    # other its turns; each run ends at its bound and the report names it.
    (tmp_path / "cases.yaml").write_text(LOOPING)
    with LoopbackServer() as server:
        server.queue(*[tool_call("get_weather", {"city": "Paris"}) for _ in range(5)])
        env = workspace(tmp_path, server.url)
        done = run(tmp_path, env, "cases.yaml", "-c", "1", "-o", "report.json", "--no-log")
        # The call past the bound was never sent back to the model: 3 + 2 requests.
        assert len(server.requests) == 5
    assert done.returncode == 1, done.stderr
    rows = {line.split()[1]: line for line in done.stdout.splitlines()
            if "-bounded" in line}
    assert "#1 run.limit: the run ended at max_calls: call 3 was asked for, the case " \
        "allows 2" in rows["calls-bounded"]
    assert "#1 run.limit: the run ended at max_turns (2 turn(s))" in rows["turns-bounded"]
    assert "answer ''" not in done.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    stops = {c["id"]: c["repeats"][0]["stop_cause"] for c in report["cases"]}
    assert stops == {"calls-bounded": "max_calls", "turns-bounded": "max_turns"}
    assert "max_calls" in done.stderr and "max_turns" in done.stderr  # the progress lines


@pytest.mark.parametrize("profile", ["llama-server", "generic"])
def test_seed_reaches_a_server_that_takes_one_and_the_report_says_when_not(
        tmp_path: Path, profile: str) -> None:
    (tmp_path / "cases.yaml").write_text(SUITE)
    with LoopbackServer() as server:
        server.queue(*[chat_completion("sunny") for _ in range(2)])
        env = workspace(tmp_path, server.url)
        with (tmp_path / "tether.toml").open("a") as toml:
            toml.write(f'profile = "{profile}"\n')
        done = run(tmp_path, env, "cases.yaml", "-c", "1", "--seed", "7", "-o", "report.json",
                   "--no-log")
        seeds = sorted(r.body.get("seed", -1) for r in server.requests)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["seed"] == 7
    if profile == "llama-server":
        # Each repeat its own seed, the same in every evaluation with --seed 7.
        assert seeds == [7, 8] and report["seed_sent"] is True
        assert "takes no seed" not in done.stdout
    else:
        assert seeds == [-1, -1] and report["seed_sent"] is False
        assert "--seed 7: loop:m takes no seed; it shuffled the runs' order only" \
            in done.stdout
