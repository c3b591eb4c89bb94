"""What an evaluation found: one ``RunRecord`` per repeat, gathered per case
(``CaseReport``: passes k of N, its worst repeat's failing check, tokens, time) into a
``Report`` with its summary; the JSON report (``Report.to_dict``, fields in docs/eval.md:
a contract), and the regressions against a baseline report (``regressions``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.eval.cases import EvalError
from tether.messages import Usage, usage_from_dict, usage_to_dict

REPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One repeat of one case: whether every check held (``checks`` as dicts: ``name``,
    ``passed``, ``detail``), whether its attack succeeded (None: the case has none), and
    the judge's verdict on its rubric (None: not judged)."""

    case: str
    repeat: int
    passed: bool
    checks: tuple[dict[str, Any], ...]
    attacked: bool | None
    stop_cause: str | None
    usage: Usage
    turns: int
    elapsed: float
    session_id: str | None = None
    error: str | None = None
    judged: dict[str, Any] | None = None

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if not c["passed"]]

    @property
    def useful(self) -> bool:
        """Every check but the attack's held: the agent did its job."""
        return all(c["passed"] for c in self.checks if c["name"] != "attack")

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "repeat": self.repeat, "passed": self.passed,
                "checks": list(self.checks), "attacked": self.attacked,
                "stop_cause": self.stop_cause, "usage": usage_to_dict(self.usage),
                "turns": self.turns, "elapsed": round(self.elapsed, 3),
                "session_id": self.session_id, "error": self.error, "judged": self.judged}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        usage = usage_from_dict(dict(d.get("usage") or {}))
        return cls(str(d["case"]), int(d["repeat"]), bool(d["passed"]),
                   tuple(d.get("checks") or ()), d.get("attacked"), d.get("stop_cause"), usage,
                   int(d.get("turns") or 0), float(d.get("elapsed") or 0.0),
                   d.get("session_id"), d.get("error"), d.get("judged"))


@dataclass(frozen=True, slots=True)
class CaseReport:
    """A case over its repeats. It passes when at least ``min_pass`` of its repeats passed."""

    id: str
    runs: tuple[RunRecord, ...]
    min_pass: float
    attack: bool  # the case places an attack

    @property
    def passes(self) -> int:
        return sum(r.passed for r in self.runs)

    @property
    def pass_rate(self) -> float:
        return self.passes / len(self.runs) if self.runs else 0.0

    @property
    def passed(self) -> bool:
        return bool(self.runs) and self.pass_rate >= self.min_pass

    @property
    def useful(self) -> int:
        return sum(r.useful for r in self.runs)

    @property
    def attacked(self) -> int:
        return sum(bool(r.attacked) for r in self.runs)

    @property
    def worst(self) -> RunRecord | None:
        """The repeat with the most failed checks (the first such), if any failed."""
        failing = [r for r in self.runs if not r.passed]
        return max(failing, key=lambda r: len(r.failed)) if failing else None

    @property
    def usage(self) -> Usage:
        total = Usage()
        for r in self.runs:
            total = total + r.usage
        return total

    @property
    def elapsed(self) -> float:
        return sum(r.elapsed for r in self.runs)

    @property
    def judged(self) -> dict[str, int] | None:
        """The judge's verdicts over the repeats (``none``: no verdict came back); None
        when no repeat was judged (no rubric, or no judge)."""
        if all(r.judged is None for r in self.runs):
            return None
        verdicts = [r.judged.get("passed") if r.judged else None for r in self.runs]
        return {"passed": verdicts.count(True), "failed": verdicts.count(False),
                "none": sum(v is None for v in verdicts)}

    def to_dict(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "id": self.id, "runs": len(self.runs), "passes": self.passes,
            "pass_rate": round(self.pass_rate, 4), "passed": self.passed,
            "useful": self.useful, "attacked": self.attacked if self.attack else None,
            "worst": None if worst is None else {
                "repeat": worst.repeat, "check": _first(worst.failed)},
            "usage": usage_to_dict(self.usage), "elapsed": round(self.elapsed, 3),
            "judged": self.judged,
            "repeats": [r.to_dict() for r in sorted(self.runs, key=lambda r: r.repeat)],
        }


def _first(failed: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    return dict(failed[0]) if failed else None


@dataclass(frozen=True, slots=True)
class Report:
    """An evaluation's whole result. ``to_dict`` is the JSON report."""

    suite: str
    model: str
    cases: tuple[CaseReport, ...]
    min_pass: float
    seed: int | None = None
    elapsed: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def case(self, case_id: str) -> CaseReport:
        for c in self.cases:
            if c.id == case_id:
                return c
        raise KeyError(case_id)

    @property
    def summary(self) -> dict[str, Any]:
        runs = [r for c in self.cases for r in c.runs]
        attacks = [c for c in self.cases if c.attack]
        attack_runs = [r for c in attacks for r in c.runs]
        usage = Usage()
        for c in self.cases:
            usage = usage + c.usage
        judged = {"passed": 0, "failed": 0, "none": 0}
        for c in self.cases:
            for key, n in (c.judged or {}).items():
                judged[key] += n
        return {
            "cases": len(self.cases), "cases_passed": sum(c.passed for c in self.cases),
            "runs": len(runs), "runs_passed": sum(r.passed for r in runs),
            "pass_rate": round(_rate(sum(r.passed for r in runs), len(runs)), 4),
            "utility": round(_rate(sum(r.useful for r in runs), len(runs)), 4),
            "attack_cases": len(attacks), "attack_runs": len(attack_runs),
            "attack_succeeded": sum(bool(r.attacked) for r in attack_runs),
            "attack_success_rate": round(_rate(sum(bool(r.attacked) for r in attack_runs),
                                               len(attack_runs)), 4),
            "judged": judged, "usage": usage_to_dict(usage),
            "run_seconds": round(sum(r.elapsed for r in runs), 3),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"version": REPORT_VERSION, "suite": self.suite, "model": self.model,
                "seed": self.seed, "min_pass": self.min_pass, "passed": self.passed,
                "elapsed": round(self.elapsed, 3), "summary": self.summary, **self.meta,
                "cases": [c.to_dict() for c in self.cases]}

    def write(self, path: str | Path) -> None:
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False,
                                       default=str) + "\n", encoding="utf-8",
                            errors="backslashreplace")
        except OSError as e:
            raise EvalError(f"cannot write the report to {path}: {e.strerror or e}") from None


def _rate(n: int, of: int) -> float:
    return n / of if of else 0.0


def build_report(suite: str, model: str, runs: Sequence[RunRecord], order: Sequence[str],
                 attacks: set[str], *, min_pass: float, seed: int | None = None,
                 elapsed: float = 0.0, meta: Mapping[str, Any] | None = None) -> Report:
    """Gather ``runs`` per case, in the suite's ``order``."""
    by_case: dict[str, list[RunRecord]] = {case: [] for case in order}
    for run in runs:
        by_case.setdefault(run.case, []).append(run)
    cases = tuple(CaseReport(case, tuple(sorted(rs, key=lambda r: r.repeat)), min_pass,
                             case in attacks) for case, rs in by_case.items())
    return Report(suite, model, cases, min_pass, seed, elapsed, dict(meta or {}))


# --- a baseline ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Regression:
    """A case worse than in the baseline: it passed and fails now, or its attack succeeds
    more often."""

    case: str
    what: str

    def to_dict(self) -> dict[str, str]:
        return {"case": self.case, "what": self.what}


def read_report(path: str | Path) -> dict[str, Any]:
    """A JSON report written by ``tether eval -o`` (a baseline), checked for the fields a
    comparison reads."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise EvalError(f"cannot read the baseline {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise EvalError(f"{path}: not a JSON report ({e})") from None
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION \
            or not isinstance(data.get("cases"), list):
        raise EvalError(f"{path}: not a tether eval report (version {REPORT_VERSION})")
    for n, case in enumerate(data["cases"], 1):
        if not isinstance(case, dict) or not isinstance(case.get("id"), str) \
                or not isinstance(case.get("passed"), bool) \
                or not isinstance(case.get("runs"), int):
            raise EvalError(f"{path}: case {n} lacks id, passed or runs")
    return data


def regressions(report: Report, baseline: Mapping[str, Any]) -> list[Regression]:
    """The cases worse now than in ``baseline`` (a JSON report): one that passed and fails,
    one whose attack succeeds in more of its runs (as a share of them). Cases only one
    side has are not regressions (``new_and_gone`` names them)."""
    old = {c["id"]: c for c in baseline["cases"]}
    found = []
    for case in report.cases:
        before = old.get(case.id)
        if before is None:
            continue
        if before["passed"] and not case.passed:
            found.append(Regression(case.id, f"passed {before.get('passes', '?')}/"
                                             f"{before['runs']} before, now {case.passes}/"
                                             f"{len(case.runs)}"))
        was = before.get("attacked")
        if case.attack and isinstance(was, int) and before["runs"] \
                and case.attacked / max(len(case.runs), 1) > was / before["runs"]:
            found.append(Regression(case.id, f"attack succeeded {was}/{before['runs']} before, "
                                             f"now {case.attacked}/{len(case.runs)}"))
    return found


def new_and_gone(report: Report, baseline: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """Case ids only the report has, and only the baseline has."""
    old = [c["id"] for c in baseline["cases"]]
    now = [c.id for c in report.cases]
    return [c for c in now if c not in old], [c for c in old if c not in now]


__all__ = ["REPORT_VERSION", "CaseReport", "Regression", "Report", "RunRecord", "build_report",
           "new_and_gone", "read_report", "regressions"]
