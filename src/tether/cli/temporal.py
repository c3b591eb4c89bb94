"""The ``--engine temporal`` half of ``tether run`` and ``tether batch``: a run or a batch
as durable Temporal workflows, served by ``tether worker`` (docs/scale.md).

Importing this module imports no ``temporalio``: each command imports it when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import Any

from tether.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NO_ANSWER,
    EXIT_OK,
    EXIT_REFUSED,
    graceful_interrupt,
    overrides,
    prompt_parts,
)
from tether.errors import ConfigError

ENGINES = ("local", "temporal")


def add_engine_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINES, default="local",
                   help="where the run happens: in this process (local) or as durable "
                        "Temporal workflows served by `tether worker` (temporal)")


def load(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The configuration the flags select, and the flag values a worker applies to a run
    (it builds the run's providers and tools from its own configuration)."""
    from tether.config.layers import load_config

    given = overrides(args)
    return load_config(args.workspace, given), given


def refuse_in_process_flags(args: argparse.Namespace) -> None:
    """The flags that only mean something in this process are refused with --engine
    temporal: a durable run keeps its own state, and the worker's configuration names its
    providers and tools."""
    names = {"session": "--session", "output_schema": "--output-schema", "local": "--local",
             "tool_files": "--tools", "no_tools": "--no-tools", "only_tools": "-T"}
    for flag, name in names.items():
        if getattr(args, flag, None):
            raise ConfigError(f"{name} is not available with --engine temporal: a durable "
                              f"run keeps its own state, and the worker's configuration names "
                              f"its providers and tools")


# --- tether run --engine temporal -------------------------------------------------------------


def run_on_temporal(args: argparse.Namespace) -> int:
    """``tether run --engine temporal``: start the run, decide its approvals here when a
    person is at the terminal, print its answer."""
    from tether.temporal import require

    require()
    refuse_in_process_flags(args)
    cfg, given = load(args)
    return asyncio.run(_run(args, cfg, given))


async def _run(args: argparse.Namespace, cfg: Any, given: dict[str, Any]) -> int:
    from tether.temporal.client import connect, start_run

    client = await connect(cfg.temporal)
    prompt = prompt_parts(args.prompt, getattr(args, "outside", None),
                          getattr(args, "attached", ()))
    handle = await start_run(client, prompt if isinstance(prompt, str) else [prompt],
                             task_queue=cfg.temporal.task_queue, overrides=given)
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
    return outcome_exit_code(outcome)


async def _interrupt_on(interrupt: asyncio.Event, handle: Any) -> None:
    await interrupt.wait()
    await handle.signal("interrupt")


def outcome_exit_code(outcome: dict[str, Any]) -> int:
    """``tether run``'s exit codes (``common.exit_code``), from a durable run's outcome: a
    refused call makes it 2 even when the model then answered, as in process."""
    if outcome.get("error"):
        return EXIT_ERROR
    stop = outcome.get("stop_cause")
    if stop == "interrupted":
        return EXIT_INTERRUPTED
    if outcome.get("refused") or stop == "paused":
        return EXIT_REFUSED
    return EXIT_OK if stop == "completed" else EXIT_NO_ANSWER


async def watch_approvals(client: Any, workflow_id: str, ask: bool,
                          approver: Any = None) -> None:
    """Follow a run and its sub-agents: each call that comes to wait is put to
    ``approver`` (a console one by default) when ``ask``, else announced once with the
    command that decides it."""
    from tether.temporal.client import decide, wait_pending

    if ask and approver is None:
        from tether.cli.approver import ConsoleApprover

        approver = ConsoleApprover()
    from temporalio.client import (
        WorkflowUpdateFailedError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
    )
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(workflow_id)
    followed: dict[str, asyncio.Task[None]] = {}
    told: set[tuple[Any, Any, Any]] = set()
    seq = -1
    try:
        while True:
            try:
                state = await wait_pending(handle, seq)
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                continue  # a wait of hours outlived one call: ask again
            except (RPCError, WorkflowUpdateFailedError):  # it ended before we asked
                return
            seq = state["seq"]
            if state["finished"]:
                return
            for child in state["children"]:
                if child not in followed:
                    followed[child] = asyncio.create_task(
                        watch_approvals(client, child, ask, approver))
            # The calls of one turn wait together; each is told or asked about once (a
            # later turn may reuse a position and an id: the turn's number tells them apart).
            new = [c for c in state["pending"] if _waiting_key(c) not in told]
            told.update(_waiting_key(c) for c in new)
            if new and ask:
                from tether.approval import TurnApprovalRequest, ask_turn
                from tether.temporal.approvals import request_of

                # One prompt for the turn's calls; a failing prompt denies them (fails closed).
                answers = await ask_turn(approver, TurnApprovalRequest(
                    tuple(request_of(c) for c in new)), None)
                for call, (decision, _) in zip(new, answers, strict=True):
                    await decide(handle, call, decision)
            for call in new if not ask else ():
                _say(f"waiting for approval: #{call['position']} {call['tool']} in "
                     f"{workflow_id}; decide with: tether approvals {workflow_id} "
                     f"--allow {call['position']} (or --deny)")
    finally:
        for task in followed.values():
            task.cancel()


def _waiting_key(call: dict[str, Any]) -> tuple[Any, Any, Any]:
    return call.get("turn"), call["position"], call["call_id"]


def _say(message: str) -> None:
    from tether.display import inline

    # One line each: they name tools, ids and errors a model or a server wrote.
    print(f"tether: {inline(message)}", file=sys.stderr, flush=True)


# --- tether batch --engine temporal -----------------------------------------------------------


async def batch_on_temporal(args: argparse.Namespace, items: list[Any],
                            view: Callable[[Any], None],
                            logged: Callable[[Any], Any] | None = None) -> list[Any]:
    """``tether batch --engine temporal``: the items as durable runs; ``logged(cfg)`` gives
    the function that makes each item's session (``tether batch``'s own), or None."""
    from tether.temporal import require

    require()
    refuse_in_process_flags(args)
    from tether.temporal.batch import run_batch
    from tether.temporal.client import connect

    cfg, given = load(args)
    client = await connect(cfg.temporal)
    session_for = logged(cfg) if logged is not None else None
    return await run_batch(client, items, task_queue=cfg.temporal.task_queue, out=args.out,
                           resume=args.resume, concurrency=args.concurrency,
                           limit=args.limit or None, batch_id=getattr(args, "batch_id", None),
                           overrides=given, ask=bool(getattr(args, "wait_for_approvals", False)),
                           on_progress=view, session_for=session_for)


def add_batch_flags(p: argparse.ArgumentParser) -> None:
    add_engine_flag(p)
    p.add_argument("--batch-id", help="--engine temporal: the batch's id (its items' workflow "
                                      "ids derive from it); default: from OUT's path")
    p.add_argument("--wait-for-approvals", action="store_true",
                   help="--engine temporal: calls that need approval wait for a decision "
                        "(tether approvals) instead of being refused")
