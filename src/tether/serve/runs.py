"""The server's runs: one at a time per session, several at once across sessions.

A run is a task of its own that writes its AG-UI frames to a queue the request streams
from: a page that closes mid-run does not cut the run short (it pauses, answers or fails,
and the session stores it). Approvals are deferred (``WebApprover``): a call that needs a
person ends the run paused, stored with the session as a paused CLI run is, so a restart
loses nothing; the next input decides it. An MCP server's request for input
(elicitation) cannot wait for another run: it is sent to every stream open at the time, as
a ``tether.elicitation`` event, and the first answer posted for it is the person's.
``close`` interrupts every run in flight (each ends ``interrupted``) and waits for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ag_ui.core import RunAgentInput

from tether import events as ev
from tether.agent import Agent
from tether.approval import Decision, ElicitationAnswer, ElicitationRequest
from tether.conversation import PendingCall
from tether.errors import TetherError
from tether.result import RunResult, run_finished
from tether.run.loop import resume_events
from tether.run.pending import DeferringApprover, bind_decisions, paused_calls
from tether.serve import agui
from tether.serve.reasons import approval_view
from tether.store.base import SessionNotFound, SessionStore
from tether.store.session import Session

# The end of a run's frames.
END = None


class Busy(TetherError):
    """The session is running a run already (409)."""


class Closing(TetherError):
    """The server is stopping (503)."""


class Elicitations:
    """Requests for input from MCP servers, waiting for a person, and the streams that
    show them."""

    def __init__(self) -> None:
        self.streams: set[asyncio.Queue[str | None]] = set()
        self.waiting: dict[str, tuple[ElicitationRequest, asyncio.Future[ElicitationAnswer]]] \
            = {}

    async def ask(self, request: ElicitationRequest) -> ElicitationAnswer:
        if not self.streams:
            return ElicitationAnswer.decline("no page is open to ask a person")
        key = uuid.uuid4().hex
        answer: asyncio.Future[ElicitationAnswer] = asyncio.get_running_loop().create_future()
        self.waiting[key] = (request, answer)
        self._send(agui.custom("tether.elicitation", elicitation_view(key, request)))
        try:
            return await answer
        finally:
            self.waiting.pop(key, None)
            self._send(agui.custom("tether.elicitation_closed", {"id": key}))

    def _send(self, event: Any) -> None:
        frame = agui.encoded(event)
        for stream in self.streams:
            stream.put_nowait(frame)

    def answer(self, key: str, body: Any) -> None:
        """The person's answer to request ``key``: ``{"action": "accept" | "decline" |
        "cancel", "values": {...}}`` (the gate checks the values against the form)."""
        waiting = self.waiting.get(key)
        if waiting is None or waiting[1].done():
            raise agui.InputError("no request for input waits with that id")
        if not isinstance(body, Mapping) or body.get("action") not in \
                ("accept", "decline", "cancel"):
            raise agui.InputError("an answer is {\"action\": \"accept\" | \"decline\" | "
                                  "\"cancel\", \"values\": {...}}")
        values = body.get("values") or {}
        if not isinstance(values, Mapping):
            raise agui.InputError("values is an object of the form's fields")
        action = body["action"]
        answer = ElicitationAnswer.accept(values) if action == "accept" else \
            ElicitationAnswer.decline() if action == "decline" else ElicitationAnswer.cancel()
        waiting[1].set_result(answer)


def elicitation_view(key: str, request: ElicitationRequest) -> dict[str, Any]:
    """What the page's form shows: who asks (the server, trusted or not), its message,
    the fields, or the URL whole with its host (shown, never opened)."""
    view: dict[str, Any] = {
        "id": key, "server": request.server, "trusted": request.trusted,
        "message": request.message, "mode": request.mode, "warning": request.warning,
        "taint": {"private": request.taint.private, "untrusted": request.taint.untrusted},
        "fields": [{"name": f.name, "kind": f.kind, "title": f.title,
                    "description": f.description, "required": f.required,
                    "default": f.default, "choices": list(f.choices),
                    "choice_titles": list(f.choice_titles)} for f in request.fields],
    }
    if request.url is not None:
        view["url"] = request.url
        view["host"] = urlsplit(request.url).hostname or ""
    return view


class WebApprover(DeferringApprover):
    """Defers every approval (the run pauses; the page decides) and asks the person at the
    page for an MCP server's input."""

    def __init__(self, elicitations: Elicitations) -> None:
        super().__init__()
        self.elicitations = elicitations

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        return await self.elicitations.ask(request)


@dataclass
class Host:
    """What the server runs with: the agent (its approver a ``WebApprover``), the session
    store, the workspace, and what a new session is created with (``meta``: provider,
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
    def __init__(self, host: Host) -> None:
        self.host = host
        self.busy: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.interrupts: set[asyncio.Event] = set()
        self.closing = False

    def start(self, given: RunAgentInput) -> asyncio.Queue[str | None]:
        """Start the run ``given`` asks for; its frames come on the queue (``END`` last).
        Raises ``Busy``, ``Closing`` or ``agui.InputError`` before anything runs."""
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
        frames: asyncio.Queue[str | None] = asyncio.Queue()
        task = asyncio.create_task(self._drive(given, asked, frames))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return frames

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

    async def _drive(self, given: RunAgentInput, asked: _Asked,
                     frames: asyncio.Queue[str | None]) -> None:
        def put(event: Any) -> None:
            frames.put_nowait(agui.encoded(event))

        translator = agui.Translator(given.thread_id, given.run_id)
        interrupt = asyncio.Event()
        self.interrupts.add(interrupt)
        self.host.elicitations.streams.add(frames)
        try:
            for event in translator.started():
                put(event)
            result = await self._events(asked, interrupt, translator, put)
            interrupts = [agui.interrupt_of(c, self.view(asked.session, c))
                          for c in result.pending] if str(result.stop_cause) == "paused" \
                else []
            for event in translator.finished(result, interrupts):
                put(event)
        except Exception as e:  # the stream still ends with an event saying so
            frames.put_nowait(agui.error_frame(f"the run failed: {type(e).__name__}: {e}",
                                               type(e).__name__))
        finally:
            self.host.elicitations.streams.discard(frames)
            self.interrupts.discard(interrupt)
            self.busy.discard(given.thread_id)
            frames.put_nowait(END)

    async def _events(self, asked: _Asked, interrupt: asyncio.Event,
                      translator: agui.Translator, put: Callable[[Any], None]) -> RunResult:
        agent, session = self.host.agent, asked.session
        if asked.decisions is not None:
            conversation = session.conversation()
            bound = bind_decisions(paused_calls(conversation), asked.decisions)
            events: AsyncIterator[ev.Event] = resume_events(
                agent, conversation, bound, session=session, interrupt=interrupt)
        else:
            assert asked.text is not None
            events = agent.stream(asked.text, session=session, interrupt=interrupt)
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
