"""Batch: a fresh conversation per item, bounded concurrency, JSONL results as items finish,
failures as result lines, resume, Ctrl-C, and the command's plain progress without a TTY."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.servers.http import Canned, LoopbackServer
from tether import Agent, Capabilities, tool
from tether.batch import (
    BatchError,
    BatchItem,
    BatchProgress,
    finished_ids,
    read_items,
    run_batch,
)
from tether.errors import ServerError
from tether.providers.base import ModelRequest
from tether.providers.scripted import Scripted, call

WAIT = 60.0


def _prompt(request: ModelRequest) -> str:
    return [m for m in request.messages if m.role == "user"][-1].text


def answering(request: ModelRequest) -> Any:
    """Echoes the prompt; prompts containing "fail" make the model raise."""
    prompt = _prompt(request)
    if "fail" in prompt:
        return ServerError(f"scripted failure for {prompt!r}", provider="scripted")
    if "crash" in prompt:
        return RuntimeError("the model adapter has a bug")
    return f"answer to {prompt}"


def echo_agent(n: int = 50, **kw: Any) -> Agent:
    return Agent(Scripted([answering] * n), **kw)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- the Python API -----------------------------------------------------------------------


def test_failures_in_some_items_become_failed_result_lines_and_the_rest_finish(
        tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    items: list[str | dict[str, Any]] = [
        "one", {"id": "f", "prompt": "please fail", "meta": {"k": 1}}, "two",
        {"id": "c", "prompt": "crash now"}, "three"]
    results = asyncio.run(run_batch(echo_agent(), items, concurrency=2, out=out))
    assert len(results) == 5
    by_id = {r["id"]: r for r in lines(out)}
    assert set(by_id) == {"1", "f", "3", "c", "5"}
    assert by_id["1"]["ok"] and by_id["1"]["text"] == "answer to one"
    assert by_id["1"]["stop_cause"] == "completed" and by_id["1"]["error"] is None
    failed = by_id["f"]
    assert not failed["ok"] and failed["stop_cause"] == "error"
    assert failed["error"] == "ServerError: scripted failure for 'please fail'"
    assert failed["meta"] == {"k": 1}
    crashed = by_id["c"]
    assert not crashed["ok"] and crashed["error"] == "RuntimeError: the model adapter has a bug"
    assert set(by_id["3"]) == {"id", "ok", "text", "error", "stop_cause", "usage", "taint",
                               "blocked_sends", "refused", "tool_calls", "turns", "elapsed",
                               "meta"}


def test_each_result_is_on_disk_when_its_item_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    seen: list[tuple[int, int]] = []

    def on_progress(p: BatchProgress) -> None:
        if p.last is not None:
            seen.append((p.finished, len(out.read_text().splitlines())))

    asyncio.run(run_batch(echo_agent(), [f"q{n}" for n in range(6)], concurrency=3, out=out,
                          on_progress=on_progress))
    assert seen == [(n, n) for n in range(1, 7)]


def test_concurrency_is_bounded() -> None:
    inflight = peak = 0

    class Counting(Scripted):
        async def stream(self, request: ModelRequest) -> Any:
            nonlocal inflight, peak
            inflight += 1
            peak = max(peak, inflight)
            for _ in range(20):  # hand control to the other items
                await asyncio.sleep(0)
            inflight -= 1
            async for chunk in super().stream(request):
                yield chunk

    agent = Agent(Counting([answering] * 10))
    results = asyncio.run(run_batch(agent, [f"q{n}" for n in range(10)], concurrency=3))
    assert peak == 3 and all(r.ok for r in results)


def test_each_item_gets_a_fresh_conversation_and_a_list_prompt_is_turns_on_one() -> None:
    model = Scripted([answering] * 10)
    results = asyncio.run(run_batch(Agent(model), [
        {"id": "chat", "prompt": ["first", "second", "third"]}, "alone"], concurrency=1))
    chat, alone = results
    assert chat.text == "answer to third" and chat.turns == 3 and chat.ok
    sizes = [len(r.messages) for r in model.requests]
    assert sizes == [1, 3, 5, 1]  # three turns on one conversation; then a fresh one
    assert alone.text == "answer to alone"


def test_a_failing_turn_stops_the_item_at_that_turn() -> None:
    model = Scripted([answering] * 10)
    [r] = asyncio.run(run_batch(Agent(model), [{"id": "x", "prompt": ["a", "fail b", "c"]}]))
    assert not r.ok and r.stop_cause == "error" and len(model.requests) == 2


def test_an_agent_factory_makes_one_agent_per_item_and_closes_it() -> None:
    made: list[Scripted] = []
    closed: list[Scripted] = []

    class Closing(Scripted):
        async def aclose(self) -> None:
            closed.append(self)

    def factory() -> Agent:
        model = Closing([answering])
        made.append(model)
        return Agent(model)

    results = asyncio.run(run_batch(factory, ["a", "b", "c"], concurrency=2))
    assert all(r.ok for r in results) and len(made) == 3 and sorted(map(id, closed)) == \
        sorted(map(id, made))


def test_a_resumed_batch_skips_the_ids_already_written(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    items = [{"id": f"i{n}", "prompt": f"q{n}"} for n in range(5)]
    asyncio.run(run_batch(echo_agent(), items, limit=2, out=out))
    assert finished_ids(out) == {"i0", "i1"}
    model = Scripted([answering] * 5)
    progress: list[BatchProgress] = []
    asyncio.run(run_batch(Agent(model), items, out=out, resume=True,
                          on_progress=progress.append))
    assert len(model.requests) == 3
    assert progress[-1].skipped == 2 and progress[-1].total == 3 and progress[-1].ok == 3
    assert sorted(r["id"] for r in lines(out)) == [f"i{n}" for n in range(5)]


def test_a_cut_off_last_line_is_run_again_and_not_glued_to_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "ok": true}\n{"id": "b", "ok"')  # killed mid-write
    assert finished_ids(out) == {"a"}
    asyncio.run(run_batch(echo_agent(), [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}],
                          out=out, resume=True))
    text = out.read_text().splitlines()
    assert text[1] == '{"id": "b", "ok"' and json.loads(text[2])["id"] == "b"


def test_an_existing_output_is_not_overwritten_without_resume(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n')
    with pytest.raises(BatchError, match="already holds results; pass resume=True"):
        asyncio.run(run_batch(echo_agent(), ["x"], out=out))
    assert out.read_text() == '{"id": "a"}\n'


def test_cancelling_keeps_the_results_written_and_reports_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    stall = asyncio.Event()

    def stalling(request: ModelRequest) -> Any:
        return answering(request)

    class Stalling(Scripted):
        async def stream(self, request: ModelRequest) -> Any:
            if _prompt(request).startswith("slow"):
                await stall.wait()  # never set: only cancellation ends it
            async for chunk in super().stream(request):
                yield chunk

    progress: list[BatchProgress] = []

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None

        def on_progress(p: BatchProgress) -> None:
            progress.append(p)
            if p.finished == 2:
                task.cancel()  # Ctrl-C, as asyncio.run delivers it

        await run_batch(Agent(Stalling([stalling] * 10)), ["a", "b", "slow c", "slow d"],
                        concurrency=4, out=out, on_progress=on_progress)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert [r["id"] for r in lines(out)] == ["1", "2"]
    assert progress[-1].state == "interrupted" and progress[-1].not_run == 2


def test_unattended_items_refuse_calls_that_need_approval_unless_allowed() -> None:
    ran: list[str] = []

    @tool(needs_approval=True, capabilities=Capabilities(destructive=True))
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    def model() -> Scripted:
        return Scripted([call("delete", path="a"), "done"])

    [refused] = asyncio.run(run_batch(Agent(model(), tools=[delete]), ["delete a"]))
    assert refused.refused == 1 and ran == []
    [allowed] = asyncio.run(run_batch(
        Agent(model(), tools=[delete], permission_mode="allow"), ["delete a"]))
    assert allowed.refused == 0 and ran == ["a"]


# --- input ------------------------------------------------------------------------------------


def test_input_lines_are_strings_or_objects_with_turns(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('"bare"\n\n{"id": 7, "prompt": ["a", "b"], "meta": [1]}\n'
                    '{"prompt": "no id"}\n')
    assert read_items(path) == [BatchItem("1", ("bare",)), BatchItem("7", ("a", "b"), [1]),
                                BatchItem("4", ("no id",))]


@pytest.mark.parametrize(("text", "message"), [
    ('"ok"\nnot json\n', r"in\.jsonl line 2: not JSON"),
    ('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "id 'a' appears twice"),
    ('{"prompt": "x", "model": "y"}\n', r"line 1: unknown key\(s\) model"),
    ('{"id": "a"}\n', "line 1: \"prompt\" must be a string or a non-empty list"),
    ('{"prompt": []}\n', "non-empty list"),
    ('"   "\n', "line 1: a prompt is empty"),
    ('42\n', "line 1: expected a string or an object"),
    ('{"id": true, "prompt": "x"}\n', "\"id\" must be"),
])
def test_bad_input_is_refused_before_anything_runs_naming_the_line(
        tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(text)
    with pytest.raises(BatchError, match=message):
        read_items(path)


# --- the command ------------------------------------------------------------------------------


def chat_completion(text: str) -> Canned:
    return Canned.json({
        "id": "x", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}})


def workspace(tmp_path: Path, url: str) -> dict[str, str]:
    (tmp_path / "tether.toml").write_text(
        f'default_provider = "loop"\n[providers.loop]\nkind = "openai-chat"\n'
        f'base_url = "{url}/v1"\nmodel = "m"\nmax_retries = 0\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(TETHER_CONFIG=os.devnull,
               TETHER_STORE=str(tmp_path / "sessions.db"), COLUMNS="100")
    return env


def tether(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    # SIGINT back to its default: a shell without job control starts background jobs with
    # it ignored, and Ctrl-C must reach the command.
    return subprocess.Popen([sys.executable, "-m", "tether.cli", "-w", str(tmp_path), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, cwd=tmp_path, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_the_command_prints_plain_progress_lines_and_a_summary_without_a_tty(
        tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('"one"\n{"id": "bad", "prompt": "two"}\n"three"\n')
    with LoopbackServer() as server:
        server.queue(chat_completion("first answer"),
                     Canned.json({"error": {"message": "bad request"}}, 400),
                     chat_completion("third answer"))
        env = workspace(tmp_path, server.url)
        proc = tether(tmp_path, env, "batch", "in.jsonl", "-o", "out.jsonl", "-c", "1")
        stdout, stderr = proc.communicate(timeout=WAIT)
    assert proc.returncode == 1, stderr
    logged, *err = stderr.splitlines()  # the batch's id in the session store, then progress
    assert logged.startswith("batch ") and "each item is logged" in logged
    assert err[0] == "batch: 3 item(s) to run"
    assert err[1].startswith("[1/3] ok     1  ") and err[1].endswith("tokens in 11 · out 3")
    assert err[2].startswith("[2/3] FAILED bad  ") and "BadRequestError" in err[2]
    assert err[3].startswith("[3/3] ok     3  ")
    assert "\x1b[" not in stderr  # no colours or bars in a log
    assert stdout.startswith("batch finished: 2 ok, 1 failed · tokens in 22 · out 6 · ")
    assert stdout.rstrip().endswith("results: out.jsonl")
    results = lines(tmp_path / "out.jsonl")
    assert [(r["id"], r["ok"], r["text"]) for r in results] == \
        [("1", True, "first answer"), ("bad", False, ""), ("3", True, "third answer")]


def test_ctrl_c_keeps_the_results_written_and_resume_runs_the_rest(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('"one"\n"two"\n"three"\n')
    stall = threading.Event()
    with LoopbackServer() as server:
        server.queue(chat_completion("first answer"),
                     Canned(200, [b'{"choices": ', stall], {"content-type": "application/json"}))
        env = workspace(tmp_path, server.url)
        proc = tether(tmp_path, env, "batch", "in.jsonl", "-o", "out.jsonl", "-c", "1")
        with server.received:  # wait until item 2 is in flight
            assert server.received.wait_for(lambda: len(server.requests) == 2, timeout=WAIT)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=WAIT)
        assert proc.returncode == 130, stderr
        assert [r["id"] for r in lines(tmp_path / "out.jsonl")] == ["1"]
        assert stdout.startswith("batch interrupted: 1 ok, 0 failed, 2 not run")
        assert "rerun with --resume" in stdout

        server.queue(chat_completion("second answer"), chat_completion("third answer"))
        # One at a time, so each item meets the answer queued for it.
        proc = tether(tmp_path, env, "batch", "in.jsonl", "-o", "out.jsonl", "--resume",
                      "-c", "1")
        stdout, stderr = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, stderr
    assert stderr.splitlines()[1] == "batch: 2 item(s) to run, 1 already done (skipped)"
    assert stdout.startswith("batch finished: 2 ok, 0 failed, 1 skipped (already in out.jsonl)")
    assert sorted((r["id"], r["text"]) for r in lines(tmp_path / "out.jsonl")) == \
        [("1", "first answer"), ("2", "second answer"), ("3", "third answer")]


def test_the_command_refuses_a_bad_input_line_before_running_anything(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('"one"\n{oops\n')
    env = workspace(tmp_path, "http://127.0.0.1:9")
    proc = tether(tmp_path, env, "batch", "in.jsonl", "-o", "out.jsonl")
    _, stderr = proc.communicate(timeout=WAIT)
    assert proc.returncode == 1
    assert "in.jsonl line 2: not JSON" in stderr
    assert not (tmp_path / "out.jsonl").exists()
