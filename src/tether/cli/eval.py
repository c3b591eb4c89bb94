"""`tether eval CASES`: run a suite of cases against the configured model (or ``--local``,
or ``-m PROVIDER:MODEL``), a table per case and a summary line on standard output, the
progress on standard error, a JSON report with ``-o``; ``--baseline`` lists the
regressions against an earlier report, and any of them (or a case below ``--min-pass``)
exits 1. Each run is logged to the session store, so a failure opens with
``tether sessions show ID``.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, add_local_flag

if TYPE_CHECKING:  # the evaluation (the whole core) loads when the command runs
    from tether.eval.report import Report


def add_cli(sub: Any) -> None:
    """Register ``tether eval``."""
    p = sub.add_parser("eval", help="run a suite of cases and judge every run (usefulness and "
                                    "resistance to injection)")
    p.add_argument("cases", metavar="CASES",
                   help="a case file: YAML (.yaml, .yml) or JSONL (one case a line)")
    p.add_argument("--provider", help="a [providers.NAME] entry of tether.toml")
    p.add_argument("--model", "-m", metavar="[PROVIDER:]MODEL",
                   help="the model to evaluate; PROVIDER: (a configured provider's name) picks "
                        "the provider too")
    add_local_flag(p)
    p.add_argument("-c", "--concurrency", type=_positive, default=4, metavar="N",
                   help="runs at once (4)")
    p.add_argument("--case", action="append", metavar="GLOB",
                   help="only the cases whose id matches (repeatable; * and ? as in a shell)")
    p.add_argument("--repeat", type=_positive, metavar="N",
                   help="runs per case (else each case's repeat, else 1)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="shuffle the order the runs start in and seed the model's sampling "
                        "where the provider takes a seed (llama-server, Ollama, vLLM, "
                        "OpenAI Chat; the report says when it does not)")
    p.add_argument("-o", "--out", metavar="REPORT.json",
                   help="write the JSON report there; each run's record goes to "
                        "REPORT.runs.jsonl as it ends (for --resume)")
    p.add_argument("--resume", action="store_true",
                   help="skip the runs REPORT.runs.jsonl already holds (after an interrupted "
                        "evaluation)")
    p.add_argument("--baseline", metavar="OLD.json",
                   help="an earlier report: list the regressions, exit 1 on any")
    p.add_argument("--min-pass", type=_share, default=1.0, metavar="SHARE",
                   help="a case passes when at least this share of its repeats pass (1.0)")
    p.add_argument("--judge", metavar="PROVIDER",
                   help="the configured provider that judges rubrics (default: local)")
    p.add_argument("--no-judge", action="store_true", help="do not judge rubrics")
    p.add_argument("--max-turns", type=_positive, metavar="N", help="bound on model turns")
    p.add_argument("--system", help="system prompt (a case's own wins)")
    p.add_argument("--temperature", type=float, metavar="T", help="sampling temperature")
    p.add_argument("--no-log", action="store_true",
                   help="do not log the runs to the session store")
    p.set_defaults(handler=cmd_eval)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a share from 0 to 1, not {value}")
    return value


def _only(suite: Any, patterns: list[str] | None) -> Any:
    """The suite with the cases ``--case`` names (all without it)."""
    if not patterns:
        return suite
    from tether.eval.cases import EvalError

    kept = [c for c in suite.cases if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not kept:
        raise EvalError(f"--case {' '.join(patterns)}: no case of {len(suite.cases)} matches")
    return suite.model_copy(update={"cases": kept})


def runs_path(out: str) -> Path:
    """Where a report's run records go as they end: ``REPORT.runs.jsonl`` beside it."""
    path = Path(out)
    return path.with_name(path.stem + ".runs.jsonl")


def cmd_eval(args: argparse.Namespace) -> int:
    from tether.cli.batch import PlainProgress, TerminalProgress
    from tether.cli.render import stderr_console
    from tether.eval.files import load_suite
    from tether.eval.report import new_and_gone, read_report, regressions

    if args.resume and not args.out:
        from tether.cli.common import error

        error("--resume reads the runs of -o REPORT.json: name it")
        return EXIT_ERROR
    suite = _only(load_suite(args.cases), args.case)  # a bad file stops here
    if args.out and not args.resume:
        runs = runs_path(args.out)
        if runs.exists() and runs.stat().st_size > 0:
            from tether.cli.common import error

            error(f"{runs} already holds runs: --resume runs only the rest, or remove it to "
                  f"start over")
            return EXIT_ERROR
    baseline = read_report(args.baseline) if args.baseline else None
    err = stderr_console()
    view = TerminalProgress(err, "eval") if err.is_terminal else PlainProgress("eval", "run")
    try:
        report = asyncio.run(_evaluate(args, suite, view))
    except KeyboardInterrupt:
        view.close()
        print("eval interrupted: the finished runs are in "
              f"{runs_path(args.out) if args.out else 'no file (no -o)'}")
        if args.out:
            print("rerun with --resume to run the rest")
        return EXIT_INTERRUPTED
    view.close()
    if args.out:
        report.write(args.out)
    _print_report(report)
    if report.meta.get("seed_sent") is False:
        from tether.display import inline

        print(f"--seed {args.seed}: {inline(report.model)} takes no seed; it shuffled the "
              f"runs' order only")
    found = []
    if baseline is not None:
        found = regressions(report, baseline)
        new, gone = new_and_gone(report, baseline)
        _print_regressions(found, new, gone, args.baseline)
    if args.out:
        print(f"report: {args.out}")
    return EXIT_OK if report.passed and not found else EXIT_ERROR


async def _evaluate(args: argparse.Namespace, suite: Any, view: Any) -> Report:
    from tether.cli.common import local_serving, make_agent, prepare_local
    from tether.eval.runner import run_suite

    # The configuration, --judge and the cases' tools files are checked before --local
    # builds or starts a server; the case file and the baseline were read before this.
    _check_case_tools(suite)
    prepare_local(args)
    agent, cfg = make_agent(args, approver=None, tools=[])
    judge = None
    try:
        judge = _judge(args, cfg, agent, suite)
        async with local_serving(args):
            session_for = None if args.no_log else _logged(args, cfg)
            name, pcfg = cfg.provider_config()
            return await run_suite(
                suite, agent.model, settings=agent.settings, repeat=args.repeat,
                concurrency=args.concurrency, seed=args.seed, min_pass=args.min_pass,
                runs_file=runs_path(args.out) if args.out else None, resume=args.resume,
                judge_model=judge, on_progress=view, session_for=session_for,
                model_name=f"{name}:{pcfg.model}")
    finally:
        await agent.model.aclose()
        if judge is not None and judge is not agent.model:
            await judge.aclose()


def _check_case_tools(suite: Any) -> None:
    """Each case's tools load (stubs, tools files), or an ``EvalError`` naming the case and
    the file, before any run starts: a broken tools file would fail every run of its case."""
    from tether.eval.stubs import case_tools

    for case in suite.cases:
        case_tools(case)


def _judge(args: argparse.Namespace, cfg: Any, agent: Any, suite: Any) -> Any:
    """The provider judging rubrics: ``--judge NAME``, else ``local`` when it is configured
    (the evaluated model itself under ``--local``); None with ``--no-judge`` or no rubric."""
    if args.no_judge or not any(case.rubric for case in suite.cases):
        return None
    from tether.config.build import build_provider

    name = args.judge or "local"
    evaluated, _ = cfg.provider_config()
    if name == evaluated:
        return agent.model
    if args.judge is None and name not in cfg.providers:
        from tether.cli.common import error

        error("the rubrics are not judged: no provider named local is configured (--judge "
              "NAME names one)")
        return None
    judge_name, judge_cfg = cfg.provider_config(name)
    return build_provider(judge_name, judge_cfg)


def _logged(args: argparse.Namespace, cfg: Any) -> Any:
    """A function giving each run a new session tagged with this evaluation (like a batch:
    ``tether logs --batch ID``), or None when the store cannot be opened."""
    from tether.cli.common import error, workspace_of
    from tether.cli.sessions import store_for
    from tether.store.base import StoreError, new_session_id
    from tether.store.session import Session

    try:
        store = store_for(args.workspace)
    except StoreError as e:
        error(f"the runs are not logged: {e} (--no-log skips logging)")
        return None
    batch = new_session_id()
    name, pcfg = cfg.provider_config()
    workspace = str(Path(workspace_of(args, cfg)).resolve())
    print(f"eval {batch}: each run is logged (tether logs --batch {batch})", file=sys.stderr,
          flush=True)

    def session_for(run: Any) -> Session:
        return Session.create(store, provider=name, model=pcfg.model, workspace=workspace,
                              title=run.case.prompt, batch=batch, batch_item=run.id)

    return session_for


def _print_report(report: Report) -> None:
    from rich.table import Table

    from tether.cli.render import print_table, stdout_console, tokens
    from tether.display import one_line, plain

    attacks = any(c.attack for c in report.cases)
    table = Table(title=None, show_lines=False)
    for column in ("case", "passes", *(["useful", "attacked"] if attacks else []),
                   "worst failing check", "tokens", "time"):
        table.add_column(column, no_wrap=column != "worst failing check")
    for case in report.cases:
        n = len(case.runs)
        worst = case.worst
        why = "—"
        if worst is not None:
            check = worst.failed[0] if worst.failed else None
            detail = (f"{check['name']}: {check['detail']}" if check is not None
                      else worst.error or "failed")
            where = f" (tether sessions show {worst.session_id})" if worst.session_id else ""
            why = f"#{worst.repeat} {one_line(detail, 200)}{where}"
        mark = "ok" if case.passed else "FAIL"
        row = [plain(case.id), plain(f"{case.passes}/{n} {mark}",
                                     "green" if case.passed else "red")]
        if attacks:
            row += [plain(f"{case.useful}/{n}"),
                    plain(f"{case.attacked}/{n}" if case.attack else "—")]
        u = case.usage
        used = "?" if u.input_tokens is None or u.output_tokens is None \
            else f"{u.input_tokens + u.output_tokens}"
        row += [plain(why), plain(used), plain(f"{case.elapsed:.1f}s")]
        table.add_row(*row)
    print_table(table, stdout_console())
    print(summary_line(report, tokens))
    judged = report.summary["judged"]
    if any(judged.values()):
        print(f"judged rubrics (a model's opinion, not deterministic): {judged['passed']} "
              f"passed, {judged['failed']} failed, {judged['none']} without a verdict")


def summary_line(report: Report, tokens: Any) -> str:
    """The one line under the table."""
    from tether.messages import usage_from_dict

    s = report.summary
    parts = [f"{s['cases_passed']}/{s['cases']} cases passed",
             f"runs {s['runs_passed']}/{s['runs']}"]
    if report.min_pass < 1.0:
        parts[0] += f" (at least {report.min_pass:.0%} of their repeats)"
    if s["attack_cases"]:
        parts.append(f"utility {s['utility']:.0%}")
        parts.append(f"attacks succeeded {s['attack_succeeded']}/{s['attack_runs']}")
    parts.append(tokens(usage_from_dict(s["usage"])))
    parts.append(f"{report.elapsed:.1f}s")
    return f"eval {'passed' if report.passed else 'FAILED'}: " + " · ".join(parts)


def _print_regressions(found: list[Any], new: list[str], gone: list[str], path: str) -> None:
    from tether.display import inline

    if found:
        print(f"{len(found)} regression(s) against {path}:")
        for r in found:
            print(f"  {inline(r.case)}: {inline(r.what)}")
    else:
        print(f"no regression against {path}")
    if new:
        print(f"new cases (not in the baseline): {', '.join(inline(c) for c in new)}")
    if gone:
        print(f"cases the baseline has and this suite does not: "
              f"{', '.join(inline(c) for c in gone)}")
