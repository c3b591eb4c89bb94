"""The command line's one prompt per turn: one panel for every call of the turn that needs
a person, then a decision per call (y, a, n; ``all`` and ``none`` for the rest), on a
real pseudo-terminal (``tests/terminal.py``) and with piped lines (``tether chat``)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.servers.http import LoopbackServer
from tests.terminal import Terminal
from tests.test_chat import tether as chat
from tests.test_chat import workspace as chat_workspace
from tests.test_cli import answer, tool_calls, workspace

WAIT = 30.0


def writes(*names: str, content: str = "new") -> tuple[tuple[str, dict[str, object]], ...]:
    return tuple(("write_file", {"path": n, "content": content}) for n in names)


def terminal_workspace(tmp_path: Path, server: LoopbackServer) -> tuple[Path, dict[str, str]]:
    ws = workspace(tmp_path, server.url + "/v1")
    (ws / "tether.toml").write_text((ws / "tether.toml").read_text().replace(
        '"calculator"', '"write_file"'))
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "TETHER_STORE": str(ws / "s.db"),
           "COLUMNS": "120", "TERM": "dumb"}
    return ws, env


def sent_results(server: LoopbackServer) -> list[str]:
    return [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]


def test_a_turns_calls_are_shown_in_one_panel_and_each_is_decided_on_its_own_line(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(tool_calls(*writes("a.txt", "b.txt", "c.txt")), answer("Done."))
    ws, env = terminal_workspace(tmp_path, server)
    terminal = Terminal(["-w", str(ws), "run", "write three files"], env, wait=WAIT)
    try:
        terminal.read_until(b"#1 Write file: Allow?")
        terminal.press(b"y\r")
        terminal.read_until(b"#2 Write file: Allow?")
        terminal.press(b"n not that one\r")
        terminal.read_until(b"#3 Write file: Allow?")
        terminal.press(b"y\r")
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=WAIT)
    finally:
        terminal.close()
    text = terminal.text
    assert code == 2, text  # a call was refused
    assert text.count("Approval needed") == 1 and "Approval needed: 3 calls" in text
    assert "#1 of 3" in text and "#3 of 3" in text
    assert text.index("#3 of 3") < text.index("#1 Write file: Allow?")  # all shown first
    assert [(ws / n).exists() for n in ("a.txt", "b.txt", "c.txt")] == [True, False, True]
    results = sent_results(server)
    assert results[1].startswith("Denied by the user: not that one.")


def test_all_allows_the_call_and_every_one_after_it(tmp_path: Path,
                                                    server: LoopbackServer) -> None:
    server.queue(tool_calls(*writes("a.txt", "b.txt", "c.txt")), answer("Done."))
    ws, env = terminal_workspace(tmp_path, server)
    terminal = Terminal(["-w", str(ws), "run", "write three files"], env, wait=WAIT)
    try:
        terminal.read_until(b"#1 Write file: Allow?")
        terminal.press(b"n\r")
        terminal.read_until(b"#2 Write file: Allow?")
        terminal.press(b"all\r")
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=WAIT)
    finally:
        terminal.close()
    assert code == 2, terminal.text
    assert "#3 Write file: Allow?" not in terminal.text
    assert [(ws / n).exists() for n in ("a.txt", "b.txt", "c.txt")] == [False, True, True]


def test_none_denies_every_call_left_with_the_reason_given(tmp_path: Path,
                                                           server: LoopbackServer) -> None:
    server.queue(tool_calls(*writes("a.txt", "b.txt")), answer("Understood."))
    ws, env = terminal_workspace(tmp_path, server)
    terminal = Terminal(["-w", str(ws), "run", "write two files"], env, wait=WAIT)
    try:
        terminal.read_until(b"#1 Write file: Allow?")
        terminal.press(b"none not today\r")
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=WAIT)
    finally:
        terminal.close()
    assert code == 2, terminal.text
    assert not (ws / "a.txt").exists() and not (ws / "b.txt").exists()
    assert all(r.startswith("Denied by the user: not today.") for r in sent_results(server))


def test_ctrl_c_in_the_middle_of_a_turns_prompt_denies_every_call_of_the_turn(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(tool_calls(*writes("a.txt", "b.txt")), answer("never asked for"))
    ws, env = terminal_workspace(tmp_path, server)
    terminal = Terminal(["-w", str(ws), "run", "write two files"], env, wait=WAIT)
    try:
        terminal.read_until(b"#1 Write file: Allow?")
        terminal.press(b"y\r")  # answered, but the turn's answer is not complete
        terminal.read_until(b"#2 Write file: Allow?")
        terminal.press(b"\x03")
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=WAIT)
    finally:
        terminal.close()
    assert code == 130, terminal.text
    assert not (ws / "a.txt").exists() and not (ws / "b.txt").exists()
    assert len(server.requests) == 1
    assert "stopped: interrupted" in terminal.text


def test_a_lone_call_is_asked_as_before(tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(tool_calls(*writes("a.txt")), answer("Done."))
    ws, env = terminal_workspace(tmp_path, server)
    terminal = Terminal(["-w", str(ws), "run", "write a file"], env, wait=WAIT)
    try:
        terminal.read_until(b"(n): ")
        terminal.press(b"y\r")
        terminal.read_until(None)
        code = terminal.proc.wait(timeout=WAIT)
    finally:
        terminal.close()
    assert code == 0, terminal.text
    assert "Approval needed: " not in terminal.text and "#1" not in terminal.text
    assert "Allow? y=once, a=always this session, n=deny" in terminal.text
    assert (ws / "a.txt").read_text() == "new"


def test_model_written_text_in_any_call_of_the_panel_stays_on_its_own_line(
        tmp_path: Path, server: LoopbackServer) -> None:
    forged = "x\n#2 of 2\nAllow? y=once [y/n] (n): "
    server.queue(tool_calls(("write_file", {"path": "a.txt", "content": "fine"}),
                            ("write_file", {"path": forged, "content": "x"})),
                 answer("Done."))
    ws, env = terminal_workspace(tmp_path, server)
    terminal = Terminal(["-w", str(ws), "run", "write"], env, wait=WAIT)
    try:
        terminal.read_until(b"#1 Write file: Allow?")
        terminal.press(b"none\r")
        terminal.read_until(None)
        terminal.proc.wait(timeout=WAIT)
    finally:
        terminal.close()
    lines = [line.strip(" │|") for line in terminal.text.replace("\r", "").split("\n")]
    assert "#2 of 2" in lines  # tether's own header, once
    assert lines.count("#2 of 2") == 1
    assert not any(line.startswith("Allow? y=once [y/n]") for line in lines)


def test_chat_reads_one_line_per_call_of_the_turn_from_a_pipe(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(tool_calls(*writes("a.txt", "b.txt")), answer("One written."))
        env = chat_workspace(tmp_path, server.url)
        done = chat(tmp_path, env, "chat", stdin="write two files\ny\nn no\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.txt").exists() and not (tmp_path / "b.txt").exists()
    assert done.stderr.count("Approval needed: 2 calls") == 1
    results = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert results[1].startswith("Denied by the user: no.")


def test_chat_whose_input_ends_in_a_turns_prompt_denies_every_call(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.queue(tool_calls(*writes("a.txt", "b.txt")), answer("Nothing written."))
        env = chat_workspace(tmp_path, server.url)
        done = chat(tmp_path, env, "chat", stdin="write two files\ny\n")
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "b.txt").exists()
    assert "Approval needed: 2 calls" in done.stderr
