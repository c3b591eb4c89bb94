"""``Session``: one stored conversation, written as it happens."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether import events as ev
from tether.conversation import Conversation, calls_from_dict, calls_to_dict
from tether.events import Event, event_to_dict
from tether.messages import Message, ToolResult, message_from_dict, message_to_dict
from tether.run.pending import PendingState
from tether.store.base import (
    SessionInfo,
    SessionNotFound,
    SessionRecord,
    SessionStore,
    new_session_id,
)
from tether.store.default import open_store
from tether.trust import CLEAN, Taint


class Session:
    """One stored conversation. Pass it to ``agent.run(prompt, session=...)``,
    ``agent.stream(...)`` or ``agent.resume(session, decisions)``.

    ``conversation()`` is the live Conversation (the same object on every call): each
    message appended to it is written at once. ``record(event)`` is called by the agent for
    every event of a run given this session; ``listeners`` see them too (a UI rendering a
    resumed run). ``run_ids`` makes the id of each run it records (a durable workflow's
    must be the same when it replays).
    """

    def __init__(self, store: SessionStore, record: SessionRecord, *,
                 run_ids: Callable[[], str] | None = None) -> None:
        self.store = store
        self._record = record
        self._conversation: Conversation | None = None
        self._run_id: str | None = None
        self._run_ids = run_ids or (lambda: uuid.uuid4().hex[:12])
        self._taint = record.taint
        self.listeners: list[Callable[[Event], None]] = []

    # --- opening ----------------------------------------------------------------------------

    @classmethod
    def create(cls, store: SessionStore | None = None, *, provider: str = "", model: str = "",
               workspace: str | Path = "", title: str = "", id: str | None = None,
               batch: str = "", batch_item: str = "") -> Session:
        """A new, empty session (``id`` defaults to 12 random hex digits). ``batch`` and
        ``batch_item`` tag a batch item's session (``tether logs --batch ID``)."""
        store = store if store is not None else open_store()
        now = time.time()
        where = str(Path(workspace).resolve()) if str(workspace) else ""
        info = SessionInfo(id or new_session_id(), now, now, provider, model, where,
                           " ".join(title.split())[:200], batch=batch, batch_item=batch_item)
        store.create_session(info)
        return cls(store, SessionRecord(info, [], CLEAN))

    @classmethod
    def load(cls, id: str, store: SessionStore | None = None) -> Session:
        """The session as stored; raises ``SessionNotFound``."""
        store = store if store is not None else open_store()
        return cls(store, store.load(id))

    @classmethod
    def open(cls, id: str, store: SessionStore | None = None, **meta: Any) -> Session:
        """Load session ``id``, or create it with that id and ``meta``."""
        store = store if store is not None else open_store()
        try:
            return cls.load(id, store)
        except SessionNotFound:
            return cls.create(store, id=id, **meta)

    # --- what it holds ----------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._record.info.id

    @property
    def info(self) -> SessionInfo:
        return self._record.info

    @property
    def taint(self) -> Taint:
        if self._conversation is not None:
            return self._conversation.taint | self._taint
        return self._taint

    @property
    def messages(self) -> list[Message]:
        """The messages (as stored when loaded, live once ``conversation()`` was called)."""
        if self._conversation is not None:
            return list(self._conversation.messages)
        return [message_from_dict(m) for m in self._record.messages]

    @property
    def outcomes(self) -> list[dict[str, Any]]:
        """``RunResult.to_dict()`` of each run, oldest first (as loaded)."""
        return list(self._record.outcomes)

    @property
    def pending(self) -> PendingState | None:
        """The approvals the last run paused on, or None."""
        if self._record.pending is None:
            return None
        conversation = self.conversation()
        return PendingState(tuple(conversation.pending), conversation)

    def events(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Stored events (``event_to_dict`` values with their ``run_id``), oldest first."""
        return self.store.events(self.id, run_id)

    # --- the live conversation ----------------------------------------------------------------

    def conversation(self) -> Conversation:
        """The conversation to continue, with its taint (never cleaner than any record of
        it). Calls a killed process left without results, and not paused for approval, get
        a result saying so, so the conversation is valid to continue."""
        if self._conversation is not None:
            return self._conversation
        conv = Conversation([message_from_dict(m) for m in self._record.messages],
                            self._record.taint, set(self._record.approvals))
        if self._record.pending is not None:
            conv.pending = list(calls_from_dict(self._record.pending, conv.unanswered_calls))
        # A function, not the bound method: copy.deepcopy (dataclasses.asdict of a RunResult)
        # keeps a function as it is, but would copy the session, store and locks behind a
        # bound method, and fail.
        conv.on_append = lambda message, taint: self._on_append(message, taint)
        self._conversation = conv
        if conv.unanswered_calls and self._record.pending is None:
            conv.append(Message("tool", tuple(
                ToolResult(c.id, c.name, "Interrupted: the process running this call stopped "
                           "before its result was recorded. It may or may not have run; check "
                           "before calling it again.", True, "trusted")
                for c in conv.unanswered_calls)))
        return conv

    def _on_append(self, message: Message, taint: Taint) -> None:
        assert self._conversation is not None
        seq = len(self._conversation.messages) - 1
        self.store.append_message(self.id, seq, message_to_dict(message), taint)

    def record(self, event: Event) -> None:
        """Persist one event of a run on this session (the agent calls this)."""
        for listener in self.listeners:
            listener(event)
        top = not event.path
        if isinstance(event, ev.RunStarted) and top:
            self._run_id = self._run_ids()
        run_id = self._run_id or "-"
        if isinstance(event, ev.TextDelta | ev.ReasoningDelta):
            return  # the ModelResponded that follows holds the whole text
        if isinstance(event, ev.ToolProgress):
            return  # for the person watching; the ToolFinished that follows is the record
        if isinstance(event, ev.TaintChanged) and top:
            self.store.record_taint(self.id, event.after, event.cause)
            self._taint = self._taint | event.after
        if isinstance(event, ev.RunFinished) and top:
            result = event.result
            pending = calls_to_dict(result.pending) if str(result.stop_cause) == "paused" \
                else None
            self.store.record_outcome(self.id, run_id, result.to_dict(), pending)
            self._record = dataclasses.replace(
                self._record, pending=pending, outcomes=[*self._record.outcomes, result.to_dict()])
            self._run_id = None
            return
        if isinstance(event, ev.ApprovalDecided) and top and event.verdict == "session" \
                and self._conversation is not None:
            self.store.record_approvals(self.id, sorted(self._conversation.session_approvals))
        self.store.append_event(self.id, run_id, event_to_dict(event))

