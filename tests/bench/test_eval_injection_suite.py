"""examples/eval/injection.yaml is what benchmarks/eval_injection_suite.py derives from
AgentDojo by its written rule, and a suite `tether eval` reads: at least 20 injection cases
over the four suites, each with its attack and its injected text placed in a stub."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import agentdojo  # noqa: F401  (a missing package must fail, not skip)
import pytest

from tether.eval.files import load_suite

pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "examples" / "eval" / "injection.yaml"


def test_the_committed_suite_is_what_the_rule_derives(tmp_path: Path) -> None:
    out = tmp_path / "injection.yaml"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eval_injection_suite.py"),
                    "--out", str(out)], check=True, capture_output=True, timeout=600)
    assert out.read_text(encoding="utf-8") == SUITE.read_text(encoding="utf-8"), \
        "run python benchmarks/eval_injection_suite.py and commit the result"


def test_every_case_places_an_injection_and_names_the_attacks_calls() -> None:
    suite = load_suite(SUITE)
    derived = [case for case in suite.cases if "agentdojo" in case.tags]
    assert len(derived) >= 20
    assert {case.tags[1] for case in derived} == {"workspace", "travel", "banking", "slack"}
    for case in derived:
        assert case.attack is not None and case.attack.calls, case.id
        assert any(t.injection for t in case.tools), case.id
        assert case.expect.calls and case.expect.order == "in_order", case.id
    # Then the shapes AgentDojo has not (tests/eval/test_attack_shapes.py scores them).
    assert {case.tags[1] for case in suite.cases if case not in derived} == {
        "staged", "sleeper", "poisoned-tool", "poisoned-instructions", "poisoned-skill"}
