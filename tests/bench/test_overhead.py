"""benchmarks/overhead.py measures what it says: with telemetry on, the plain loop records
what tether records (the same spans, attributes and histogram points), so the ratio between
them is the runtime's cost and not the SDK's."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "overhead.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tether_bench_overhead", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def overhead() -> ModuleType:
    return _load()


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = subprocess.Popen([sys.executable, str(BENCH), "--serve"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        yield f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
    finally:
        server.kill()
        server.wait()


def _recorded(settings: Any, spans: Any, reader: Any
              ) -> tuple[list[tuple[str, set[str]]], list[Any]]:
    finished = [(s.name, set(s.attributes)) for s in spans.get_finished_spans()]
    points = []
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points += [(metric.name, dict(p.attributes), p.count)
                           for p in metric.data.data_points]
    return finished, sorted(points, key=repr)


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_the_plain_loop_records_the_telemetry_tether_records(
        overhead: ModuleType, base_url: str, mode: str) -> None:
    ours, theirs = overhead.in_memory_telemetry(), overhead.in_memory_telemetry()
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    tether_json, tether_sse, close_tether = overhead.tether_runs(base_url, ours[0])
    plain_json, plain_sse, close_plain = overhead.plain_runs(
        base_url, overhead.HandTelemetry(theirs[0], port))
    try:
        assert "5" in await (tether_json if mode == "json" else tether_sse)()
        assert "5" in await (plain_json if mode == "json" else plain_sse)()
    finally:
        await close_tether()
        await close_plain()
    tether_spans, tether_points = _recorded(*ours)
    plain_spans, plain_points = _recorded(*theirs)
    assert len(tether_spans) == 4
    assert sorted(plain_spans, key=repr) == sorted(tether_spans, key=repr)
    assert plain_points == tether_points


@pytest.mark.parametrize("kind", ["plain json", "tether sse"])
def test_only_runs_one_kind_and_exits_cleanly(kind: str) -> None:
    # What benchmarks/instructions.py runs under valgrind: the kind answers "5" (the script
    # asserts it) and the process ends with its server. One loop and one mode each side.
    done = subprocess.run([sys.executable, str(BENCH), "--only", kind, "3"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
