"""`tether run --local`, `chat --local`, `batch --local` and `eval --local` check what the
command line says before they build or start a server (the README: "checked first"): a bad
--output-schema, -T, --tools, attachment, configuration, batch item, case file (or a case's
tools file), --baseline or --judge is an error while the local port is never asked
anything. A loopback server on the local port records whether it was; an empty cache
directory, whether anything was set up."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.http import LoopbackServer

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEh"
                       "QGAhKmMIQAAAABJRU5ErkJggg==")


def tether(ws: Path, port: int, *args: str, toml: str = "",
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    (ws / "tether.toml").write_text(f"[local]\nport = {port}\n{toml}")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    # An empty cache: a tether that tried to start the server would try to build it.
    env.update(TETHER_CONFIG=os.devnull, TETHER_STORE=str(ws / "sessions.db"),
               TETHER_CACHE_DIR=str(ws / "empty-cache"))
    return subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(ws), *args],
                          capture_output=True, text=True, env=env, input=stdin, cwd=ws,
                          stdin=None if stdin is not None else subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize(("args", "toml", "said"), [
    (["--output-schema", "{bad"], "", "--output-schema"),
    (["--output-schema", "name frobnicated"], "", "--output-schema"),
    (["-T", "no_such_tool"], "", "-T no_such_tool"),
    (["--tools", "missing.py"], "", "--tools"),
    (["-a", "missing.png"], "", "missing.png"),
    ([], "[agent]\nmax_turns = -3\n", "max_turns"),
    ([], "[tools]\nenabled = [\"no_such_builtin\"]\n", "no_such_builtin"),
    (["-a", "cat.png"], "", "takes no images"),
])
def test_run_local_checks_the_command_line_before_asking_the_port_anything(
        tmp_path: Path, server: LoopbackServer, args: list[str], toml: str,
        said: str) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    port = int(server.url.rsplit(":", 1)[1])
    out = tether(tmp_path, port, "run", "--local", *args, "What is it?", toml=toml)
    assert out.returncode == 1
    assert said in out.stderr, out.stderr
    assert "usage:" not in out.stderr and "tokens" not in out.stderr
    assert "Traceback" not in out.stderr
    assert server.requests == []  # the port was never asked: nothing reused or started
    assert not (tmp_path / "empty-cache").exists()


def test_chat_local_checks_its_tools_before_asking_the_port_anything(
        tmp_path: Path, server: LoopbackServer) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    out = tether(tmp_path, port, "chat", "--local", "-T", "no_such_tool", stdin="hi\n")
    assert out.returncode == 1 and "-T no_such_tool" in out.stderr, out.stderr
    assert server.requests == []


@pytest.mark.parametrize(("args", "toml", "said"), [
    (["-T", "no_such_tool"], "", "-T no_such_tool"),
    (["--tools", "missing.py"], "", "--tools"),
    ([], "[agent]\nmax_turns = -3\n", "max_turns"),
    ([], "[tools]\nenabled = [\"no_such_builtin\"]\n", "no_such_builtin"),
    (["--provider", "elsewhere"], "", "--provider elsewhere"),
    (["--yes", "--read-only"], "", "--read-only"),
])
def test_batch_local_checks_the_command_line_before_asking_the_port_anything(
        tmp_path: Path, server: LoopbackServer, args: list[str], toml: str,
        said: str) -> None:
    (tmp_path / "in.jsonl").write_text('"What is it?"\n')
    port = int(server.url.rsplit(":", 1)[1])
    out = tether(tmp_path, port, "batch", "--local", *args, "in.jsonl", "-o", "out.jsonl",
                 toml=toml)
    assert out.returncode == 1
    assert said in out.stderr, out.stderr
    assert "usage:" not in out.stderr and "Traceback" not in out.stderr
    assert server.requests == []  # the port was never asked: nothing reused or started
    assert not (tmp_path / "empty-cache").exists()
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(("items", "said"), [
    (None, "cannot read"),
    ("{not json\n", "line 1: not JSON"),
    ('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "appears twice"),
])
def test_batch_local_checks_its_items_before_asking_the_port_anything(
        tmp_path: Path, server: LoopbackServer, items: str | None, said: str) -> None:
    if items is not None:
        (tmp_path / "in.jsonl").write_text(items)
    port = int(server.url.rsplit(":", 1)[1])
    out = tether(tmp_path, port, "batch", "--local", "in.jsonl", "-o", "out.jsonl")
    assert out.returncode == 1 and said in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert server.requests == [] and not (tmp_path / "empty-cache").exists()


CASE = '{"id": "hello", "prompt": "Say hello.", "expect": {"answer": {"contains": "hello"}}}\n'


@pytest.mark.parametrize(("cases", "args", "toml", "said"), [
    (None, [], "", "cannot read"),
    ("{not json\n", [], "", "line 1: not JSON"),
    ('{"id": "a"}\n', [], "", "prompt"),
    ('{"id": "a", "prompt": "hi", "tools_file": "missing.py"}\n', [], "",
     "tools_file"),
    (CASE, ["--baseline", "missing.json"], "", "cannot read the baseline"),
    (CASE, ["--baseline", "cases.jsonl"], "", "not a tether eval report"),
    ('{"id": "a", "prompt": "hi", "rubric": "kind"}\n', ["--judge", "nobody"], "",
     "nobody"),
    (CASE, ["--provider", "elsewhere"], "", "--provider elsewhere"),
    (CASE, [], "[agent]\nmax_turns = -3\n", "max_turns"),
    (CASE, ["--resume"], "", "--resume"),
])
def test_eval_local_checks_its_cases_and_flags_before_asking_the_port_anything(
        tmp_path: Path, server: LoopbackServer, cases: str | None, args: list[str],
        toml: str, said: str) -> None:
    if cases is not None:
        (tmp_path / "cases.jsonl").write_text(cases)
    port = int(server.url.rsplit(":", 1)[1])
    out = tether(tmp_path, port, "eval", "--local", *args, "cases.jsonl", toml=toml)
    assert out.returncode == 1
    assert said in out.stderr, out.stderr
    assert "usage:" not in out.stderr and "Traceback" not in out.stderr
    assert server.requests == []  # the port was never asked: nothing reused or started
    assert not (tmp_path / "empty-cache").exists()
