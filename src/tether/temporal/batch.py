"""A batch as durable runs: one workflow per item, results appended as each completes.

::

    results = await run_batch(client, read_items("in.jsonl"), task_queue="tether",
                              out="out.jsonl")

An item's workflow id is derived from the batch id and the item id
(``tether-batch-<batch>-<item>``), and a run of that id is never started twice: submitting
the batch again (after the client died, or with ``resume=True`` to skip what ``out``
already has) attaches to the items still running and reads the results of those that
completed. The batch id defaults to one derived from ``out``'s absolute path; pass another
to run the same items again. Results are the same lines ``tether batch`` writes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tether.batch import (
    BatchError,
    BatchItem,
    BatchProgress,
    ItemResult,
    _check_unique,
    _open_sink,
    finished_ids,
    item_from_value,
)
from tether.messages import Usage, usage_from_dict
from tether.trust import CLEAN, Taint

from . import require
from .client import start_run

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def batch_id_for(out: str | Path) -> str:
    """The batch id a batch writing to ``out`` gets by default."""
    return hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:16]


def workflow_id(batch_id: str, item_id: str) -> str:
    """The workflow id of one item: readable when the item id is plain, else its hash (an
    item id is whatever the input file says)."""
    key = item_id if _SAFE_ID.match(item_id) else \
        "h:" + hashlib.sha256(item_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"tether-batch-{batch_id}-{key}"


def item_result(item: BatchItem, outcome: Mapping[str, Any]) -> ItemResult:
    """An item's result line from its workflow's outcome."""
    error = outcome.get("error")
    if error is not None:
        error = f"{outcome.get('error_type') or 'Error'}: {error}"
    stop = outcome.get("stop_cause")
    return ItemResult(item.id, error is None and stop == "completed", str(outcome["text"]), error,
                      stop, usage_from_dict(outcome["usage"]), Taint.from_dict(outcome["taint"]),
                      int(outcome["blocked_sends"]), int(outcome["refused"]),
                      len(outcome["tool_calls"]), int(outcome["turns"]),
                      float(outcome.get("elapsed") or 0.0), item.meta)


async def run_batch(
    client: Any,
    items: Iterable[BatchItem | str | Mapping[str, Any]],
    *,
    task_queue: str,
    out: str | Path | None = None,
    resume: bool = False,
    concurrency: int = 64,
    limit: int | None = None,
    batch_id: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    ask: bool = False,
    on_progress: Callable[[BatchProgress], None] | None = None,
) -> list[ItemResult]:
    """Run every item as a workflow, at most ``concurrency`` waited on at once (the
    workers decide how many really run); returns the results in the order they finished.

    As ``tether.batch.run_batch``: ``limit``, ``resume``, ``out`` (JSONL, appended as each
    item completes) and ``on_progress`` mean the same. ``ask=False`` (the default, as for
    an unattended batch) refuses calls that need approval; ``ask=True`` lets them wait for
    a decision by signal (``tether approvals``). Cancelling stops waiting, not the runs:
    they go on, and a batch submitted again with the same id picks up their results.
    """
    require()
    from temporalio.client import WorkflowFailureError
    from temporalio.service import RPCError

    if concurrency < 1:
        raise BatchError(f"concurrency must be at least 1, not {concurrency}")
    todo = _check_unique([item_from_value(v, n, f"item {n}") for n, v in enumerate(items, 1)])
    if limit is not None:
        todo = todo[:limit]
    done_ids: set[str] = set()
    if out is not None:
        out = Path(out)
        if resume:
            done_ids = finished_ids(out)
        elif out.exists() and out.stat().st_size > 0:
            raise BatchError(f"{out} already holds results; pass resume=True (--resume) to "
                             f"skip the ids it has, or remove it to start over")
    batch = batch_id or (batch_id_for(out) if out is not None else f"adhoc-{time.time_ns()}")
    skipped = sum(item.id in done_ids for item in todo)
    todo = [item for item in todo if item.id not in done_ids]
    progress = BatchProgress(total=len(todo), skipped=skipped)
    started = time.perf_counter()
    results: list[ItemResult] = []

    def report(**changes: Any) -> None:
        nonlocal progress
        progress = replace(progress, elapsed=time.perf_counter() - started, **changes)
        if on_progress is not None:
            on_progress(progress)

    sink = _open_sink(out) if out is not None else None
    gate = asyncio.Semaphore(concurrency)

    async def one(item: BatchItem) -> None:
        async with gate:
            report(running=progress.running + 1, last=None)
            try:
                handle = await start_run(client, list(item.turns), task_queue=task_queue,
                                         overrides=overrides, id=workflow_id(batch, item.id),
                                         ask=ask)
                result = item_result(item, await handle.result())
            except WorkflowFailureError as e:
                result = ItemResult(item.id, False, "", f"WorkflowFailure: {e.cause or e}",
                                    None, Usage(), CLEAN, 0, 0, 0, 0, 0.0, item.meta)
            except RPCError as e:
                raise BatchError(f"the Temporal server failed while {item.id!r} ran: {e}; "
                                 f"the runs go on: submit the batch again with --resume "
                                 f"to collect them") from None
            results.append(result)
            if sink is not None:
                line = json.dumps(result.to_dict(), ensure_ascii=False, default=str) + "\n"
                try:
                    sink.write(line)
                    sink.flush()
                except OSError as e:
                    raise BatchError(f"cannot write the result of {result.id!r} to {out}: "
                                     f"{e}") from None
            report(running=progress.running - 1, ok=progress.ok + result.ok,
                   failed=progress.failed + (not result.ok),
                   usage=progress.usage + result.usage, last=result)

    tasks = [asyncio.create_task(one(item)) for item in todo]
    try:
        report()
        await asyncio.gather(*tasks)
        report(state="finished", last=None)
    except asyncio.CancelledError:
        await _stop(tasks)
        report(state="interrupted", running=0, last=None)
        raise
    except BatchError:
        await _stop(tasks)
        raise
    finally:
        if sink is not None:
            sink.close()
    return results


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
