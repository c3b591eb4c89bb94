"""How much CPU does tether spend per agent run, next to a plain httpx loop doing the same?

Starts a loopback Chat Completions server (stdlib, in a child process so its CPU is not
counted), then, in this one process, times N runs of: prompt -> the model calls
add(2, 3) -> the tool runs -> the model answers, four ways:

- tether, not streamed (``Agent.run``)    vs a plain httpx loop posting JSON
- tether, streamed (``Agent.stream``)     vs a plain httpx loop reading SSE

The kinds alternate over a few rounds and the median round counts, so drift (other
processes, CPU frequency) hits both sides alike. Also prints ``import tether`` time,
measured in fresh interpreters. Targets: tether <= 1.5x the plain loop; import <= 200 ms.

Then the per-run cost of a stored session: the same run (not streamed), each on a new
session, unstored / in a SQLite file / in PostgreSQL on loopback (a throwaway cluster made
with the system's initdb, as the tests make one, but with the server's durable defaults:
fsync and synchronous_commit on). CPU time of this process and wall time per run; the
database server's own CPU is not counted, its commits' waits are (in the wall time).
``--no-stores`` leaves this part out; Postgres is skipped, saying why, without psycopg or
the server binaries.

usage: .venv/bin/python benchmarks/overhead.py [N] [--no-stores]
       (N runs per kind and round; default 200)
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROUNDS = 3
TARGET_RATIO = 1.5
TARGET_IMPORT_MS = 200

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                    "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]
USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}


# --- the server (a child process) ----------------------------------------------------------


def _stream_events(done: bool) -> list[dict[str, Any]]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def ev(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if done:
        body = [ev({"role": "assistant", "content": ""}), ev({"content": "The sum"}),
                ev({"content": " is 5."}), ev({}, "stop")]
    else:
        body = [ev({"role": "assistant", "content": None, "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function",
                     "function": {"name": "add", "arguments": ""}}]}),
                ev({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 2, '}}]}),
                ev({"tool_calls": [{"index": 0, "function": {"arguments": '"b": 3}'}}]}),
                ev({}, "tool_calls")]
    return [*body, {**base, "choices": [], "usage": USAGE}]


def serve() -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            # Small writes without Nagle's delay, as real model servers do.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            done = any(m.get("role") == "tool" for m in body["messages"])
            if body.get("stream"):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                events = [f"data: {json.dumps(e)}\n\n" for e in _stream_events(done)]
                for text in [*events, "data: [DONE]\n\n"]:
                    data = text.encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            message: dict[str, Any] = (
                {"role": "assistant", "content": "The sum is 5."} if done else
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]})
            out = json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                              "choices": [{"index": 0, "message": message,
                                           "finish_reason": "stop" if done else "tool_calls"}],
                              "usage": USAGE}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


# --- the clients ------------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


Run = Callable[[], Awaitable[str]]


def plain_runs(base_url: str) -> tuple[Run, Run, Callable[[], Awaitable[None]]]:
    """The same agent as a hand-written httpx loop: the floor tether is measured against."""
    import httpx

    http = httpx.AsyncClient(base_url=base_url, timeout=30)

    async def run_json() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2+3?"}]
        while True:
            response = await http.post("/chat/completions", json={
                "model": "m", "messages": messages, "tools": TOOLS, "tool_choice": "auto"})
            message = response.json()["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                return str(message["content"])
            for call in message["tool_calls"]:
                result = add(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": str(result)})

    async def run_sse() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2+3?"}]
        while True:
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            async with http.stream("POST", "/chat/completions", json={
                    "model": "m", "messages": messages, "tools": TOOLS, "tool_choice": "auto",
                    "stream": True, "stream_options": {"include_usage": True}}) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        continue  # read on to the end of the body: the connection is reused
                    for choice in json.loads(data)["choices"]:
                        delta = choice["delta"]
                        if delta.get("content"):
                            text.append(delta["content"])
                        for tc in delta.get("tool_calls") or ():
                            slot = calls.setdefault(tc["index"], {"id": tc.get("id"),
                                                                  "name": "", "args": ""})
                            fn = tc.get("function") or {}
                            slot["name"] += fn.get("name") or ""
                            slot["args"] += fn.get("arguments") or ""
            if not calls:
                messages.append({"role": "assistant", "content": "".join(text)})
                return "".join(text)
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["args"]}}
                for c in calls.values()]})
            for c in calls.values():
                messages.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": str(add(**json.loads(c["args"])))})

    return run_json, run_sse, http.aclose


def tether_runs(base_url: str) -> tuple[Run, Run, Callable[[], Awaitable[None]]]:
    from tether import Agent, tool
    from tether.events import RunFinished
    from tether.providers import OpenAIChat

    # The llama-server profile asks for streamed usage, as the plain loop does.
    agent = Agent(model=OpenAIChat(base_url=base_url, model="m", api_key="x",
                                   profile="llama-server"), tools=[tool(add)])

    async def run_json() -> str:
        return (await agent.run("What is 2+3?")).text

    async def run_sse() -> str:
        text = ""
        async for event in agent.stream("What is 2+3?"):
            if isinstance(event, RunFinished):
                text = event.result.text
        return text

    return run_json, run_sse, agent.aclose


async def cpu_ms_per_run(run: Run, n: int) -> float:
    assert "5" in await run()  # warm: connection open, code paths loaded
    start = time.process_time()
    for _ in range(n):
        assert "5" in await run()
    return 1000 * (time.process_time() - start) / n


async def measure(base_url: str, n: int) -> dict[str, float]:
    plain_json, plain_sse, close_plain = plain_runs(base_url)
    tether_json, tether_sse, close_tether = tether_runs(base_url)
    kinds = {"plain json": plain_json, "tether json": tether_json,
             "plain sse": plain_sse, "tether sse": tether_sse}
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        for _ in range(ROUNDS):
            for kind, run in kinds.items():
                samples[kind].append(await cpu_ms_per_run(run, n))
    finally:
        await close_plain()
        await close_tether()
    return {k: statistics.median(v) for k, v in samples.items()}


# --- stored sessions --------------------------------------------------------------------------


async def wall_and_cpu_ms_per_run(run: Run, n: int) -> tuple[float, float]:
    assert "5" in await run()  # warm
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        assert "5" in await run()
    return (1000 * (time.perf_counter() - wall) / n, 1000 * (time.process_time() - cpu) / n)


def _postgres_helper() -> Any:
    """tests/servers/postgres.py: the throwaway cluster the store tests use."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tests" / "servers" / "postgres.py"
    spec = importlib.util.spec_from_file_location("tether_bench_postgres", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def measure_stores(base_url: str, n: int, stores: dict[str, Any]
                         ) -> dict[str, tuple[float, float, int]]:
    """Per kind: (wall ms, CPU ms) per run, median of the rounds, and rows one run wrote."""
    from tether import Agent, Session, tool
    from tether.providers import OpenAIChat

    agent = Agent(model=OpenAIChat(base_url=base_url, model="m", api_key="x",
                                   profile="llama-server"), tools=[tool(add)])

    def stored(store: Any) -> Run:
        async def run() -> str:
            session = Session.create(store, provider="bench", model="m", title="2+3")
            return (await agent.run("What is 2+3?", session=session)).text
        return run

    async def unstored() -> str:
        return (await agent.run("What is 2+3?")).text

    kinds: dict[str, Run] = {"unstored": unstored,
                             **{name: stored(store) for name, store in stores.items()}}
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    try:
        for _ in range(ROUNDS):
            for kind, run in kinds.items():
                samples[kind].append(await wall_and_cpu_ms_per_run(run, n))
    finally:
        await agent.aclose()
    rows = {}
    for name, store in stores.items():
        [info] = store.list(limit=1)
        rows[name] = info.message_count + len(store.events(info.id)) + 2  # + session, outcome
    rows["unstored"] = 0
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v),
                rows[k]) for k, v in samples.items()}


def run_store_benchmark(base_url: str, n: int) -> list[str]:
    """The stored-session figures, as lines to print."""
    import tempfile
    from contextlib import ExitStack
    from pathlib import Path

    from tether.store import SQLiteStore

    labels = {"unstored": "unstored", "sqlite": "SQLite file (WAL, synchronous=NORMAL)"}
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        stores: dict[str, Any] = {"sqlite": SQLiteStore(folder / "sessions.db")}
        stack.callback(stores["sqlite"].close)
        skipped = ""
        try:
            from tether.store.postgres import PostgresStore

            server = stack.enter_context(_postgres_helper().running(durable=True))
            stores["postgres"] = PostgresStore(server.database())
            stack.callback(stores["postgres"].close)
            labels["postgres"] = f"PostgreSQL {stores['postgres'].server_version} on loopback"
        except Exception as e:  # a benchmark reports what it could not measure, and goes on
            skipped = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        result = asyncio.run(measure_stores(base_url, n, stores))
    lines = [f"per run on a new stored session (prompt -> add(2, 3) -> answer, not streamed), "
             f"N={n}, median of {ROUNDS} rounds:"]
    base_wall, base_cpu, _ = result["unstored"]
    for kind, (wall, cpu, rows) in result.items():
        line = f"  {labels[kind]:<40} wall {wall:6.2f} ms   CPU {cpu:6.2f} ms"
        if kind != "unstored":
            line += (f"   stored: +{wall - base_wall:5.2f} ms wall, +{cpu - base_cpu:5.2f} ms "
                     f"CPU for {rows} rows ({1000 * (wall - base_wall) / rows:4.0f} us wall "
                     f"per row)")
        lines.append(line)
    if skipped:
        lines.append(f"  PostgreSQL: not measured ({skipped})")
    return lines


def import_ms(times: int = 5) -> float:
    """``import tether`` in fresh interpreters (after one run that warms the bytecode cache)."""
    code = ("import time; t = time.perf_counter(); import tether; "
            "print((time.perf_counter() - t) * 1000)")
    subprocess.run([sys.executable, "-c", "import tether"], check=True)
    runs = [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                 text=True).stdout) for _ in range(times)]
    return statistics.median(runs)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 200
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        cpu = asyncio.run(measure(base_url, n))
        stored = [] if "--no-stores" in sys.argv else run_store_benchmark(base_url,
                                                                         max(1, n // 4))
    finally:
        server.kill()
        server.wait()
    imported = import_ms()
    print(f"CPU ms per agent run (prompt -> add(2, 3) -> answer), N={n}, median of {ROUNDS} "
          f"rounds:")
    ok = True
    for mode, label in (("json", "not streamed (Agent.run)"), ("sse", "streamed (Agent.stream)")):
        plain, ours = cpu[f"plain {mode}"], cpu[f"tether {mode}"]
        ratio = ours / plain
        ok &= ratio <= TARGET_RATIO
        print(f"  {label:<26} tether {ours:6.2f} ms   plain httpx loop {plain:6.2f} ms   "
              f"ratio {ratio:.2f}x (target <= {TARGET_RATIO}x)")
    ok &= imported <= TARGET_IMPORT_MS
    print(f"import tether: {imported:.0f} ms (target <= {TARGET_IMPORT_MS} ms)")
    print("all targets met" if ok else "a target was missed")
    for line in stored:
        print(line)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    else:
        main()
