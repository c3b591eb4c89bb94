"""The commands of the Temporal engine: ``tether worker``, ``tether approvals``, and what
``--engine temporal`` does for ``tether run`` and ``tether batch``.

Importing this module imports no ``temporalio``: each command imports it when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

from tether.errors import ConfigError

ENGINES = ("local", "temporal")


def add_cli(sub: Any) -> None:
    """Register ``tether worker`` and ``tether approvals``."""
    worker = sub.add_parser("worker", help="serve durable runs (Temporal) with this "
                                           "workspace's providers and tools until Ctrl-C")
    worker.add_argument("--task-queue", help="the task queue to serve ([temporal] task_queue)")
    worker.add_argument("--identity", help="how this worker is named in Temporal")
    worker.set_defaults(handler=cmd_worker)

    approvals = sub.add_parser("approvals", help="list or decide the calls a durable run "
                                                 "waits on")
    approvals.add_argument("workflow_id", help="the run's workflow id (tether run prints it)")
    choice = approvals.add_mutually_exclusive_group()
    choice.add_argument("--allow", type=int, metavar="N", help="allow pending call #N once")
    choice.add_argument("--allow-session", type=int, metavar="N",
                        help="allow pending call #N's tool for the rest of the run")
    choice.add_argument("--deny", type=int, metavar="N", help="deny pending call #N")
    approvals.add_argument("--reason", help="why (shown to the model on a denial)")
    approvals.set_defaults(handler=cmd_approvals)


def add_engine_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINES, default="local",
                   help="where the run happens: in this process (local) or as durable "
                        "Temporal workflows served by `tether worker` (temporal)")


def _load(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    from tether.cli import _overrides
    from tether.config import load_config

    overrides = _overrides(args)
    return load_config(args.workspace, overrides), overrides


# --- tether worker ----------------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    from . import require
    from .worker import run_until_signalled

    require()
    return run_until_signalled(args.workspace, args.task_queue, args.identity)


# --- tether run --engine temporal -------------------------------------------------------------


def run_on_temporal(args: argparse.Namespace) -> int:
    """``tether run --engine temporal``: start the run, decide its approvals here when a
    person is at the terminal, print its answer."""
    from . import require

    require()
    for flag in ("session", "output_schema", "local", "tool_files"):
        if getattr(args, flag, None):
            name = "--" + flag.replace("_", "-").replace("tool-files", "tools")
            raise ConfigError(f"{name} is not available with --engine temporal: a durable "
                              f"run keeps its own state, and the worker's configuration names "
                              f"its providers and tools")
    cfg, overrides = _load(args)
    return asyncio.run(_run(args, cfg, overrides))


async def _run(args: argparse.Namespace, cfg: Any, overrides: dict[str, Any]) -> int:
    from tether.cli import graceful_interrupt

    from .client import connect, start_run

    client = await connect(cfg.temporal)
    handle = await start_run(client, args.prompt, task_queue=cfg.temporal.task_queue,
                             overrides=overrides)
    _say(f"durable run {handle.id} (Ctrl-C stops it; Ctrl-C twice leaves it running)")
    watcher = asyncio.create_task(watch_approvals(client, handle.id, sys.stdin.isatty()))
    try:
        with graceful_interrupt() as interrupt:
            stopper = asyncio.create_task(_interrupt_on(interrupt, handle))
            try:
                outcome: dict[str, Any] = await handle.result()
            finally:
                stopper.cancel()
    except KeyboardInterrupt:
        _say(f"left running: {handle.id}")
        raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(outcome, indent=2))
    else:
        from tether.display import literal

        print(literal(outcome["text"]))
    if outcome.get("error"):
        _say(f"{outcome.get('error_type')}: {outcome['error']}")
    return exit_code(outcome)


async def _interrupt_on(interrupt: asyncio.Event, handle: Any) -> None:
    await interrupt.wait()
    await handle.signal("interrupt")


def exit_code(outcome: dict[str, Any]) -> int:
    """``tether run``'s exit codes, from an outcome."""
    from tether.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NO_ANSWER, EXIT_OK, EXIT_REFUSED

    if outcome.get("error"):
        return EXIT_ERROR
    stop = outcome.get("stop_cause")
    if stop == "completed":
        return EXIT_OK
    if outcome.get("refused"):
        return EXIT_REFUSED
    return EXIT_INTERRUPTED if stop == "interrupted" else EXIT_NO_ANSWER


async def watch_approvals(client: Any, workflow_id: str, ask: bool,
                          approver: Any = None) -> None:
    """Follow a run and its sub-agents: each call that comes to wait is put to
    ``approver`` (a console one by default) when ``ask``, else announced once with the
    command that decides it."""
    from .client import decide, wait_pending

    if ask and approver is None:
        from tether.approval import ConsoleApprover

        approver = ConsoleApprover()
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(workflow_id)
    followed: dict[str, asyncio.Task[None]] = {}
    told: set[tuple[Any, Any]] = set()
    seq = -1
    try:
        while True:
            try:
                state = await wait_pending(handle, seq)
            except (RPCError, WorkflowUpdateFailedError):  # it ended before we asked
                return
            seq = state["seq"]
            if state["finished"]:
                return
            for child in state["children"]:
                if child not in followed:
                    followed[child] = asyncio.create_task(
                        watch_approvals(client, child, ask, approver))
            for call in state["pending"]:
                key = (call["position"], call["call_id"])
                if key in told:
                    continue
                told.add(key)
                if ask:
                    from .approvals import request_of

                    await decide(handle, call, await approver.approve(request_of(call)))
                else:
                    _say(f"waiting for approval: #{call['position']} {call['tool']} in "
                         f"{workflow_id}; decide with: tether approvals {workflow_id} "
                         f"--allow {call['position']} (or --deny)")
    finally:
        for task in followed.values():
            task.cancel()


def _say(message: str) -> None:
    from tether.display import literal

    print(f"tether: {literal(message)}", file=sys.stderr, flush=True)


# --- tether batch --engine temporal -----------------------------------------------------------


async def batch_on_temporal(args: argparse.Namespace, items: list[Any],
                            view: Callable[[Any], None]) -> list[Any]:
    """``tether batch --engine temporal``: the items as durable runs."""
    from . import require
    from .batch import run_batch
    from .client import connect

    require()
    cfg, overrides = _load(args)
    client = await connect(cfg.temporal)
    return await run_batch(client, items, task_queue=cfg.temporal.task_queue, out=args.out,
                           resume=args.resume, concurrency=args.concurrency,
                           limit=args.limit, batch_id=getattr(args, "batch_id", None),
                           overrides=overrides, ask=bool(getattr(args, "wait_for_approvals",
                                                                 False)),
                           on_progress=view)


def add_batch_flags(p: argparse.ArgumentParser) -> None:
    add_engine_flag(p)
    p.add_argument("--batch-id", help="--engine temporal: the batch's id (its items' workflow "
                                      "ids derive from it); default: from OUT's path")
    p.add_argument("--wait-for-approvals", action="store_true",
                   help="--engine temporal: calls that need approval wait for a decision "
                        "(tether approvals) instead of being refused")


# --- tether approvals -------------------------------------------------------------------------


def cmd_approvals(args: argparse.Namespace) -> int:
    from . import require

    require()
    cfg, _ = _load(args)
    return asyncio.run(_approvals(args, cfg))


async def _approvals(args: argparse.Namespace, cfg: Any) -> int:
    from tether.approval import Decision
    from tether.display import json_dumps, literal

    from .client import connect, decide, pending, pending_everywhere, wait_pending

    client = await connect(cfg.temporal)
    position = next((p for p in (args.allow, args.allow_session, args.deny) if p is not None),
                    None)
    if position is None:
        waiting = await pending_everywhere(client, args.workflow_id)
        if not waiting:
            print("nothing waits for a decision")
        for workflow_id, call in waiting:
            print(literal(f"#{call['position']} {call.get('display_name', call['tool'])} "
                          f"({call['tool']}, call {call['call_id']}) in {workflow_id}: "
                          f"{call.get('explanation', '')}"))
            print(literal("  arguments: " + json_dumps(call["arguments"])))
        return 0
    handle = client.get_workflow_handle(args.workflow_id)
    state = await pending(handle)
    chosen = next((c for c in state["pending"] if c["position"] == position), None)
    if chosen is None:
        shown = ", ".join(f"#{c['position']} {c['tool']}" for c in state["pending"]) or "none"
        raise ConfigError(f"no call #{position} waits in {args.workflow_id} (waiting: "
                          f"{shown}; a sub-agent's calls wait in its own workflow: list them "
                          f"with `tether approvals {args.workflow_id}`)")
    if args.deny is not None:
        decision = Decision.deny(args.reason or "denied by the user")
    elif args.allow_session is not None:
        decision = Decision.allow_for_session()
    else:
        decision = Decision.allow()
    await decide(handle, chosen, decision)
    # The workflow says whether the signal bound (a signal has no answer of its own).
    after = await wait_pending(handle, state["seq"])
    if len(after["rejected"]) > len(state["rejected"]):
        raise ConfigError(f"the run refused the decision: {after['rejected'][-1]}")
    print(json.dumps({"workflow_id": args.workflow_id, "position": position,
                      "decision": decision.to_dict()}))
    return 0
