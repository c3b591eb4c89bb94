"""`tether run --local` and `tether chat --local` check what the command line says before
they build or start a server (the README: "checked first"): a bad --output-schema, -T,
--tools, attachment or configuration is an error while the local port is never asked
anything. A loopback server on the local port records whether it was."""

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
