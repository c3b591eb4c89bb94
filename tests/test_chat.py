"""`tether chat` driven through piped stdin, against a loopback Chat Completions server, and
the sessions it stores (`tether sessions`, `tether run --session`, `tether doctor`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.servers.http import Canned, LoopbackServer
from tether.store import Session, SQLiteStore

WAIT = 60.0


def answer(text: str) -> Canned:
    return Canned.json({
        "id": "x", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5}})


def tool_call(call_id: str, name: str, **arguments: Any) -> Canned:
    return Canned.json({
        "id": "x", "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5}})


def workspace(tmp_path: Path, url: str) -> dict[str, str]:
    (tmp_path / "tether.toml").write_text(
        f'default_provider = "loop"\n[providers.loop]\nkind = "openai-chat"\n'
        f'base_url = "{url}/v1"\nmodel = "m"\nmax_retries = 0\n'
        f'[tools]\nenabled = ["read_file", "write_file"]\n')
    (tmp_path / "notes.txt").write_text("door code 0417\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(TETHER_CONFIG=os.devnull,
               TETHER_STORE=str(tmp_path / "sessions.db"), COLUMNS="200")
    return env


def tether(tmp_path: Path, env: dict[str, str], *args: str,
           stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(tmp_path), *args],
                          input=stdin, capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=WAIT)


def only_session(tmp_path: Path) -> Session:
    store = SQLiteStore(tmp_path / "sessions.db")
    [info] = store.list()
    return Session.load(info.id, store)


def test_chat_runs_turns_and_commands_from_piped_lines(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(answer("Hello! How can I help?"), answer("Still here."))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat",
                      stdin="/help\nhello\n\n/tools\n/nope\nare you there?\n/session\n/exit\n"
                            "never read\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello! How can I help?\nStill here.\n"
    err = done.stderr
    assert "/taint" in err and "/exit" in err  # /help
    assert "read_file" in err and "write_file" in err and "needs approval" in err  # /tools
    assert "unknown command /nope; /help lists them" in err
    session = only_session(tmp_path)
    assert f"session {session.id}" in err
    assert f"continue with: tether chat --session {session.id}" in err
    assert [m.text for m in session.messages] == \
        ["hello", "Hello! How can I help?", "are you there?", "Still here."]
    assert len(server.requests) == 2  # the line after /exit was never sent


def test_chat_asks_for_approval_on_the_next_line_and_keeps_the_taint(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(tool_call("c1", "read_file", path="notes.txt"),
                     tool_call("c2", "write_file", path="copy.txt", content="door code 0417"),
                     answer("Copied."))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat", stdin="copy my notes\ny\n/taint\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "copy.txt").read_text() == "door code 0417"
    assert "Approval needed" in done.stderr and "Write file" in done.stderr
    assert "taint: private" in done.stderr and "private data seen: yes" in done.stderr
    session = only_session(tmp_path)
    assert session.taint.private and not session.taint.untrusted
    assert session.info.last_stop == "completed"
    # The stored events say who allowed the write.
    decided = [e for e in session.events() if e["kind"] == "approval_decided"]
    assert [(e["tool"], e["allowed"], e["by"]) for e in decided] == \
        [("write_file", True, "approver")]


def test_a_denied_approval_is_told_to_the_model(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(tool_call("c2", "write_file", path="x.txt", content="x"),
                     answer("Understood, I did not write it."))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat", stdin="write x\nn\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "x.txt").exists()
    sent = server.requests[1].body["messages"][-1]
    assert sent["role"] == "tool" and "Denied by the user" in sent["content"]


def test_chat_continues_a_stored_session_with_its_taint(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(tool_call("c1", "read_file", path="notes.txt"), answer("Read it."))
        env = workspace(tmp_path, server.url)
        first = tether(tmp_path, env, "chat", "--session", "notes", stdin="read my notes\n")
        assert first.returncode == 0, first.stderr
        server.queue(answer("You asked me to read your notes."))
        again = tether(tmp_path, env, "chat", "--session", "notes",
                       stdin="/taint\nwhat did I ask?\n")
    assert again.returncode == 0, again.stderr
    assert "continuing: 4 messages, taint private" in again.stderr
    assert "taint: private" in again.stderr
    sent = server.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert [m.text for m in Session.load("notes", SQLiteStore(tmp_path / "sessions.db"))
            .messages][-2:] == ["what did I ask?", "You asked me to read your notes."]


def test_chat_without_a_store_keeps_nothing(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(answer("hi"))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat", "--no-store", stdin="hello\n/session\n")
    assert done.returncode == 0, done.stderr
    assert "not stored" in done.stderr
    assert not (tmp_path / "sessions.db").exists()


# --- tether run --session, tether sessions -----------------------------------------------------


def test_run_with_a_session_continues_it_and_sessions_lists_and_shows_it(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(tool_call("c1", "read_file", path="notes.txt"), answer("The code is 0417."),
                     answer("You asked for the code."))
        env = workspace(tmp_path, server.url)
        first = tether(tmp_path, env, "run", "--session", "work", "What is my door code?")
        second = tether(tmp_path, env, "run", "--session", "work", "What did I ask?")
        listed = tether(tmp_path, env, "sessions", "list", "--json")
        shown = tether(tmp_path, env, "sessions", "show", "work")
        shown_json = tether(tmp_path, env, "sessions", "show", "work", "--json", "--events")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert second.stdout == "You asked for the code.\n"
    assert len(server.requests[2].body["messages"]) == 5  # the whole session was sent
    [info] = json.loads(listed.stdout)
    assert (info["id"], info["title"], info["messages"], info["taint"], info["last_stop"]) == \
        ("work", "What is my door code?", 6, {"private": True, "untrusted": False}, "completed")
    assert "taint: private" in shown.stdout and "6 messages" in shown.stdout
    assert "read_file" in shown.stdout and "The code is 0417." in shown.stdout
    data = json.loads(shown_json.stdout)
    assert [o["stop_cause"] for o in data["outcomes"]] == ["completed", "completed"]
    assert {e["kind"] for e in data["events"]} >= {"run_started", "tool_finished",
                                                   "taint_changed", "model_responded"}


def test_a_paused_session_is_decided_and_resumed_from_the_command_line(tmp_path: Path) -> None:
    # A host with a deferring approver paused it (another process); the CLI decides.
    from tether import Agent, Capabilities, tool
    from tether.providers.scripted import Scripted, call
    from tether.run.pending import DeferringApprover

    @tool(needs_approval=True, capabilities=Capabilities(destructive=True))
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "not run here"

    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session.create(store, provider="loop", model="m", id="paused")
    Agent(Scripted([call("write_file", path="out.txt", content="hi", id="w1")]),
          tools=[write_file], approver=DeferringApprover()).run_sync("write hi", session=session)
    store.close()

    with LoopbackServer() as server:
        server.queue(answer("Wrote it."))
        env = workspace(tmp_path, server.url)
        blocked = tether(tmp_path, env, "run", "--session", "paused", "anything else?")
        shown = tether(tmp_path, env, "sessions", "show", "paused")
        undecided = tether(tmp_path, env, "sessions", "resume", "paused")
        wrong = tether(tmp_path, env, "sessions", "resume", "paused", "--allow", "nope")
        resumed = tether(tmp_path, env, "sessions", "resume", "paused", "--allow", "w1")
        again = tether(tmp_path, env, "sessions", "resume", "paused")
    assert blocked.returncode == 1 and "paused waiting for approval of w1 (write_file)" in \
        blocked.stderr
    assert "paused, waiting for decisions:" in shown.stdout and "w1  write_file" in shown.stdout
    assert undecided.returncode == 1 and "waits for decisions on w1" in undecided.stderr
    assert wrong.returncode == 1 and "no paused call nope; waiting: w1" in wrong.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "Wrote it.\n"
    assert (tmp_path / "out.txt").read_text() == "hi"  # the config's real write_file ran
    assert "nothing to resume" in again.stderr and again.returncode == 0
    assert Session.load("paused", SQLiteStore(tmp_path / "sessions.db")).pending is None


def test_sessions_rm_deletes_and_names_what_it_could_not(tmp_path: Path) -> None:
    env = workspace(tmp_path, "http://127.0.0.1:9")
    store = SQLiteStore(tmp_path / "sessions.db")
    Session.create(store, id="a")
    done = tether(tmp_path, env, "sessions", "rm", "a", "b")
    assert done.returncode == 1
    assert done.stdout == "deleted a\n" and "no session b" in done.stderr
    assert tether(tmp_path, env, "sessions", "list").stdout.startswith("no sessions in ")


def test_doctor_checks_that_the_store_is_writable(tmp_path: Path) -> None:
    env = workspace(tmp_path, "http://127.0.0.1:9")
    done = tether(tmp_path, env, "doctor")
    line = next(x for x in done.stdout.splitlines() if "session store" in x)
    assert line.startswith("✓ session store") and "writable (schema v3, 0 session(s))" in line
    blocker = tmp_path / "file"
    blocker.write_text("")
    env["TETHER_STORE"] = str(blocker / "sessions.db")  # a folder that cannot exist
    done = tether(tmp_path, env, "doctor")
    line = next(x for x in done.stdout.splitlines() if "session store" in x)
    assert line.startswith("✗ session store") and "cannot open the session store" in line


def test_chat_on_a_paused_session_asks_for_the_paused_call_first(tmp_path: Path) -> None:
    from tether import Agent, Capabilities, tool
    from tether.providers.scripted import Scripted, call
    from tether.run.pending import DeferringApprover

    @tool(needs_approval=True, capabilities=Capabilities(destructive=True))
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "not run here"

    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session.create(store, provider="loop", model="m", id="waiting")
    Agent(Scripted([call("write_file", path="late.txt", content="late", id="w1")]),
          tools=[write_file], approver=DeferringApprover()).run_sync("write late", session=session)
    store.close()

    with LoopbackServer() as server:
        server.queue(answer("Written at last."))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat", "--session", "waiting", stdin="y\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert "paused waiting for approval; deciding now" in done.stderr
    assert done.stdout == "Written at last.\n"
    assert (tmp_path / "late.txt").read_text() == "late"
    assert Session.load("waiting", SQLiteStore(tmp_path / "sessions.db")).pending is None


def test_ctrl_c_during_a_turn_stops_that_turn_and_the_chat_goes_on(tmp_path: Path) -> None:
    import signal
    import threading

    gate = threading.Event()
    call = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{
        "index": 0, "finish_reason": None, "delta": {"tool_calls": [{
            "index": 0, "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"}}]}}]}
    done = {**call, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    with LoopbackServer() as server:
        server.queue(Canned.sse([gate, call, done]), answer("Back again."))
        env = workspace(tmp_path, server.url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "-w", str(tmp_path), "chat"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, env=env)
        try:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write("read my notes\n")
            proc.stdin.flush()
            with server.received:
                assert server.received.wait_for(lambda: len(server.requests) == 1, timeout=WAIT)
            proc.send_signal(signal.SIGINT)
            seen = ""
            while "interrupting" not in seen:
                line = proc.stderr.readline()
                assert line, f"chat exited early: {seen}"
                seen += line
            gate.set()
            proc.stdin.write("hello again\n/exit\n")
            proc.stdin.close()
            proc.wait(timeout=WAIT)  # what it writes is a few lines: the pipes do not fill
            # Through the same reader as readline: communicate() reads the pipe directly and
            # would miss a line readline had already buffered with the one it returned (the
            # "stopped: interrupted" line, when it came in the same read as "interrupting").
            assert proc.stdout is not None
            out, err = proc.stdout.read(), proc.stderr.read()
        finally:
            gate.set()
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, seen + err
    assert "stopped: interrupted" in err
    assert out == "Back again.\n"
    # The answer in progress was abandoned (its read_file call never ran) and the chat went
    # on with the next prompt on the same conversation.
    sent = server.requests[1].body["messages"]
    assert [(m["role"], m.get("content")) for m in sent] == [
        ("user", "read my notes"), ("user", "hello again")]


# --- a session longer than the model's window (docs/context.md) --------------------------------


def test_run_and_chat_say_in_one_line_what_was_fitted_and_the_session_stays_whole(
        tmp_path: Path) -> None:
    with LoopbackServer() as server:
        env = workspace(tmp_path, server.url)
        toml = tmp_path / "tether.toml"
        toml.write_text(toml.read_text().replace('max_retries = 0\n',
                                                 'max_retries = 0\ncontext_window = 1024\n'))
        (tmp_path / "log.txt").write_text("a line of the build log\n" * 400)
        server.queue(tool_call("c1", "read_file", path="log.txt"), answer("It built."),
                     answer("You asked about the log."), answer("Still here."),
                     answer("Everything."))
        first = tether(tmp_path, env, "run", "--session", "long", "Did it build?")
        second = tether(tmp_path, env, "run", "--session", "long", "What did I ask?")
        chat = tether(tmp_path, env, "chat", "--session", "long", stdin="and now?\n")
        whole = tether(tmp_path, env, "run", "--session", "long", "--context", "off",
                       "Send it all.")
    for done in (first, second, chat, whole):
        assert done.returncode == 0, done.stderr
    # The newest tool result alone passed the window: shortened, and said so.
    assert "context: sent 3 of 3 messages" in first.stderr
    assert "1 tool result(s) shortened" in first.stderr
    lines = [[x for x in done.stderr.splitlines() if "context: sent" in x]
             for done in (second, chat)]
    assert lines[0][0].startswith("context: sent 4 of 5 messages")
    assert lines[1][0].startswith("context: sent 6 of 7 messages")
    assert all("window 1,024" in x and "1 left out" in x for [x] in lines)
    assert "context:" not in whole.stderr
    sent = [r.body["messages"] for r in server.requests]
    assert "Did it build?" not in json.dumps(sent[2]) and "left out" in sent[2][0]["content"]
    assert len(sent[4]) == 9 and sent[4][0]["content"] == "Did it build?"
    assert len(only_session(tmp_path).messages) == 10


# --- what a chat offers at the prompt ---------------------------------------------------------


def test_a_chat_that_says_nothing_stores_no_session(tmp_path: Path) -> None:
    env = workspace(tmp_path, "http://127.0.0.1:9")
    done = tether(tmp_path, env, "chat", stdin="/help\n/session\n\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert "not stored yet" in done.stderr and "no session stored" in done.stderr
    assert "/model" in done.stderr and "/clear" in done.stderr and '"""' in done.stderr
    assert SQLiteStore(tmp_path / "sessions.db").list() == []


def test_a_chat_is_titled_with_its_first_message_and_multi_line_messages_stay_one(
        tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(answer("one"), answer("two"))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat",
                      stdin='"""\nfirst line\n\nsecond line\n"""\nhello \\\nthere\n')
        sent = [r.body["messages"] for r in server.requests]
    assert done.returncode == 0, done.stderr
    assert sent[0][-1]["content"] == "first line\n\nsecond line"
    assert sent[1][-1]["content"] == "hello \nthere"
    session = only_session(tmp_path)
    assert session.info.title == "first line second line"


def test_chat_system_model_and_clear_commands(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(answer("a"), answer("b"), answer("c"))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat", stdin=(
            "/system Answer in French.\n/system\nbonjour\n/model other-model\n/model\n"
            "encore\n/clear\nfresh start\n/exit\n"))
        sent = [r.body for r in server.requests]
    assert done.returncode == 0, done.stderr
    assert "system prompt: Answer in French." in done.stderr
    assert sent[0]["messages"][0] == {"role": "system", "content": "Answer in French."}
    assert sent[0]["model"] == "m" and sent[1]["model"] == "other-model"
    assert "model other-model (provider loop)" in done.stderr
    assert [m["content"] for m in sent[1]["messages"] if m["role"] == "user"] == \
        ["bonjour", "encore"]
    assert [m["content"] for m in sent[2]["messages"] if m["role"] == "user"] == ["fresh start"]
    titles = sorted(i.title for i in SQLiteStore(tmp_path / "sessions.db").list())
    assert titles == ["bonjour", "fresh start"]  # /clear began a second session


def test_a_denial_carries_the_reason_the_person_typed(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(tool_call("c2", "write_file", path="notes.txt", content="new"),
                     answer("I left it alone."))
        env = workspace(tmp_path, server.url)
        done = tether(tmp_path, env, "chat", stdin="overwrite my notes\nn keep my notes\n")
        sent = server.requests[1].body["messages"][-1]
    assert done.returncode == 0, done.stderr
    assert sent["role"] == "tool" and "keep my notes" in sent["content"]
    assert "door code 0417" in done.stderr  # the diff against the file as it is now
    assert (tmp_path / "notes.txt").read_text() == "door code 0417\n"


def test_ctrl_c_at_the_prompt_of_a_terminal_leaves(tmp_path: Path) -> None:
    import signal

    from tests.terminal import Terminal

    env = workspace(tmp_path, "http://127.0.0.1:9")
    env.update(TERM="dumb", TETHER_CACHE_DIR=str(tmp_path / "cache"))
    terminal = Terminal(["-w", str(tmp_path), "chat"], env, cwd=tmp_path, wait=WAIT)
    try:
        terminal.read_until("you›".encode())
        terminal.proc.send_signal(signal.SIGINT)
        terminal.read_until(b"no session stored")
        assert terminal.proc.wait(timeout=WAIT) == 0
    finally:
        terminal.close()
    assert SQLiteStore(tmp_path / "sessions.db").list() == []


def test_ctrl_c_at_an_approval_prompt_ends_the_turn_and_the_chat_goes_on(tmp_path: Path) -> None:
    from tests.terminal import Terminal

    with LoopbackServer() as server:
        server.queue(tool_call("c1", "write_file", path="notes.txt", content="gone"),
                     answer("Still here."))
        env = workspace(tmp_path, server.url)
        env.update(TERM="dumb", TETHER_CACHE_DIR=str(tmp_path / "cache"))
        terminal = Terminal(["-w", str(tmp_path), "chat"], env, cwd=tmp_path, wait=WAIT)
        try:
            terminal.read_until("you›".encode())
            terminal.press(b"overwrite my notes\r")
            terminal.read_until(b"(n): ")
            terminal.press(b"\x03")  # once: the prompt ends, not after an Enter
            terminal.read_until(b"stopped: interrupted")
            terminal.read_until("you›".encode())
            terminal.press(b"are you there?\r")  # read by the chat, not by the old prompt
            terminal.read_until(b"Still here.")
            terminal.read_until("you›".encode())
            terminal.press(b"/exit\r")
            terminal.read_until(None)
            assert terminal.proc.wait(timeout=WAIT) == 0
        finally:
            terminal.close()
        sent = server.requests[1].body["messages"]
    assert (tmp_path / "notes.txt").read_text() == "door code 0417\n"
    denied = [m for m in sent if m["role"] == "tool"]
    assert len(denied) == 1 and "interrupted" in denied[0]["content"]
    assert sent[-1] == {"role": "user", "content": "are you there?"}
    assert "retrying" not in terminal.text and "disconnected" not in terminal.text
    session = only_session(tmp_path)
    assert session.messages[-1].text == "Still here."
