"""Pipes: a reader that closes early (``tether tools --json | head -1``) ends any command
quietly, with exit code 141 (as a shell reports SIGPIPE) and no traceback.

The reader is a real pipe. "Closed before tether writes" closes the read end before the
command starts, so every write fails: deterministic, no timing. "Reads one line and
leaves" reads the first line of an output far larger than a pipe holds, then closes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.http import LoopbackServer
from tests.test_cli import answer, workspace
from tether.cli.common import EXIT_PIPE
from tether.store import Session, SQLiteStore

WAIT = 60.0
BIG = "All work and no play makes a long answer. " * 8_000  # ~350 kB, far past a pipe


def environment(ws: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(TETHER_CONFIG=os.devnull,
               TETHER_STORE=str(ws / "sessions.db"), COLUMNS="120")
    return env


def command(ws: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tether.cli", "-w", str(ws), *args]


def into_a_closed_pipe(ws: Path, *args: str, typed: str | None = None
                       ) -> subprocess.CompletedProcess[str]:
    """The command with its stdout a pipe nobody reads (and ``typed`` on its stdin)."""
    read, write = os.pipe()
    os.close(read)  # nobody will ever read: the first write that reaches the pipe fails
    try:
        proc = subprocess.run(command(ws, *args), stdout=write, stderr=subprocess.PIPE,
                              input=typed, stdin=None if typed is not None else
                              subprocess.DEVNULL, text=True, env=environment(ws),
                              cwd=ws, timeout=WAIT)
    finally:
        os.close(write)
    return proc


def quiet(stderr: str) -> bool:
    return not any(word in stderr for word in ("Traceback", "BrokenPipeError",
                                               "Exception ignored", "Errno 32"))


@pytest.fixture
def ws(tmp_path: Path, server: LoopbackServer) -> Path:
    ws = workspace(tmp_path, server.url + "/v1")
    store = SQLiteStore(ws / "sessions.db")
    for n in range(3):
        Session.create(store, title=f"session {n}")
    store.close()
    return ws


COMMANDS = {
    "tools --json": ["tools", "--json"],
    "tools": ["tools"],
    "config show": ["config", "show"],
    "sessions list": ["sessions", "list"],
    "sessions list --json": ["sessions", "list", "--json"],
    "doctor": ["doctor"],
}


@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_command_whose_reader_is_gone_exits_quietly(ws: Path, args: list[str]) -> None:
    out = into_a_closed_pipe(ws, *args)
    assert out.returncode == EXIT_PIPE, out.stderr
    assert quiet(out.stderr), out.stderr


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["sessions", "--help"]])
def test_help_into_a_closed_pipe_is_quiet(ws: Path, args: list[str]) -> None:
    out = into_a_closed_pipe(ws, *args)
    assert out.returncode in (0, EXIT_PIPE)  # argparse drops help it cannot write
    assert quiet(out.stderr), out.stderr


@pytest.mark.parametrize("json_flag", [True, False], ids=["run --json", "run"])
def test_a_run_whose_reader_is_gone_exits_quietly(ws: Path, server: LoopbackServer,
                                                 json_flag: bool) -> None:
    server.queue(answer("The answer."))
    out = into_a_closed_pipe(ws, "run", "go", *(["--json"] if json_flag else []))
    assert out.returncode == EXIT_PIPE, out.stderr
    assert quiet(out.stderr), out.stderr


def test_a_chat_whose_reader_is_gone_exits_quietly(ws: Path, server: LoopbackServer) -> None:
    server.queue(answer("Hello to you."))
    out = into_a_closed_pipe(ws, "chat", typed="hello\n")
    assert out.returncode == EXIT_PIPE, out.stderr
    assert quiet(out.stderr), out.stderr


def test_sessions_show_whose_reader_is_gone_exits_quietly(ws: Path) -> None:
    store = SQLiteStore(ws / "sessions.db")
    [info] = store.list(limit=1)
    store.close()
    out = into_a_closed_pipe(ws, "sessions", "show", info.id)
    assert out.returncode == EXIT_PIPE, out.stderr
    assert quiet(out.stderr), out.stderr


def test_a_batch_whose_reader_is_gone_exits_quietly_with_its_results_written(
        ws: Path, server: LoopbackServer) -> None:
    (ws / "in.jsonl").write_text('"one"\n')
    server.queue(answer("first"))
    out = into_a_closed_pipe(ws, "batch", "in.jsonl", "-o", "out.jsonl")
    assert out.returncode == EXIT_PIPE, out.stderr
    assert quiet(out.stderr), out.stderr
    assert json.loads((ws / "out.jsonl").read_text())["text"] == "first"


@pytest.mark.parametrize("json_flag", [True, False], ids=["run --json", "run"])
def test_a_reader_that_reads_one_line_and_leaves_mid_answer_ends_the_run_quietly(
        ws: Path, server: LoopbackServer, json_flag: bool) -> None:
    server.queue(answer(BIG.replace(". ", ".\n")))
    proc = subprocess.Popen(command(ws, "run", "go", *(["--json"] if json_flag else [])),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=environment(ws), cwd=ws)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()  # like `head -1`
    stderr = proc.stderr.read().decode()
    assert proc.wait(WAIT) == EXIT_PIPE, stderr
    assert quiet(stderr), stderr


def test_tools_json_into_head_prints_one_line_and_no_traceback(ws: Path) -> None:
    shell = f"{' '.join(command(ws, 'tools', '--json'))} | head -1"
    out = subprocess.run(["sh", "-c", shell], capture_output=True, text=True,
                         env=environment(ws), cwd=ws, timeout=WAIT)
    assert out.stdout == "[\n"
    assert quiet(out.stderr), out.stderr


def test_stderr_into_a_closed_pipe_is_quiet_too(ws: Path) -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        out = subprocess.run(command(ws, "run", "go"), stdout=subprocess.PIPE, stderr=write,
                             stdin=subprocess.DEVNULL, env=environment(ws), cwd=ws,
                             timeout=WAIT)
    finally:
        os.close(write)
    assert out.returncode in (EXIT_PIPE, 1)  # 1: nothing answers "go"; either is quiet
