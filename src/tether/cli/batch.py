"""`tether batch IN.jsonl -o OUT.jsonl`: the library's ``run_batch`` with a progress view.

Each item is logged to the session store, a session of its own tagged with the batch (an
id printed as the batch starts: ``tether logs --batch ID`` lists its items), as
``tether run`` logs a run; ``--no-log`` keeps nothing. With ``--engine temporal`` too: each
item's workflow returns what its session wrote, replayed here into a session of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli.common import add_run_flags, list_limit
from tether.cli.temporal import add_batch_flags

if TYPE_CHECKING:  # the batch runner (the whole core) loads when the command runs
    from tether.batch import BatchItem, BatchProgress, ItemResult
    from tether.messages import Usage


def add_cli(sub: Any) -> None:
    """Register ``tether batch``."""
    p = sub.add_parser("batch", help="run many prompts (JSONL) side by side")
    p.add_argument("input", metavar="IN.jsonl",
                   help="one item a line: a JSON string, or {\"id\", \"prompt\", \"meta\"}")
    p.add_argument("-o", "--out", required=True, metavar="OUT.jsonl",
                   help="results, one JSON line per item, appended as each finishes")
    p.add_argument("-c", "--concurrency", type=int, default=4, help="items at once (4)")
    p.add_argument("--limit", type=list_limit, default=0, metavar="N",
                   help="only the first N items (0: all)")
    p.add_argument("--resume", action="store_true",
                   help="skip the ids already in OUT (after an interrupted batch)")
    p.add_argument("--no-log", action="store_true",
                   help="do not log the items to the session store")
    add_run_flags(p)
    add_batch_flags(p)  # --engine temporal: the items as durable runs
    p.set_defaults(handler=cmd_batch)


def cmd_batch(args: argparse.Namespace) -> int:
    from tether.batch import read_items
    from tether.cli.render import stderr_console

    err = stderr_console()
    items = read_items(args.input)
    view = TerminalProgress(err) if err.is_terminal else PlainProgress()
    try:
        results = asyncio.run(_batch(args, items, view))
    except KeyboardInterrupt:
        view.close()
        _print_summary(view.progress, args.out, interrupted=True)
        return 130
    view.close()
    _print_summary(view.progress, args.out, interrupted=False)
    return 0 if all(r.ok for r in results) else 1


async def _batch(args: argparse.Namespace, items: list[BatchItem], view: Any) -> list[ItemResult]:
    if getattr(args, "engine", "local") == "temporal":
        from tether.cli.temporal import batch_on_temporal

        # Logged as here: each item's run returns its session's writes, replayed into a
        # session made by the same ``_logged``.
        return await batch_on_temporal(
            args, items, view, None if args.no_log else lambda cfg: _logged(args, cfg))
    from tether.batch import run_batch
    from tether.cli.common import local_serving, make_agent, prepare_local, telemetry_export

    # The configuration, -T and --tools are checked (building the agent) before --local
    # builds or starts a server; the items were read before this.
    prepare_local(args)
    # Unattended: nobody to ask, so `ask` refuses gated calls (unless --yes).
    agent, cfg = make_agent(args, approver=None)
    async with local_serving(args):
        session_for = None if args.no_log else _logged(args, cfg)
        with telemetry_export(cfg):
            async with agent:
                return await run_batch(agent, items, concurrency=args.concurrency,
                                       limit=args.limit or None, out=args.out,
                                       resume=args.resume, on_progress=view,
                                       session_for=session_for)


def _logged(args: argparse.Namespace, cfg: Any) -> Any:
    """A function giving each item a new session tagged with this batch (its id printed
    now), or None when the store cannot be opened: then only the log is lost."""
    from tether.cli.common import error, workspace_of
    from tether.cli.sessions import store_for
    from tether.store.base import StoreError, new_session_id
    from tether.store.session import Session

    try:
        store = store_for(args.workspace)
    except StoreError as e:
        error(f"the items are not logged: {e} (--no-log skips logging)")
        return None
    batch = new_session_id()
    name, pcfg = cfg.provider_config()
    workspace = str(Path(workspace_of(args, cfg)).resolve())
    print(f"batch {batch}: each item is logged (tether logs --batch {batch})",
          file=sys.stderr, flush=True)

    def session_for(item: BatchItem) -> Session:
        return Session.create(store, provider=name, model=pcfg.model, workspace=workspace,
                              title=item.turns[0], batch=batch, batch_item=item.id)

    return session_for


def _tokens(usage: Usage) -> str:
    if usage.input_tokens is None or usage.output_tokens is None:
        return "tokens unknown"  # the server reported none: not 0
    return f"in {usage.input_tokens} · out {usage.output_tokens}"


class PlainProgress:
    """One line per finished item, for logs and pipes (no TTY); ``label`` names the command
    and ``noun`` what it runs (``tether eval`` runs repeats)."""

    def __init__(self, label: str = "batch", noun: str = "item") -> None:
        self.progress: BatchProgress | None = None
        self._announced = False
        self._label, self._noun = label, noun

    def __call__(self, p: BatchProgress) -> None:
        self.progress = p
        if not self._announced:
            self._announced = True
            skipped = f", {p.skipped} already done (skipped)" if p.skipped else ""
            self._line(f"{self._label}: {p.total} {self._noun}(s) to run{skipped}")
        r = p.last
        if r is None:
            return
        width = len(str(p.total))
        head = f"[{p.finished:>{width}}/{p.total}]"
        from tether.display import inline

        # Ids and errors are outside text (an error quotes a server): one line each.
        if r.ok:
            line = f"{head} ok     {inline(r.id)}  {r.elapsed:.1f}s  tokens {_tokens(r.usage)}"
        else:
            why = r.error or f"stopped: {r.stop_cause}"
            line = f"{head} FAILED {inline(r.id)}  {r.elapsed:.1f}s  {inline(why)}"
        self._line(line)

    def _line(self, text: str) -> None:
        # Plain print: a log line is never wrapped or styled.
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        return None


class TerminalProgress:
    """A rich progress bar: finished/total, ok, failed, running, tokens."""

    def __init__(self, err: Any, label: str = "batch") -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress: BatchProgress | None = None
        self._bar = Progress(
            TextColumn(f"[bold]{label}[/]"), BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), console=err,
            transient=False)
        self._task: Any = None
        self._bar.start()

    def __call__(self, p: BatchProgress) -> None:
        self.progress = p
        counts = (f"[green]ok {p.ok}[/] · [red]failed {p.failed}[/] · running {p.running} · "
                  f"tokens {_tokens(p.usage)}")
        if self._task is None:
            self._task = self._bar.add_task("batch", total=p.total, counts=counts)
        self._bar.update(self._task, completed=p.finished, counts=counts)
        r = p.last
        if r is not None and not r.ok:
            from tether.display import inline, shown

            why = r.error or f"stopped: {r.stop_cause}"
            self._bar.console.print(shown(("failed", "red"), f" {inline(r.id)}: {inline(why)}"))

    def close(self) -> None:
        self._bar.stop()


def _print_summary(p: BatchProgress | None, out: str, *, interrupted: bool) -> None:
    if p is None:
        print(f"batch: nothing ran; results: {out}")
        return
    parts = [f"{p.ok} ok", f"{p.failed} failed"]
    if p.skipped:
        parts.append(f"{p.skipped} skipped (already in {out})")
    if p.not_run:
        parts.append(f"{p.not_run} not run")
    print(f"batch {'interrupted' if interrupted else 'finished'}: {', '.join(parts)} · "
          f"tokens {_tokens(p.usage)} · {p.elapsed:.1f}s · results: {out}")
    if interrupted or p.not_run:
        print("rerun with --resume to run the rest")
