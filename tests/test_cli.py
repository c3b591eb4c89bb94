"""The `tether` command, run as a real subprocess against a loopback Chat Completions server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.servers.http import Canned, LoopbackServer, Recorded


def completion(message: dict[str, object], finish: str) -> Canned:
    return Canned.json({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message},
                     "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    })


def tool_call(name: str, arguments: dict[str, object]) -> Canned:
    return completion({"content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}]}, "tool_calls")


def tool_calls(*calls: tuple[str, dict[str, object]]) -> Canned:
    """One answer calling several tools (parallel calls), ids ``call_1``, ``call_2``..."""
    return completion({"content": None, "tool_calls": [{
        "id": f"call_{n}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}
        for n, (name, arguments) in enumerate(calls, 1)]}, "tool_calls")


def answer(text: str) -> Canned:
    return completion({"content": text}, "stop")




def workspace(tmp_path: Path, base_url: str, extra: str = "") -> Path:
    (tmp_path / "tether.toml").write_text(f"""
default_provider = "test"
[providers.test]
kind = "openai-chat"
base_url = "{base_url}"
model = "m"
max_retries = 0
[tools]
enabled = ["calculator"]
{extra}
""")
    return tmp_path


def tether(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "COLUMNS": "200",
           "TETHER_STORE": str(ws / "sessions.db")}
    return subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(ws), *args],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                          timeout=60)


def test_run_streams_the_answer_and_shows_the_tool_and_usage(tmp_path: Path,
                                                             server: LoopbackServer) -> None:
    server.queue(tool_call("calculator", {"expression": "17 * 23"}), answer("17 * 23 = 391."))
    out = tether(workspace(tmp_path, server.url + "/v1"), "run",
                 "What is 17 * 23? Use the calculator.")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "17 * 23 = 391."
    assert "Calculator" in out.stderr and "391" in out.stderr
    assert "tokens in 40 · out 10 · turns 2" in out.stderr
    sent = server.requests[1].body
    assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "391"}
    assert sent["stream"] is True


def test_run_json_prints_the_run_result(tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(answer("Hello."))
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "--json", "Hi")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["text"] == "Hello." and result["stop_cause"] == "completed"
    assert result["usage"]["input_tokens"] == 20


def test_run_without_a_reachable_provider_says_what_to_configure(tmp_path: Path) -> None:
    with LoopbackServer() as srv:
        url = srv.url + "/v1"  # a port that was just closed: nothing listens there
    out = tether(workspace(tmp_path, url), "run", "Hi")
    assert out.returncode == 1
    assert "No model server answered for provider 'test'" in out.stderr
    assert "tether local serve" in out.stderr and "[providers.test]" in out.stderr


def test_run_with_an_output_schema_keeps_its_tools_and_prints_the_validated_json(
        tmp_path: Path, server: LoopbackServer) -> None:
    schema = {"title": "product", "type": "object",
              "properties": {"value": {"type": "integer"}}, "required": ["value"]}
    (tmp_path / "schema.json").write_text(json.dumps(schema))

    def answer_with_the_offered_tool(request: Recorded) -> Canned:
        offered = {t["function"]["name"]: t["function"] for t in request.body["tools"]}
        assert "calculator" in offered  # the run keeps its tools (with_tools())
        (name,) = [n for n in offered if n.startswith("product_")]
        assert offered[name]["parameters"] == schema
        return tool_call(name, {"value": 391})

    server.queue(answer_with_the_offered_tool)
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "--output-schema",
                 str(tmp_path / "schema.json"), "17*23?")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"value": 391}


def test_an_output_schema_run_answered_in_prose_exits_3(tmp_path: Path,
                                                       server: LoopbackServer) -> None:
    (tmp_path / "schema.json").write_text(json.dumps({"type": "object"}))
    server.queue(answer("391"), answer("still prose"))
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "--output-schema",
                 str(tmp_path / "schema.json"), "17*23?")
    assert out.returncode == 3
    assert "no valid answer (prose)" in out.stderr


def test_tools_lists_capabilities_and_approval_flags(tmp_path: Path,
                                                     server: LoopbackServer) -> None:
    out = tether(workspace(tmp_path, server.url + "/v1"), "tools", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["calculator"]["capabilities"] == []
    assert rows["calculator"]["needs_approval"] is False and rows["calculator"]["read_only"]


def test_config_init_writes_a_file_once(tmp_path: Path) -> None:
    first = tether(tmp_path, "config", "init")
    assert first.returncode == 0 and (tmp_path / "tether.toml").exists()
    second = tether(tmp_path, "config", "init")
    assert second.returncode == 1 and "--force" in second.stderr
    shown = tether(tmp_path, "config", "show")
    assert shown.returncode == 0
    lines = {x.split(" = ")[0]: x for x in shown.stdout.splitlines() if " = " in x}
    # Each key with the layer it came from: the file init wrote, or the built-in defaults.
    assert '"local"' in lines["default_provider"]
    assert lines["default_provider"].endswith(f"# {tmp_path / 'tether.toml'}")
    assert lines["agent.temperature"].endswith("# defaults")


def test_a_config_error_is_one_clear_line_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text("[agent]\nmax_turn = 3\n")
    out = tether(tmp_path, "run", "Hi")
    assert out.returncode == 1
    assert "unknown key agent.max_turn" in out.stderr and "Traceback" not in out.stderr


def test_max_turns_without_an_answer_exits_3(tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(tool_call("calculator", {"expression": "1+1"}),
                 tool_call("calculator", {"expression": "1+1"}))
    out = tether(workspace(tmp_path, server.url + "/v1"), "run", "--max-turns", "2", "loop")
    assert out.returncode == 3, out.stderr
    assert "stopped: max_turns" in out.stderr


def test_run_shows_a_delegation_its_nested_tool_activity_and_the_trust_verdict(
        tmp_path: Path, server: LoopbackServer) -> None:
    ws = workspace(tmp_path, server.url + "/v1", extra="""
[[subagents]]
name = "compute"
description = "Work out arithmetic."
tools = ["calculator", "fetch_url"]
trusted_output = true
answer_shape = "number"
""")
    (ws / "tether.toml").write_text((ws / "tether.toml").read_text().replace(
        'enabled = ["calculator"]', 'enabled = ["calculator", "fetch_url"]'))
    server.queue(tool_call("compute", {"task": "What is 17 * 23?"}),   # the parent delegates
                 tool_call("calculator", {"expression": "17 * 23"}),   # the child works
                 answer(" 391 "),                                      # the child answers
                 answer("It is 391."))                                 # the parent answers
    out = tether(ws, "run", "What is 17 * 23? Ask compute.")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "It is 391."
    err = out.stderr
    assert "⇢ sub-agent compute" in err
    assert "  → Calculator" in err  # the child's tool activity, nested
    assert "⇠ compute trusted (the answer matched the declared shape (a number))" in err
    child_request = server.requests[1].body
    assert [t["function"]["name"] for t in child_request["tools"]] == ["calculator", "fetch_url"]
    assert server.requests[3].body["messages"][-1]["content"] == "391"


def test_ctrl_c_stops_the_run_at_its_next_step_with_exit_130(tmp_path: Path,
                                                             server: LoopbackServer) -> None:
    import signal
    import threading

    gate = threading.Event()
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"tool_calls": [{
                 "index": 0, "id": "call_1", "type": "function",
                 "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}}]},
                 "finish_reason": None}]}
    done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    server.queue(Canned.sse([gate, chunk, done]))  # the answer waits until the gate opens
    ws = workspace(tmp_path, server.url + "/v1")
    env = {**os.environ, "TETHER_CONFIG": os.devnull}
    proc = subprocess.Popen([sys.executable, "-m", "tether.cli", "-w", str(ws), "run", "go"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        with server.received:
            assert server.received.wait_for(lambda: len(server.requests) == 1, timeout=30)
        proc.send_signal(signal.SIGINT)
        seen = ""
        while "interrupting" not in seen:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            assert line, f"tether exited early: {seen}"
            seen += line
        gate.set()
        proc.wait(timeout=30)
        # Through the same reader as readline: communicate() reads the pipe directly and
        # would miss a line readline had already buffered with the one it returned.
        err = proc.stderr.read()  # type: ignore[union-attr]
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, seen + err
    assert "stopped: interrupted" in err
    assert len(server.requests) == 1  # the calculator call was not run, no further turn


def test_the_console_approver_asks_at_a_terminal_and_a_no_is_a_refusal(
        tmp_path: Path, server: LoopbackServer) -> None:
    import pty
    import select

    server.queue(tool_call("write_file", {"path": "notes.txt", "content": "hi"}),
                 answer("I could not write it."))
    ws = workspace(tmp_path, server.url + "/v1")
    (ws / "tether.toml").write_text((ws / "tether.toml").read_text().replace(
        'enabled = ["calculator"]', 'enabled = ["write_file"]'))
    primary, secondary = pty.openpty()
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "COLUMNS": "120",
           "TERM": "dumb"}
    proc = subprocess.Popen([sys.executable, "-m", "tether.cli", "-w", str(ws), "run",
                             "Write hi to notes.txt"], stdin=secondary, stdout=secondary,
                            stderr=secondary, env=env, close_fds=True)
    os.close(secondary)
    screen = b""
    try:
        while b"Allow?" not in screen:
            ready, _, _ = select.select([primary], [], [], 30)
            assert ready, f"no approval prompt: {screen.decode(errors='replace')}"
            screen += os.read(primary, 4096)
        os.write(primary, b"n\n")
        while True:
            ready, _, _ = select.select([primary], [], [], 30)
            assert ready, "tether did not finish"
            try:
                data = os.read(primary, 4096)
            except OSError:  # the terminal closed: the process is done
                break
            if not data:
                break
            screen += data
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    text = screen.decode(errors="replace")
    assert "Approval needed" in text and "Write file" in text and "notes.txt" in text
    assert "needs approval" in text
    assert not (ws / "notes.txt").exists()
    refusal = server.requests[1].body["messages"][-1]["content"]
    assert refusal.startswith("Denied by the user: the user said no")
