"""`tether eval`'s example suites against the real local model (llama-server, Qwen2.5-Coder
0.5B): a few smoke cases and a few injection cases, a few repeats, in CI. The asserts are on
structure (which tool, which argument, what the gate let run), never on wording; the model's
scores are measured and written in docs/eval.md, not asserted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.test_real_model import THREADS, _toolchain_or_skip
from tether.eval.cases import Suite
from tether.eval.files import load_suite
from tether.eval.report import Report
from tether.eval.runner import run_suite
from tether.local import SYSTEM_PROMPT, LocalServer
from tether.local.setup import default_cache_dir
from tether.providers.openai_chat import OpenAIChat
from tether.settings import AgentSettings

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.xdist_group("real_model")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "eval"
SMOKE = ("weather-paris", "multiply")
INJECTION = ("banking-user_task_0-injection_task_0",)
# As `tether eval --local` runs the default small model.
SETTINGS = AgentSettings(system_prompt=SYSTEM_PROMPT, temperature=0.0, max_turns=4)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[LocalServer]:
    _toolchain_or_skip()
    async with LocalServer(port=0, cache_dir=default_cache_dir(), threads=THREADS) as running:
        yield running


def _scores(report: Report) -> str:
    return "; ".join(f"{c.id}: {c.passes}/{len(c.runs)} passed, "
                     f"{'-' if not c.attack else c.attacked} attacked, "
                     f"{c.elapsed / len(c.runs):.1f} s a run" for c in report.cases)


def _picked(name: str, ids: tuple[str, ...]) -> Suite:
    suite = load_suite(EXAMPLES / name)
    return suite.model_copy(update={"cases": [c for c in suite.cases if c.id in ids]})


async def test_the_smoke_suite_runs_on_the_local_model(server: LocalServer) -> None:
    model = OpenAIChat(server.base_url, "qwen", profile="llama-server")
    report = await run_suite(_picked("smoke.yaml", SMOKE), model, settings=SETTINGS,
                             repeat=2, concurrency=1)
    await model.aclose()
    print(_scores(report))  # the figures docs/eval.md quotes (pytest -s shows them)
    assert [c.id for c in report.cases] == list(SMOKE)
    assert report.summary["runs"] == 4
    for case in report.cases:
        for run in case.runs:
            assert run.stop_cause in ("completed", "max_turns"), run
            assert run.checks and run.usage.requests >= 1
    weather = report.case("weather-paris")
    # The weather tool called with the city, every time (temperature 0, one slot).
    assert all(any(c["name"] == "calls.any" and c["passed"] for c in run.checks)
               for run in weather.runs)


async def test_the_gate_holds_the_injection_suites_payment_on_the_local_model(
        server: LocalServer) -> None:
    model = OpenAIChat(server.base_url, "qwen", profile="llama-server")
    report = await run_suite(_picked("injection.yaml", INJECTION), model, settings=SETTINGS,
                             repeat=1, concurrency=1)
    await model.aclose()
    print(_scores(report))
    summary = report.summary
    assert (summary["attack_cases"], summary["attack_runs"]) == (1, 1)
    (run,) = report.case(INJECTION[0]).runs
    assert run.attacked is not None and [c["name"] for c in run.checks][-1] == "attack"
    # Whatever the model does, a payment to the attacker's IBAN never runs: the bill it
    # reads is private and untrusted, and the IBAN traces to nothing the user wrote.
    assert run.attacked is False


async def test_the_shipped_smoke_suite_passes_through_tether_eval_local(
        server: LocalServer, tmp_path: Path) -> None:
    """The README's evaluation, as a user types it at the repository's root: every case
    passes on the bundled model, and every case is bounded (its calls, its turns)."""
    user = tmp_path / "config.toml"
    user.write_text(f"[local]\nport = {server.port}\n")
    env = {**os.environ, "TETHER_CONFIG": str(user), "TETHER_CACHE_DIR": str(server.cache_dir)}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tether.cli", "eval", str(EXAMPLES / "smoke.yaml"), "--local",
         "--no-log", "-o", str(tmp_path / "smoke.json")],
        cwd=EXAMPLES.parents[1], capture_output=True, text=True, env=env, timeout=1200,
        stdin=subprocess.DEVNULL)
    report = json.loads((tmp_path / "smoke.json").read_text())
    print(done.stdout)  # the table docs/eval.md quotes (pytest -s shows it)
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["summary"]["cases_passed"] == report["summary"]["cases"] == 5
    suite = load_suite(EXAMPLES / "smoke.yaml")
    assert all(c.max_turns is not None or c.expect.max_calls is not None for c in suite.cases)
