"""How much CPU does tether spend per agent run, next to a plain httpx loop doing the same?

Starts a loopback Chat Completions server (stdlib, in a child process so its CPU is not
counted), then, in this one process, times N runs of: prompt -> the model calls
add(2, 3) -> the tool runs -> the model answers, four ways:

- tether, not streamed (``Agent.run``)    vs a plain httpx loop posting JSON
- tether, streamed (``Agent.stream``)     vs a plain httpx loop reading SSE

and tether not streamed with one hook attached (``hook json``: a hook with all five methods,
each answering "no change"; printed against tether without it: what one hook costs per
run), and both again with telemetry on, when opentelemetry-sdk is installed: tether with
``instrument=`` against the plain loop recording the same telemetry by hand (the same four
spans with the same attributes, the same six histogram points), both to the SDK's in-memory
exporter and reader. The SDK's own bookkeeping is then on both sides, as the requests are:
what is left is the runtime's cost. The ratio to the bare plain loop is printed too.

The kinds take turns run by run: each of the N cycles runs every kind once, in an order
shuffled anew each cycle (seeded, so reproducible), so no kind always follows the same one,
and none ever follows itself (a kind run twice in a row finds its caches warm: alternating
the order forwards and backwards, which does that at each turn, made the plain loop 0.1x
cheaper than it is). Each run's
CPU time (``time.process_time``: every thread of this process, user and system) is added to
its kind's total. A kind's figure is its mean, total / N, and a ratio is of two totals.
Interleaving single runs is what keeps the ratio steady on a shared machine: a slow spell
(another virtual machine on the host, the CPU's clock) lasts longer than the few
milliseconds a cycle takes, so it slows tether and the plain loop alike and the ratio
holds. The cheapest of N/20 rounds of 20 runs, the figure this benchmark used before, moved
by 0.2x to 0.5x from one invocation to the next on the 2-core virtual development machine;
the ratio of interleaved totals moved by under 0.1x. The median run is printed beside each
mean. Also prints ``import tether`` time, measured in fresh interpreters.
Targets: tether <= 1.5x the plain loop, with telemetry on or off (the ratios of the means);
import <= 200 ms.

Then the per-run cost of a stored session: the same run (not streamed), each on a new
session, unstored / in a SQLite file / in PostgreSQL on loopback (a throwaway cluster made
with the system's initdb, as the tests make one, but with the server's durable defaults:
fsync and synchronous_commit on). CPU time of this process and wall time per run; the
database server's own CPU is not counted, its commits' waits are (in the wall time).
``--no-stores`` leaves this part out; Postgres is skipped, saying why, without psycopg or
the server binaries.

usage: .venv/bin/python benchmarks/overhead.py [N] [--no-stores]
       (N runs per kind; default 200)
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROUNDS = 3  # of the stored-session figures
WARM_RUNS = 20  # runs of each kind before any is measured
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


class HandTelemetry:
    """What tether records for one run, recorded by hand: the plain loop's telemetry. The
    spans, attributes and histogram points are those ``tether.telemetry`` makes for this
    run (``tests/bench`` checks they stay alike), so the SDK does the same work on both
    sides."""

    def __init__(self, settings: Any, port: int) -> None:
        from opentelemetry import trace

        self.trace = trace
        self.tracer = settings.tracer_provider.get_tracer("plain")
        meter = settings.meter_provider.get_meter("plain")
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}")
        self.duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s")
        self.common = {"gen_ai.provider.name": "llama.cpp", "gen_ai.request.model": "m",
                       "server.address": "127.0.0.1", "server.port": port}
        self.untainted = {f"tether.taint.{when}.{kind}": False
                          for when in ("before", "after") for kind in ("private", "untrusted")}

    def run(self) -> Any:
        return self.tracer.start_span("invoke_agent tether", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "tether",
            **self.common, "tether.tools": ["add"], "tether.security.trifecta": "block",
            "tether.permission_mode": "ask", "tether.taint.before.private": False,
            "tether.taint.before.untrusted": False})

    def chat(self, run: Any, turn: int, stream: bool) -> tuple[Any, float]:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", **self.common,
                                      "tether.turn": turn}
        if stream:
            attributes["gen_ai.request.stream"] = True
        return (self.tracer.start_span("chat m", context=self.trace.set_span_in_context(run),
                                       attributes=attributes), time.perf_counter())

    def answered(self, chat: tuple[Any, float], usage: dict[str, int], finish: str) -> None:
        span, started = chat
        span.set_attributes({
            "gen_ai.usage.input_tokens": usage["prompt_tokens"],
            "gen_ai.usage.output_tokens": usage["completion_tokens"],
            "gen_ai.response.finish_reasons": [finish], "tether.stop_reason": finish,
            "gen_ai.response.model": "m", "gen_ai.response.id": "c"})
        measured = {"gen_ai.operation.name": "chat", **self.common,
                    "gen_ai.response.model": "m"}
        self.tokens.record(usage["prompt_tokens"], {**measured, "gen_ai.token.type": "input"})
        self.tokens.record(usage["completion_tokens"],
                           {**measured, "gen_ai.token.type": "output"})
        self.duration.record(time.perf_counter() - started, measured)
        span.end()

    def tool(self, run: Any, call_id: str, result: Callable[[], str]) -> str:
        span = self.tracer.start_span(
            "execute_tool add", context=self.trace.set_span_in_context(run), attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add",
                "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function",
                "tether.taint.before.private": False, "tether.taint.before.untrusted": False,
                "tether.tool.capabilities": [], "tether.tool.needs_approval": False,
                "gen_ai.tool.description": "Add two integers."})
        span.add_event("tether.tool.started")
        started = time.perf_counter()
        text = result()
        span.set_attributes({
            "tether.tool.status": "ok", "tether.gate.verdict": "allowed",
            "tether.tool.result_trust": "trusted", "tether.taint.after.private": False,
            "tether.taint.after.untrusted": False,
            "tether.tool.duration_secs": time.perf_counter() - started})
        span.end()
        return text

    def finished(self, run: Any, turns: int) -> None:
        run.set_attributes({
            "tether.stop_cause": "completed", "tether.turns": turns, "tether.tool_calls": 1,
            "tether.blocked_sends": 0, "gen_ai.usage.input_tokens": 20 * turns,
            "gen_ai.usage.output_tokens": 5 * turns, **self.untainted})
        run.end()


def plain_runs(base_url: str, telemetry: HandTelemetry | None = None
               ) -> tuple[Run, Run, Callable[[], Awaitable[None]]]:
    """The same agent as a hand-written httpx loop: the floor tether is measured against
    (recording ``telemetry`` as tether does, when given)."""
    import httpx

    http = httpx.AsyncClient(base_url=base_url, timeout=30)
    hand = telemetry

    def tool_result(call_id: str, arguments: str, run: Any) -> str:
        if hand is None:
            return str(add(**json.loads(arguments)))
        return hand.tool(run, call_id, lambda: str(add(**json.loads(arguments))))

    async def run_json() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2+3?"}]
        run = hand.run() if hand is not None else None
        turn = 0
        while True:
            turn += 1
            chat = hand.chat(run, turn, False) if hand is not None else None
            response = await http.post("/chat/completions", json={
                "model": "m", "messages": messages, "tools": TOOLS, "tool_choice": "auto"})
            body = response.json()
            choice = body["choices"][0]
            message = choice["message"]
            if hand is not None:
                hand.answered(chat, body["usage"], choice["finish_reason"])
            messages.append(message)
            if not message.get("tool_calls"):
                if hand is not None:
                    hand.finished(run, turn)
                return str(message["content"])
            for call in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content":
                                 tool_result(call["id"], call["function"]["arguments"], run)})

    async def run_sse() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2+3?"}]
        run = hand.run() if hand is not None else None
        turn = 0
        while True:
            turn += 1
            chat = hand.chat(run, turn, True) if hand is not None else None
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            usage: dict[str, int] = {}
            finish = ""
            async with http.stream("POST", "/chat/completions", json={
                    "model": "m", "messages": messages, "tools": TOOLS, "tool_choice": "auto",
                    "stream": True, "stream_options": {"include_usage": True}}) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        continue  # read on to the end of the body: the connection is reused
                    event = json.loads(data)
                    usage = event.get("usage") or usage
                    for choice in event["choices"]:
                        finish = choice.get("finish_reason") or finish
                        delta = choice["delta"]
                        if delta.get("content"):
                            text.append(delta["content"])
                        for tc in delta.get("tool_calls") or ():
                            slot = calls.setdefault(tc["index"], {"id": tc.get("id"),
                                                                  "name": "", "args": ""})
                            fn = tc.get("function") or {}
                            slot["name"] += fn.get("name") or ""
                            slot["args"] += fn.get("arguments") or ""
            if hand is not None:
                hand.answered(chat, usage, finish)
            if not calls:
                messages.append({"role": "assistant", "content": "".join(text)})
                if hand is not None:
                    hand.finished(run, turn)
                return "".join(text)
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["args"]}}
                for c in calls.values()]})
            for c in calls.values():
                messages.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": tool_result(c["id"], c["args"], run)})

    return run_json, run_sse, http.aclose


class EveryPoint:
    """One hook at each of the five points, answering "no change" (None) at every one."""

    async def before_model_request(self, request: Any) -> None:
        return None

    async def after_model_response(self, response: Any) -> None:
        return None

    async def before_tool_call(self, call: Any) -> None:
        return None

    async def after_tool_result(self, result: Any) -> None:
        return None

    async def on_run_end(self, result: Any) -> None:
        return None


def tether_runs(base_url: str, instrument: Any = False, hooks: tuple[Any, ...] = ()
                ) -> tuple[Run, Run, Callable[[], Awaitable[None]]]:
    from tether import Agent, tool
    from tether.events import RunFinished
    from tether.providers import OpenAIChat

    # The llama-server profile asks for streamed usage, as the plain loop does.
    agent = Agent(model=OpenAIChat(base_url=base_url, model="m", api_key="x",
                                   profile="llama-server"), tools=[tool(add)],
                  instrument=instrument, hooks=hooks)

    async def run_json() -> str:
        return (await agent.run("What is 2+3?")).text

    async def run_sse() -> str:
        text = ""
        async for event in agent.stream("What is 2+3?"):
            if isinstance(event, RunFinished):
                text = event.result.text
        return text

    return run_json, run_sse, agent.aclose


def in_memory_telemetry() -> Any:
    """An ``Instrumentation`` recording every span and metric in memory, its span exporter
    (each run's spans are checked and cleared, so memory stays flat) and its metric reader;
    None without the SDK."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError:
        return None
    from tether.telemetry import Instrumentation

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[metrics])
    settings = Instrumentation(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return settings, spans, metrics


def recorded(run: Run, spans: Any) -> Run:
    """``run``, checked to have recorded its four spans (invoke_agent, two chats, a tool),
    which are then cleared, so memory stays flat."""
    async def once() -> str:
        text = await run()
        assert len(spans.get_finished_spans()) == 4
        spans.clear()
        return text
    return once


def all_kinds(base_url: str) -> tuple[dict[str, Run], list[Callable[[], Awaitable[None]]]]:
    """Every kind of run measured, by name, and what closes their clients. The telemetry
    kinds are there only with opentelemetry-sdk installed."""
    plain_json, plain_sse, close_plain = plain_runs(base_url)
    tether_json, tether_sse, close_tether = tether_runs(base_url)
    hook_json, _, close_hook = tether_runs(base_url, hooks=(EveryPoint(),))
    kinds = {"plain json": plain_json, "tether json": tether_json,
             "plain sse": plain_sse, "tether sse": tether_sse, "hook json": hook_json}
    closers = [close_plain, close_tether, close_hook]
    ours, theirs = in_memory_telemetry(), in_memory_telemetry()
    if ours is not None and theirs is not None:
        port = int(base_url.rsplit(":", 1)[1].split("/")[0])
        hand_json, hand_sse, close_hand = plain_runs(base_url, HandTelemetry(theirs[0], port))
        otel_json, otel_sse, close_otel = tether_runs(base_url, ours[0])
        closers += [close_hand, close_otel]
        kinds |= {"plain+otel json": recorded(hand_json, theirs[1]),
                  "otel json": recorded(otel_json, ours[1]),
                  "plain+otel sse": recorded(hand_sse, theirs[1]),
                  "otel sse": recorded(otel_sse, ours[1])}
    return kinds, closers


async def measure(base_url: str, n: int) -> dict[str, tuple[float, float]]:
    """Per kind: CPU ms per run, (the mean, the median run), the kinds taking turns."""
    kinds, closers = all_kinds(base_url)
    order = list(kinds.items())
    shuffle = random.Random(0).shuffle
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    clock = time.process_time
    try:
        for _ in range(WARM_RUNS):  # connections open, code paths loaded, caches filled
            for _, run in order:
                assert "5" in await run()
        for _ in range(n):
            last = order[-1]
            shuffle(order)
            if order[0] == last:  # a kind run twice in a row finds its caches warm
                order[0], order[-1] = order[-1], order[0]
            for kind, run in order:
                started = clock()
                text = await run()
                samples[kind].append(clock() - started)
                assert "5" in text
    finally:
        for close in closers:
            await close()
    return {k: (1000 * statistics.fmean(v), 1000 * statistics.median(v))
            for k, v in samples.items()}


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
    print(f"CPU ms per agent run (prompt -> add(2, 3) -> answer), N={n} runs of each kind, "
          f"the kinds taking turns: the mean (the median run)")
    ok = True
    rows = [("tether", "plain", "json", "not streamed (Agent.run)"),
            ("tether", "plain", "sse", "streamed (Agent.stream)")]
    if "otel json" in cpu:
        rows += [("otel", "plain+otel", "json", "not streamed, telemetry on"),
                 ("otel", "plain+otel", "sse", "streamed, telemetry on")]
    for kind, floor, mode, label in rows:
        (plain, plain_median), (ours, ours_median) = cpu[f"{floor} {mode}"], cpu[f"{kind} {mode}"]
        ratio = ours / plain
        ok &= ratio <= TARGET_RATIO
        loop = "plain httpx loop" if floor == "plain" else "plain loop + same telemetry"
        print(f"  {label:<28} tether {ours:5.2f} ({ours_median:5.2f}) ms   {loop:<27} "
              f"{plain:5.2f} ({plain_median:5.2f}) ms   ratio {ratio:.2f}x "
              f"({ours_median / plain_median:.2f}x; target <= {TARGET_RATIO}x)")
        if floor != "plain":
            bare = cpu[f"plain {mode}"][0]
            print(f"  {'':<28} (against the bare plain loop, {bare:5.2f} ms: "
                  f"{ours / bare:.2f}x; the SDK's share is on both sides above)")
    if "otel json" not in cpu:
        print("  (telemetry on: not measured, opentelemetry-sdk is not installed)")
    (hooked, hooked_median), (bare, bare_median) = cpu["hook json"], cpu["tether json"]
    print(f"  {'one hook (5 points, no change)':<28} tether {hooked:5.2f} ({hooked_median:5.2f}) "
          f"ms   tether without hooks        {bare:5.2f} ({bare_median:5.2f}) ms   "
          f"one hook +{hooked - bare:.2f} ms per run (not streamed)")
    ok &= imported <= TARGET_IMPORT_MS
    print(f"import tether: {imported:.0f} ms (target <= {TARGET_IMPORT_MS} ms)")
    print("all targets met" if ok else "a target was missed")
    for line in stored:
        print(line)


async def _only(base_url: str, kind: str, n: int) -> None:
    kinds, closers = all_kinds(base_url)
    run = kinds[kind]
    try:
        for _ in range(WARM_RUNS):
            assert "5" in await run()  # warm
        for _ in range(n):
            assert "5" in await run()
    finally:
        for close in closers:
            await close()


def only(kind: str, n: int) -> None:
    """``--only KIND N``: N runs of one kind (after a warm-up), nothing printed: what
    ``benchmarks/instructions.py`` counts under valgrind."""
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        asyncio.run(_only(base_url, kind, n))
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    elif sys.argv[1:2] == ["--only"]:
        only(sys.argv[2], int(sys.argv[3]))
    else:
        main()
