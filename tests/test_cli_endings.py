"""How the command line reports a run that did not finish well: an answer the output token
limit cut, an answer the provider filtered, a failing call repeated, a tool's failure. Real
subprocesses against a loopback Chat Completions server."""

from __future__ import annotations

import json
from pathlib import Path

from tests.servers.http import Canned, LoopbackServer
from tests.test_cli import completion, tool_call, workspace
from tests.test_cli_first_hour import tether


def cut(text: str) -> Canned:
    """An answer that ``finish_reason: "length"`` says the server's limit cut."""
    return completion({"content": text}, "length")


def test_a_cut_answer_exits_3_with_what_was_written_and_why(tmp_path: Path,
                                                           server: LoopbackServer) -> None:
    server.queue(cut("The capital of France is"))
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "Capital?")
    assert out.returncode == 3, out.stderr
    assert out.stdout.strip() == "The capital of France is"
    assert "cut by its output token limit" in out.stderr and "stopped: truncated" in out.stderr
    server.queue(cut("The capital of France is"))
    js = tether(workspace(tmp_path, server.url + "/v1"), "run", "--json", "Capital?")
    assert js.returncode == 3 and json.loads(js.stdout)["stop_cause"] == "truncated"


def test_a_cut_answer_is_not_ok_in_a_batch(tmp_path: Path, server: LoopbackServer) -> None:
    (tmp_path / "in.jsonl").write_text('"Capital?"\n')
    server.queue(cut("The capital of France is"))
    out = tether(workspace(tmp_path, server.url + "/v1"), "batch", str(tmp_path / "in.jsonl"),
                 "-o", str(tmp_path / "out.jsonl"))
    assert out.returncode == 1, out.stderr
    [line] = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert (line["ok"], line["stop_cause"], line["text"]) == \
        (False, "truncated", "The capital of France is")


def test_a_failed_builtin_call_is_shown_as_a_failure_not_a_tick(tmp_path: Path,
                                                                server: LoopbackServer) -> None:
    for _ in range(2):
        server.queue(tool_call("calculator", {"expression": "hello"}),
                     completion({"content": "Hello!"}, "stop"))
    ws = workspace(tmp_path, server.url + "/v1")
    out = tether(ws, "run", "Say hello")
    assert out.returncode == 0, out.stderr
    assert "✗ calculator" in out.stderr and "✓" not in out.stderr
    js = tether(ws, "run", "--json", "Say hello")
    [record] = json.loads(js.stdout)["tool_calls"]
    assert (record["status"], record["error"]) == ("error", True)


def test_a_failing_call_made_again_and_again_exits_3_and_is_not_ok_in_a_batch(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1")
    server.queue(*[tool_call("calculator", {"expression": "hello"})] * 4)
    out = tether(ws, "run", "Say hello")
    assert out.returncode == 3, out.stderr
    assert len(server.requests) == 4 and "stopped: repeated_failure" in out.stderr
    assert "max_repeated_failures" in out.stderr
    third = server.requests[3].body["messages"][-1]
    assert "has failed 3 times in this run" in third["content"]

    (tmp_path / "in.jsonl").write_text('"Say hello"\n')
    server.queue(*[tool_call("calculator", {"expression": "hello"})] * 4)
    batch = tether(ws, "batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"))
    assert batch.returncode == 1, batch.stderr
    [line] = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert (line["ok"], line["stop_cause"]) == (False, "repeated_failure")


def test_a_filtered_answer_exits_3_and_says_so(tmp_path: Path,
                                               server: LoopbackServer) -> None:
    server.queue(completion({"content": "I can't"}, "content_filter"))
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "Hi")
    assert out.returncode == 3, out.stderr
    assert out.stdout.strip() == "I can't"
    assert "filtered or refused" in out.stderr and "stopped: content_filter" in out.stderr
