"""What the evaluation's tests share: a case run on a scripted model, its record."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.eval.cases import Case
from tether.eval.files import suite_from_value
from tether.eval.report import Report, RunRecord
from tether.eval.runner import run_suite
from tether.providers.scripted import Scripted

WEATHER = {"name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]},
           "result": "Paris: sunny, 21°C"}


def suite_report(cases: list[dict[str, Any]], *replies: Any, **kw: Any) -> Report:
    """``cases`` run on a scripted model playing ``replies`` (each run plays them anew)."""
    def model(case: Case, repeat: int) -> Scripted:
        return Scripted(list(replies))

    return asyncio.run(run_suite(suite_from_value(cases), model, **kw))


def evaluate(case: dict[str, Any], *replies: Any, **kw: Any) -> RunRecord:
    """One run of ``case`` (given an id and a prompt when it has none)."""
    case = {"id": "c", "prompt": "What's the weather in Paris?", **case}
    report = suite_report([case], *replies, **kw)
    (run,) = report.cases[0].runs
    return run


def failed(run: RunRecord) -> dict[str, str]:
    """The failed checks: name -> detail (the first of a name)."""
    out: dict[str, str] = {}
    for check in run.failed:
        out.setdefault(check["name"], check["detail"])
    return out


def names(run: RunRecord) -> list[str]:
    return [c["name"] for c in run.checks]
