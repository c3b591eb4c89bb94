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

With ``session_for`` each item is logged as a batch item in process is: its workflow
returns its session's writes (``tether.store.journal``), and when its outcome arrives
``session_for(item)`` makes its session here and they are replayed into it; the result
line names it (``session_id``).
"""

from __future__ import annotations

import hashlib
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
    drive_batch,
    plan_batch,
)
from tether.messages import Usage, usage_from_dict
from tether.store.base import StoreError
from tether.store.journal import checked
from tether.store.session import Session
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


def item_result(item: BatchItem, outcome: Mapping[str, Any],
                session_id: str | None = None) -> ItemResult:
    """An item's result line from its workflow's outcome (``session_id``: where it was
    logged)."""
    error = outcome.get("error")
    if error is not None:
        error = f"{outcome.get('error_type') or 'Error'}: {error}"
    stop = outcome.get("stop_cause")
    return ItemResult(item.id, error is None and stop == "completed", str(outcome["text"]), error,
                      stop, usage_from_dict(outcome["usage"]), Taint.from_dict(outcome["taint"]),
                      int(outcome["blocked_sends"]), int(outcome["refused"]),
                      len(outcome["tool_calls"]), int(outcome["turns"]),
                      float(outcome.get("elapsed") or 0.0), item.meta, session_id)


def logged(item: BatchItem, outcome: Mapping[str, Any],
           session_for: Callable[[BatchItem], Session] | None) -> str | None:
    """The id of the session ``session_for`` makes for the item, its run's log replayed
    into it; None when it is not logged (no ``session_for``, or a worker of an older
    tether returned no log)."""
    if session_for is None or "log" not in outcome:
        return None
    entries = checked(outcome["log"])  # a log that is not one makes no session
    session = session_for(item)
    entries.into(session.store, session.id)
    return session.id


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
    session_for: Callable[[BatchItem], Session] | None = None,
) -> list[ItemResult]:
    """Run every item as a workflow, at most ``concurrency`` waited on at once (the
    workers decide how many really run); returns the results in the order they finished.

    As ``tether.batch.run_batch``: ``limit``, ``resume``, ``out`` (JSONL, appended as each
    item completes) and ``on_progress`` mean the same. ``ask=False`` (the default, as for
    an unattended batch) refuses calls that need approval; ``ask=True`` lets them wait for
    a decision by signal (``tether approvals``). Cancelling stops waiting, not the runs:
    they go on, and a batch submitted again with the same id picks up their results.
    ``session_for`` logs each item to a session of its own, as in process (made when the
    item's outcome arrives).
    """
    require()
    from temporalio.client import WorkflowFailureError
    from temporalio.service import RPCError

    todo, skipped = plan_batch(items, concurrency=concurrency, limit=limit, out=out,
                               resume=resume)
    batch = batch_id or (batch_id_for(out) if out is not None else f"adhoc-{time.time_ns()}")

    async def one(item: BatchItem) -> ItemResult:
        try:
            handle = await start_run(client, list(item.turns), task_queue=task_queue,
                                     overrides=overrides, id=workflow_id(batch, item.id),
                                     ask=ask, log=session_for is not None)
            outcome = await handle.result()
        except WorkflowFailureError as e:
            return ItemResult(item.id, False, "", f"WorkflowFailure: {e.cause or e}", None,
                              Usage(), CLEAN, 0, 0, 0, 0, 0.0, item.meta)
        except RPCError as e:
            raise BatchError(f"the Temporal server failed while {item.id!r} ran: {e}; the "
                             f"runs go on: submit the batch again with --resume to collect "
                             f"them") from None
        try:
            return item_result(item, outcome, logged(item, outcome, session_for))
        except StoreError as e:
            # As in process, where a session that cannot be written fails its item: the run
            # is kept, and a resumed batch (its line removed) reads and logs it again.
            failed = item_result(item, outcome)
            return replace(failed, ok=False, error=f"the item ran but was not logged: "
                                                   f"{type(e).__name__}: {e}")

    return await drive_batch(todo, one, skipped=skipped, concurrency=concurrency, out=out,
                             on_progress=on_progress)
