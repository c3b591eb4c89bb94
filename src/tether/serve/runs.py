"""The server's runs: one at a time per session, several at once across sessions.

A run is a task of its own that writes its AG-UI frames to a queue the request streams
from: a page that closes mid-run does not cut the run short (it pauses, answers or fails,
and the session stores it). Approvals are deferred (``WebApprover``): a call that needs a
person ends the run paused, stored with the session as a paused CLI run is, so a restart
loses nothing; the next input decides it. Each run is driven as its own host
(``tether.serve.asking.RunAs``), so an MCP server's request for input during one of its
calls reaches that run's stream only, as a ``tether.elicitation`` event.
``close`` interrupts every run in flight (each ends ``interrupted``) and waits for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ag_ui.core import RunAgentInput

from tether import events as ev
from tether.agent import Agent
from tether.approval import Decision
from tether.conversation import PendingCall
from tether.errors import TetherError
from tether.result import RunResult, run_finished
from tether.run.loop import resume_events, run_events
from tether.run.pending import bind_decisions, paused_calls
from tether.serve import agui
from tether.serve.asking import Elicitations, RunAs, Watcher, WebApprover
from tether.serve.reasons import approval_view
from tether.store.base import SessionNotFound, SessionStore
from tether.store.session import Session

# The end of a run's frames.
END = None


class Busy(TetherError):
    """The session is running a run already (409)."""


class Closing(TetherError):
    """The server is stopping (503)."""


@dataclass
class Host:
    """What the server runs with: the agent (each run drives it with an approver of its own:
    ``tether.serve.asking``), the session store, the workspace, the requests for input
    waiting for a person, and what a new session is created with (``meta``: provider,
    model, workspace)."""

    agent: Agent
    store: SessionStore
    workspace: Path
    elicitations: Elicitations
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Asked:
    """A run to start: its session, and either the user's new words or the decisions."""

    session: Session
    text: str | None = None
    decisions: dict[PendingCall, Decision] | None = None


class Runs:
    """The runs in flight: at most one per session, each a task of its own."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.busy: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.interrupts: set[asyncio.Event] = set()
        self.closing = False

    def start(self, given: RunAgentInput) -> Watcher:
        """Start the run ``given`` asks for; its frames come on the watcher's queue (``END``
        last). Raises ``Busy``, ``Closing`` or ``agui.InputError`` before anything runs."""
        if self.closing:
            raise Closing("the server is stopping")
        session_id = given.thread_id
        if session_id in self.busy:
            raise Busy(f"session {session_id} is running a run already: wait for it to "
                       f"finish (one run at a time per session)")
        self.busy.add(session_id)
        try:
            asked = self._asked(given)
        except BaseException:
            self.busy.discard(session_id)
            raise
        watcher = Watcher(asyncio.Queue())
        task = asyncio.create_task(self._drive(given, asked, watcher))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return watcher

    def _asked(self, given: RunAgentInput) -> _Asked:
        if given.resume:
            session = self.load(given.thread_id)
            pending = session.pending
            if pending is None:
                raise agui.InputError(f"session {session.id} waits on no decision")
            cacheable = {name: tool.cache_approval for name, tool in
                         self.host.agent.tools.items()}
            return _Asked(session, decisions=agui.decisions_of(
                given, list(pending.calls), cacheable))
        text = agui.new_user_text(given)
        if text is None:
            raise agui.InputError("the input's last message is not a user message, and it "
                                  "resumes nothing: nothing to run")
        session = Session.open(given.thread_id, self.host.store,
                               **{**self.host.meta, "title": text})
        pending = session.pending
        if pending is not None:
            raise Busy(f"session {session.id} is paused waiting for approval of "
                       f"{', '.join(repr(c.call_id[:80]) for c in pending.calls)}: decide "
                       f"first")
        return _Asked(session, text=text)

    def load(self, session_id: str) -> Session:
        try:
            return Session.load(session_id, self.host.store)
        except SessionNotFound:
            raise agui.InputError(f"no session {session_id}") from None

    async def _drive(self, given: RunAgentInput, asked: _Asked, watcher: Watcher) -> None:
        translator = agui.Translator(given.thread_id, given.run_id)
        interrupt = asyncio.Event()
        self.interrupts.add(interrupt)
        # This run's own host: a request for input during its calls reaches its stream only.
        host = RunAs(self.host.agent, WebApprover(self.host.elicitations, watcher))
        try:
            for event in translator.started():
                watcher.send(event)
            result = await self._events(host, asked, interrupt, translator, watcher.send)
            interrupts = [agui.interrupt_of(c, self.view(asked.session, c))
                          for c in result.pending] if str(result.stop_cause) == "paused" \
                else []
            for event in translator.finished(result, interrupts):
                watcher.send(event)
        except Exception as e:  # the stream still ends with an event saying so
            watcher.frames.put_nowait(agui.error_frame(
                f"the run failed: {type(e).__name__}: {e}", type(e).__name__))
        finally:
            self.interrupts.discard(interrupt)
            self.busy.discard(given.thread_id)
            watcher.frames.put_nowait(END)

    async def _events(self, host: RunAs, asked: _Asked, interrupt: asyncio.Event,
                      translator: agui.Translator, put: Callable[[Any], None]) -> RunResult:
        session = asked.session
        if asked.decisions is not None:
            conversation = session.conversation()
            bound = bind_decisions(paused_calls(conversation), asked.decisions)
            events: AsyncIterator[ev.Event] = resume_events(
                host, conversation, bound, session=session, interrupt=interrupt)
        else:
            assert asked.text is not None
            events = run_events(host, asked.text, session=session, interrupt=interrupt)
        result: RunResult | None = None
        async with contextlib.aclosing(events) as stream:  # type: ignore[type-var]
            async for event in stream:
                for out in translator(event):
                    put(out)
                result = run_finished(event) or result
        if result is None:
            raise TetherError("the run ended without a result")
        return result

    def view(self, session: Session, call: PendingCall) -> dict[str, Any]:
        agent = self.host.agent
        return approval_view(call, session.conversation(), agent.tools.get(call.tool),
                             workspace=self.host.workspace,
                             system_prompt=agent.settings.system_prompt)

    def interrupt_all(self) -> None:
        """Stop taking runs, and interrupt every run in flight."""
        self.closing = True
        for interrupt in self.interrupts:
            interrupt.set()

    async def close(self) -> None:
        """``interrupt_all``, then wait for the runs to end (each stored as interrupted)."""
        self.interrupt_all()
        if self.tasks:
            await asyncio.wait(set(self.tasks))
