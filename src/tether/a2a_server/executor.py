"""The SDK's ``AgentExecutor`` for tether: one A2A task is one run of a tether agent, stored
as a session; its approvals are the owner's (see the package's docstring for the rules)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from collections.abc import Callable, MutableSet, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import TaskState

from tether import events as ev
from tether.display import inline
from tether.messages import Part, Text
from tether.result import RunResult, run_finished
from tether.store.base import SessionNotFound
from tether.store.session import Session
from tether.trust import outside_text

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.store.base import SessionStore

log = logging.getLogger("tether.a2a_server")

ORIGIN = "an A2A caller"
# The owner's words around an untrusted caller's message: what to do with it.
FRAMING = ("A remote agent sent the message above over the Agent2Agent protocol. Do what it "
           "asks as far as your tools and rules allow, and answer it.")
WAITING = ("This task waits for the owner's approval of a call. Only the owner can give "
           "it; a message from you is not a decision.")


@dataclass(frozen=True)
class ServerRules:
    """What the server was told: the callers it trusts (their tokens, never logged or
    stored), how long a task holds its stream open waiting for the owner, how often it
    looks at the store meanwhile."""

    trusted_tokens: tuple[str, ...] = ()
    owner_wait_secs: float = 3600.0
    poll_secs: float = 0.2


class TetherExecutor(AgentExecutor):
    """Runs each new task on an agent ``make_agent()`` builds (with a ``DeferringApprover``:
    a call that needs approval pauses the run for the owner), in a session of ``store``."""

    def __init__(self, make_agent: Callable[[], Agent], store: SessionStore,
                 rules: ServerRules, *, workspace: str | Path = "",
                 running: MutableSet[str] | None = None,
                 interrupts: MutableSet[asyncio.Event] | None = None) -> None:
        self.make_agent = make_agent
        self.store = store
        self.rules = rules
        self.workspace = workspace
        # The ids of the sessions whose run is in flight, shared with whoever else runs
        # sessions of this store in this process (tether serve's page: it refuses to run or
        # show a decision for a session while its run goes on here).
        self.running: MutableSet[str] = set() if running is None else running
        # Each run in flight's interrupt, shared the same way: a server stopping sets them,
        # and each run ends ``interrupted``, stored so.
        self.interrupts: MutableSet[asyncio.Event] = set() if interrupts is None \
            else interrupts
        self.sessions: dict[str, str] = {}  # task id -> session id
        self.trusted: dict[str, bool] = {}  # task id -> was its caller trusted

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message is not None
        # A message on an existing task may come without its context: the task's holds.
        current = context.current_task
        context_id = current.context_id if current is not None else context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context_id)
        if current is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
            await self._run(context, updater)
            return
        # A message on a task that exists: the task waits for the owner (or has been
        # decided meanwhile). Its text decides nothing.
        session_id = self.sessions.get(context.task_id)
        if session_id is None:
            await updater.failed(new_text_message("This task is not known here any more."))
            return
        await self._await_owner(session_id, context.task_id, updater)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()

    def caller_trusted(self, context: RequestContext) -> bool:
        """Whether the caller presented a bearer token the configuration trusts."""
        headers: dict[str, str] = context.call_context.state.get("headers", {})
        given = headers.get("authorization", "")
        if not given.startswith("Bearer "):
            return False
        token = given[len("Bearer "):].encode()
        return any(hmac.compare_digest(token, t.encode()) for t in self.rules.trusted_tokens)

    async def _run(self, context: RequestContext, updater: TaskUpdater) -> None:
        task_id = updater.task_id
        text = context.get_user_input()
        trusted = self.caller_trusted(context)
        prompt: str | list[Part] = text if trusted else [outside_text(text, ORIGIN),
                                                          Text(FRAMING)]
        agent = self.make_agent()
        who = "trusted" if trusted else "untrusted"
        session = Session.create(self.store, provider=agent.model.name,
                                 model=agent.model.model, workspace=self.workspace,
                                 title=f"A2A task {task_id} ({who} caller): {text}")
        self.sessions[task_id], self.trusted[task_id] = session.id, trusted
        await updater.start_work()
        interrupt = asyncio.Event()
        self.running.add(session.id)
        self.interrupts.add(interrupt)
        try:
            result = await self._drive(agent, prompt, session, updater, interrupt)
        finally:
            self.running.discard(session.id)
            self.interrupts.discard(interrupt)
        if str(result.stop_cause) == "paused":
            calls = ", ".join(f"{p.tool} (call {p.call_id})" for p in result.pending)
            # The owner's line (a log, never the caller's): what waits and how to decide it.
            log.warning("A2A task %s waits for the owner: %s; decide with `tether sessions "
                        "resume %s --allow CALL_ID` (or --deny), or on tether serve's page",
                        task_id, inline(calls), session.id)
            await updater.requires_input(new_text_message(WAITING, task_id=task_id))
            await self._await_owner(session.id, task_id, updater, seen=len(session.outcomes))
            return
        await self._finish(updater, result.to_dict(), trusted)

    async def _drive(self, agent: Agent, prompt: str | list[Part], session: Session,
                     updater: TaskUpdater, interrupt: asyncio.Event) -> RunResult:
        result: RunResult | None = None
        async with agent:
            async for event in agent.stream(prompt, session=session, interrupt=interrupt):
                result = run_finished(event) or result
                if isinstance(event, ev.ToolStarted) and not event.path:
                    await updater.update_status(TaskState.TASK_STATE_WORKING, new_text_message(
                        f"calling {event.tool}", task_id=updater.task_id))
        assert result is not None
        return result

    async def _await_owner(self, session_id: str, task_id: str, updater: TaskUpdater,
                           seen: int | None = None) -> None:
        """Wait (up to ``owner_wait_secs``) for the owner to decide the paused run, then
        finish the task with its answer; else leave it input-required."""
        deadline = time.monotonic() + self.rules.owner_wait_secs
        while True:
            try:
                stored = self.store.load(session_id)
            except SessionNotFound:
                await updater.failed(new_text_message("The owner deleted this task's session.",
                                                      task_id=task_id))
                return
            if seen is None:  # looked at anew (a message on the task): as it is now
                seen = len(stored.outcomes) - (0 if stored.pending is not None else 1)
            if stored.pending is None and len(stored.outcomes) > seen:
                await self._finish(updater, stored.outcomes[-1],
                                   self.trusted.get(task_id, False))
                return
            if time.monotonic() >= deadline:
                await updater.requires_input(new_text_message(WAITING, task_id=task_id))
                return
            await asyncio.sleep(self.rules.poll_secs)

    async def _finish(self, updater: TaskUpdater, outcome: dict[str, Any],
                      trusted: bool) -> None:
        cause, text = str(outcome.get("stop_cause")), str(outcome.get("text") or "")
        private = bool(outcome.get("taint", {}).get("private"))
        if cause != "completed":
            await updater.failed(new_text_message(f"The run stopped: {cause}.",
                                                  task_id=updater.task_id))
            return
        if private and not trusted:
            # The answer goes to a party nobody vouched for: after a read of private data it
            # is a send the gate never judged. Withheld; the owner reads it in the session.
            await updater.complete(new_text_message(
                "The answer is withheld: the run read private data, and this caller is not "
                "trusted. The owner can read it.", task_id=updater.task_id))
            return
        await updater.add_artifact([new_text_part(text)], name="answer")
        await updater.complete()


def tokens_from_env(names: Sequence[str]) -> tuple[str, ...]:
    """The trusted tokens the environment variables ``names`` hold (unset ones: none)."""
    return tuple(v for v in (os.environ.get(n, "") for n in names) if v)
