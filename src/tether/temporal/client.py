"""Start durable runs, see what waits for approval, decide it.

::

    client = await connect(load_config(".").temporal)
    handle = await start_run(client, "Tidy the notes folder", task_queue="tether")
    state = await wait_pending(handle)           # returns when a call waits (or the run ends)
    for call in state["pending"]:
        await decide(handle, call, Decision.allow())
    outcome = await handle.result()              # RunResult.to_dict() fields

A decision names the call it answers (its position in the turn, id, tool and exact
arguments, as the ``pending`` query shows it); any other is refused by the workflow and
listed in ``state["rejected"]``. A sub-agent's calls wait in its own child workflow, whose
id is in ``state["children"]``; ``pending_everywhere`` walks them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tether.approval import Decision
from tether.conversation import pending_call_from_dict
from tether.messages import Part, part_to_dict

from . import WORKFLOW, require
from .approvals import signal_payload
from .worker import connect

__all__ = ["connect", "decide", "pending", "pending_everywhere", "run", "start_run",
           "wait_pending"]


async def start_run(client: Any, prompt: str | Sequence[str | Sequence[Part]], *,
                    task_queue: str, overrides: Mapping[str, Any] | None = None,
                    id: str | None = None, ask: bool = True, log: bool = False) -> Any:
    """Start a run (a list of prompts runs them as turns of one conversation; a turn may be
    a sequence of message parts, such as outside text given with the prompt:
    ``[(outside_text(page, "a web page"), Text("Summarize it."))]``); returns its workflow
    handle. With ``id``, a run of that id that is running or completed is the one returned:
    it is never started twice. ``ask=False`` runs with nobody to ask: calls that need
    approval are refused (as in an unattended batch) instead of waiting for a signal.
    ``log=True`` asks for the run's session log in its outcome (``log``: entries for
    ``tether.store.journal.replay``)."""
    require()
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    turns = [prompt] if isinstance(prompt, str) else [
        turn if isinstance(turn, str) else [part_to_dict(p) for p in turn] for turn in prompt]
    workflow_id = id or f"tether-run-{uuid.uuid4().hex}"
    try:
        return await client.start_workflow(
            WORKFLOW, {"prompt": turns, "overrides": dict(overrides or {}),
                       "approvals": "signal" if ask else "refuse",
                       **({"log": True} if log else {})}, id=workflow_id,
            task_queue=task_queue,
            # Running: attach to it. Completed: keep its result. Failed (a worker bug, a
            # termination): a new run may take the id.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY)
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle(workflow_id)


async def run(client: Any, prompt: str | Sequence[str], **kwargs: Any) -> dict[str, Any]:
    """Start a run and wait for its outcome."""
    handle = await start_run(client, prompt, **kwargs)
    outcome: dict[str, Any] = await handle.result()
    return outcome


async def pending(handle: Any) -> dict[str, Any]:
    """The run's state: ``pending`` calls, running ``children``, ``rejected`` signals,
    ``finished``, and ``seq`` (for ``wait_pending``)."""
    state: dict[str, Any] = await handle.query("pending")
    return state


async def wait_pending(handle: Any, after: int = -1) -> dict[str, Any]:
    """The state once it has changed since state ``after`` (its ``seq``; -1: now).
    Cancelling the wait raises ``CancelledError``, as any cancelled await does."""
    from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

    try:
        state: dict[str, Any] = await handle.execute_update("wait_pending", after)
    except WorkflowUpdateRPCTimeoutOrCancelledError as e:
        # The SDK turns a cancelled update call into this error; whoever cancelled the
        # task (a watcher stopped when its run ended) must see the cancellation itself.
        if isinstance(e.__cause__, asyncio.CancelledError):
            raise asyncio.CancelledError() from None
        raise
    return state


async def decide(handle: Any, call: Mapping[str, Any], decision: Decision) -> None:
    """Signal the decision for one pending call (a dict from a ``pending`` state)."""
    await handle.signal("decide", signal_payload(pending_call_from_dict(call), decision))


async def pending_everywhere(client: Any, workflow_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every call waiting in a run and its sub-agents: (workflow id, call) pairs."""
    out: list[tuple[str, dict[str, Any]]] = []
    todo = [workflow_id]
    while todo:
        current = todo.pop(0)
        state = await pending(client.get_workflow_handle(current))
        out.extend((current, call) for call in state["pending"])
        todo.extend(state["children"])
    return out
