"""Evaluation: run a suite of cases against a model and judge every run, for usefulness (the
calls made, the answer, the run's bounds, the gate's verdicts) and for resistance to an
injected text, side by side (docs/eval.md).

::

    from tether.eval import load_suite, run_suite

    report = await run_suite("examples/eval/smoke.yaml", model, repeat=3)
    assert report.passed, report.summary

This is a face for people using tether: inside the package each name is imported from its
home module.
"""

from __future__ import annotations

from tether.eval.cases import (
    Answer,
    Attack,
    CallPattern,
    Case,
    EvalError,
    Expect,
    OutputShape,
    StubTool,
    Suite,
)
from tether.eval.checks import Check, Observed, judge
from tether.eval.files import load_suite, suite_from_value
from tether.eval.judge import Judged, judge_answer
from tether.eval.report import (
    CaseReport,
    Regression,
    Report,
    RunRecord,
    read_report,
    regressions,
)
from tether.eval.runner import CaseApprover, EvalRun, run_case, run_suite

__all__ = [
    "Answer",
    "Attack",
    "CallPattern",
    "Case",
    "CaseApprover",
    "CaseReport",
    "Check",
    "EvalError",
    "EvalRun",
    "Expect",
    "Judged",
    "Observed",
    "OutputShape",
    "Regression",
    "Report",
    "RunRecord",
    "StubTool",
    "Suite",
    "judge",
    "judge_answer",
    "load_suite",
    "read_report",
    "regressions",
    "run_case",
    "run_suite",
    "suite_from_value",
]
