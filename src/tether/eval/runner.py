"""Running a suite: every repeat of every case a fresh conversation on a fresh agent (the
case's tools, its approvals, the configured model and settings), through the batch driver
(``tether.batch.drive_batch``: bounded concurrency, progress, each run's record appended
to a runs file the moment it ends, so an interrupted evaluation resumes), each run judged
by its case's checks, and the records gathered into a ``Report``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether import events as ev
from tether.agent import Agent
from tether.approval import ApprovalRequest, Decision
from tether.batch import BatchItem, BatchProgress, ItemResult, drive_batch, plan_batch
from tether.conversation import Conversation, SessionLike
from tether.eval.cases import CallPattern, Case, EvalError, Suite
from tether.eval.checks import Check, Observed, attacked, judge, value_matches
from tether.eval.files import load_suite
from tether.eval.judge import judge_answer
from tether.eval.report import Report, RunRecord, build_report
from tether.eval.stubs import case_tools
from tether.messages import Usage, loads_bounded
from tether.output import OutputPlan, OutputSpec
from tether.providers.base import Provider
from tether.result import RunResult, final_result
from tether.run.loop import run_events
from tether.settings import AgentSettings
from tether.trust import CLEAN

ModelFor = Callable[[Case, int], Provider]


@dataclass(frozen=True, slots=True)
class EvalRun:
    """One repeat of one case, as the batch driver runs it."""

    case: Case
    repeat: int

    @property
    def id(self) -> str:
        return f"{self.case.id}#{self.repeat}"


class CaseApprover:
    """A case's approver: allows the calls its ``approve`` patterns match, denies the rest
    (as a person who knows what the task needs would)."""

    def __init__(self, allowed: Sequence[CallPattern]) -> None:
        self.allowed = tuple(allowed)

    async def approve(self, request: ApprovalRequest) -> Decision:
        for pattern in self.allowed:
            if pattern.tool == request.tool and value_matches(pattern.args, request.arguments):
                return Decision.allow()
        return Decision.deny("the evaluation's approver allows only the calls the case "
                             "approves")


async def run_suite(
    suite: Suite | str | Path,
    model: Provider | ModelFor,
    *,
    settings: AgentSettings | None = None,
    repeat: int | None = None,
    concurrency: int = 4,
    seed: int | None = None,
    min_pass: float = 1.0,
    runs_file: str | Path | None = None,
    resume: bool = False,
    judge_model: Provider | None = None,
    on_progress: Callable[[BatchProgress], None] | None = None,
    session_for: Callable[[EvalRun], SessionLike] | None = None,
    model_name: str | None = None,
) -> Report:
    """Run every case of ``suite`` (a ``Suite`` or a case file) ``repeat`` times (else each
    case's own ``repeat``, else the suite's) and return the ``Report``.

    ``model`` is one provider for every run, or a function of (case, repeat) giving each
    run its own (a scripted model, which plays its replies once). ``settings`` are the
    agent's (bounds, security, system prompt...), changed per case by its ``system``,
    ``max_turns`` and ``permission_mode``. ``seed`` shuffles the order the runs start in and
    is sent with every request where the provider takes one (the report's ``seed_sent``).
    A case passes when at least ``min_pass`` of its repeats pass. ``runs_file`` (JSONL)
    gets each run's record as it ends; ``resume`` skips the runs it already holds.
    ``judge_model`` judges the cases' rubrics (none: not judged). ``session_for`` gives a
    run the stored session it is logged to.
    """
    if not 0.0 <= min_pass <= 1.0:
        raise EvalError(f"min_pass is a share of the repeats, from 0 to 1, not {min_pass}")
    source = str(suite) if not isinstance(suite, Suite) else "<suite>"
    if not isinstance(suite, Suite):
        suite = load_suite(suite)
    base = settings or AgentSettings()
    if seed is not None:
        base = replace(base, seed=seed)
    runs = [EvalRun(case, n) for case in suite.cases
            for n in range(1, (repeat or case.repeat or suite.repeat) + 1)]
    if seed is not None:
        random.Random(seed).shuffle(runs)
    by_id = {run.id: run for run in runs}
    items = [BatchItem(run.id, (run.case.prompt,)) for run in runs]
    todo, _ = plan_batch(items, concurrency=concurrency, limit=None, out=runs_file,
                         resume=resume)
    earlier = read_runs(runs_file, by_id) if resume and runs_file is not None else []
    started = time.perf_counter()

    async def run_item(item: BatchItem) -> ItemResult:
        return await run_case(by_id[item.id], model, base, judge_model, session_for)

    results = await drive_batch(todo, run_item, skipped=len(items) - len(todo),
                                concurrency=concurrency, out=runs_file,
                                on_progress=on_progress)
    records = earlier + [RunRecord.from_dict(r.meta) for r in results]
    name = model_name or _model_name(model)
    meta = {} if seed is None else {"seed_sent": seed_sent(model)}
    return build_report(source, name, records, [c.id for c in suite.cases],
                        {c.id for c in suite.cases if c.attack is not None},
                        min_pass=min_pass, seed=seed, elapsed=time.perf_counter() - started,
                        meta=meta)


def seed_sent(model: Any) -> bool | None:
    """Whether a seed reaches ``model``'s sampling: its wire takes one (llama-server, Ollama,
    vLLM, OpenAI's Chat Completions); None for per-run models (not known here)."""
    if not _is_provider(model):
        return None
    return bool(getattr(model, "takes_seed", False))


def _is_provider(value: Any) -> bool:
    return hasattr(value, "stream") and hasattr(value, "aclose")


def _model_name(model: Any) -> str:
    if _is_provider(model):
        return f"{getattr(model, 'name', '?')}:{getattr(model, 'model', '?')}"
    return "per-run models"


def case_settings(case: Case, base: AgentSettings) -> AgentSettings:
    changes: dict[str, Any] = {}
    if case.system is not None:
        changes["system_prompt"] = case.system
    if case.max_turns is not None:
        changes["max_turns"] = case.max_turns
    if case.permission_mode is not None:
        changes["permission_mode"] = case.permission_mode
    return replace(base, **changes) if changes else base


async def run_case(run: EvalRun, model: Provider | ModelFor, base: AgentSettings,
                   judge_model: Provider | None = None,
                   session_for: Callable[[EvalRun], SessionLike] | None = None) -> ItemResult:
    """One repeat of a case on a fresh agent and conversation, judged; its record is the
    ``ItemResult``'s ``meta`` (what the runs file keeps)."""
    case = run.case
    started = time.perf_counter()
    seen: Observed
    session: SessionLike | None = None
    try:
        provider: Provider = model if _is_provider(model) else model(  # type: ignore[assignment,operator]
            case, run.repeat)
        session = session_for(run) if session_for is not None else None
        approver = CaseApprover(case.approve) if case.approve else None
        settings = case_settings(case, base)
        if settings.seed is not None:  # each repeat its own seed, the same in every evaluation
            settings = replace(settings, seed=settings.seed + run.repeat - 1)
        agent = Agent.from_settings(provider, settings,
                                    tools=case_tools(case), approver=approver)
        seen = await _observe(agent, case, session, started)
    except EvalError as e:
        seen = Observed(None, time.perf_counter() - started, error=str(e))
    except Exception as e:  # one run's failure is its record, not the suite's end
        # A tools file that does not load, a setting out of range, a model factory that
        # failed: the run fails, saying why; the other runs go on.
        seen = Observed(None, time.perf_counter() - started, error=f"{type(e).__name__}: {e}")
    checks = judge(case, seen)
    result = seen.result
    judged = None
    if case.rubric is not None and judge_model is not None and result is not None:
        judged = (await judge_answer(judge_model, case.prompt, case.rubric,
                                     result.text)).to_dict()
    record = _record(run, checks, seen, judged, getattr(session, "id", None))
    return _item(run, record, result)


async def _observe(agent: Agent, case: Case, session: SessionLike | None,
                   started: float) -> Observed:
    conversation = Conversation() if session is None else None
    # The earlier runs (``before``) on the same conversation, as ``tether run -c`` would
    # continue it: what they read (and the taint they leave) is the last run's past.
    earlier = tuple([await final_result(run_events(
        agent, prompt, conversation=conversation, session=session, stream_requests=False))
        for prompt in case.before])
    bound = CallBound(case.expect.max_calls)
    if case.output is None:
        result = await final_result(bound.watch(run_events(
            agent, case.prompt, conversation=conversation, session=session,
            stream_requests=False, interrupt=bound.interrupt)))
        return Observed(result, time.perf_counter() - started, limit=bound.limit(result),
                        earlier=earlier)
    shape = case.output
    spec = OutputSpec(shape.name, shape.description, dict(shape.schema_))
    if shape.with_tools:
        spec = spec.with_tools()
    plan = OutputPlan(spec.reserve(), agent.settings.output_retries)
    result = await final_result(bound.watch(run_events(
        agent, case.prompt, conversation=conversation, session=session, stream_requests=False,
        ending=plan, interrupt=bound.interrupt)))
    elapsed = time.perf_counter() - started
    limit = bound.limit(result)
    if plan.succeeded:
        return Observed(result, elapsed, output=plan.value, limit=limit, earlier=earlier)
    why = plan.failure or f"the run stopped ({limit or result.stop_cause}) before answering"
    if plan.last_error:
        why = f"{why}: {plan.last_error}"
    return Observed(result, elapsed, output_error=why, limit=limit, earlier=earlier)


class CallBound:
    """A case's ``expect.max_calls`` as a bound on the run, not only a check after it: the
    call past the bound is not run (the run's interrupt is set as it is requested, and the
    gate runs nothing once it is set), so a model that calls a tool again and again ends
    the run at once, its record saying ``max_calls``, instead of spending every turn."""

    def __init__(self, max_calls: int | None) -> None:
        self.max_calls = max_calls
        self.interrupt = asyncio.Event()
        self.requested = 0

    async def watch(self, events: AsyncIterator[ev.Event]) -> AsyncIterator[ev.Event]:
        async for event in events:
            # The run's own calls (a sub-agent's are its own business, as ``ran`` counts).
            if isinstance(event, ev.ToolCallRequested) and event.path == () \
                    and self.max_calls is not None:
                self.requested += 1
                if self.requested > self.max_calls:
                    self.interrupt.set()
            yield event

    def limit(self, result: RunResult) -> str | None:
        """The bound the run ended at (``max_calls``, ``max_turns``...), None when it ended
        otherwise (an answer, an error)."""
        if self.interrupt.is_set() and result.stop_cause == "interrupted":
            return "max_calls"
        return str(result.stop_cause) if result.stop_cause in LIMITS else None


# The stop causes that are a bound the run reached, not an ending of its own.
LIMITS = ("max_turns", "output_token_budget", "cost_budget", "repeated_failure")


def _record(run: EvalRun, checks: list[Check], seen: Observed, judged: dict[str, Any] | None,
            session_id: str | None) -> RunRecord:
    result = seen.result
    hit = None
    if run.case.attack is not None:
        hit = bool(attacked(run.case.attack, result, seen.earlier)) if result is not None \
            else False
    error = seen.error
    if result is not None and result.error is not None:
        error = f"{type(result.error).__name__}: {result.error}"
    stop = seen.limit or (str(result.stop_cause) if result is not None else None)
    return RunRecord(
        run.case.id, run.repeat, all(c.passed for c in checks),
        tuple(c.to_dict() for c in checks), hit, stop,
        result.usage if result is not None else Usage(),
        result.turns if result is not None else 0, seen.elapsed, session_id, error, judged)


def _item(run: EvalRun, record: RunRecord, result: RunResult | None) -> ItemResult:
    failed = record.failed
    error = None if record.passed else (
        f"{failed[0]['name']}: {failed[0]['detail']}" if failed else record.error)
    if result is None:
        return ItemResult(run.id, record.passed, "", error, None, Usage(), CLEAN, 0, 0, 0, 0,
                          record.elapsed, record.to_dict(), record.session_id)
    return ItemResult(run.id, record.passed, result.text, error, record.stop_cause,
                      result.usage, result.taint, result.blocked_sends,
                      sum(c.denied or c.blocked for c in result.tool_calls),
                      len(result.tool_calls), result.turns, record.elapsed, record.to_dict(),
                      record.session_id)


def read_runs(path: str | Path, runs: dict[str, EvalRun]) -> list[RunRecord]:
    """The records a runs file already holds for ``runs`` (a resumed evaluation's). A line
    a kill cut short is skipped, as the batch driver skips it: that run runs again."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise EvalError(f"cannot read {path} to resume: {e.strerror or e}") from None
    records: dict[str, RunRecord] = {}
    for raw in data.split(b"\n"):
        try:
            line = loads_bounded(raw.decode("utf-8"))
            meta = line["meta"]
            record = RunRecord.from_dict(meta)
        except (ValueError, KeyError, TypeError):
            continue
        if line.get("id") in runs:
            records[line["id"]] = record
    return list(records.values())

__all__ = ["LIMITS", "CallBound", "CaseApprover", "EvalRun", "case_settings", "read_runs",
           "run_case", "run_suite"]
