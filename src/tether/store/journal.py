"""A session written somewhere else: ``Journal`` keeps a ``Session``'s writes as data, and
``replay`` writes them into a real store.

A durable run (``tether.temporal``) is logged this way. Its workflow may do no I/O, so
its ``Session`` writes to a ``Journal``; the entries travel back in the run's outcome, and
the client that started the run replays them into its own store. The session it leaves is
the one the run would have left in process: the same ``Session`` code decided every write
(which events are kept, the taint timeline, each run's outcome).

::

    session, journal = journal_session(lambda: "run-1")
    await agent.run("What is 2+3?", session=session)
    ...                                              # journal.entries cross as JSON
    replay(entries, store, Session.create(store, title="What is 2+3?").id)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether import events as ev
from tether.events import event_to_dict
from tether.messages import message_from_dict, message_to_dict
from tether.store.base import (
    SessionInfo,
    SessionNotFound,
    SessionRecord,
    SessionStore,
    StoreError,
)
from tether.store.session import Session
from tether.trust import CLEAN, Taint

# Under Temporal's default limit on one payload (2 MB), with room for the rest of the
# outcome: a journal past it loses its events first (the conversation is what is read).
LIMIT_BYTES = 1_500_000


class JournalError(StoreError):
    """Journal entries to replay are not what a ``Journal`` writes."""


class Journal:
    """A ``SessionStore`` that writes nothing: each write is kept, in order, as a
    JSON-ready entry of ``entries`` (``["message", seq, message, taint]``, ``["event",
    run_id, event]``, ``["taint", taint, cause]``, ``["outcome", run_id, outcome,
    pending]``, ``["approvals", tools]``). The session itself is made where it is
    replayed."""

    def __init__(self) -> None:
        self.entries: list[list[Any]] = []

    def create_session(self, info: SessionInfo) -> None:
        return None

    def append_message(self, session_id: str, seq: int, message: dict[str, Any],
                       taint: Taint) -> None:
        self.entries.append(["message", seq, message, taint.to_dict()])

    def append_event(self, session_id: str, run_id: str, event: dict[str, Any]) -> None:
        self.entries.append(["event", run_id, event])

    def record_taint(self, session_id: str, taint: Taint, cause: str) -> None:
        self.entries.append(["taint", taint.to_dict(), cause])

    def record_outcome(self, session_id: str, run_id: str, outcome: dict[str, Any],
                       pending: dict[str, Any] | None) -> None:
        self.entries.append(["outcome", run_id, outcome, pending])

    def record_approvals(self, session_id: str, tools: Sequence[str]) -> None:
        self.entries.append(["approvals", list(tools)])

    def load(self, session_id: str) -> SessionRecord:
        raise SessionNotFound(f"a journal holds no session to load ({session_id})")

    def events(self, session_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        return [{**e[2], "run_id": e[1]} for e in self.entries
                if e[0] == "event" and run_id in (None, e[1])]

    def list(self, limit: int = 50, *, text: str | None = None, model: str | None = None,
             batch: str | None = None) -> list[SessionInfo]:
        return []

    def delete(self, session_id: str) -> bool:
        return False

    def close(self) -> None:
        return None


def journal_session(run_ids: Callable[[], str]) -> tuple[Session, Journal]:
    """A new, empty session whose writes go to the journal returned with it; ``run_ids``
    names each run it records."""
    journal = Journal()
    record = SessionRecord(SessionInfo("journal", 0.0, 0.0), [], CLEAN)
    return Session(journal, record, run_ids=run_ids), journal


def bounded(entries: list[list[Any]], limit: int = LIMIT_BYTES) -> list[list[Any]]:
    """The entries, or, when their JSON is over ``limit`` bytes, the entries less their
    events (then less their messages too), with a notice of what was left out."""
    if _size(entries) <= limit:
        return entries
    kept = [e for e in entries if e[0] != "event"]
    what = "its events"
    if _size(kept) > limit:
        kept = [e for e in kept if e[0] != "message"]
        what = "its events and messages"
    notice = ev.Notice("warning", f"the run's log was over {limit} bytes: {what} were left "
                                  f"out (the workflow's history holds them)", "tether")
    return [*kept, ["event", "-", event_to_dict(notice)]]


def _size(entries: list[list[Any]]) -> int:
    return len(json.dumps(entries, separators=(",", ":"), default=str).encode())


def replay(entries: Any, store: SessionStore, session_id: str) -> int:
    """Write journal entries into session ``session_id`` of ``store`` (made, and empty), in
    order; returns how many. Entries that are not a ``Journal``'s raise ``JournalError``
    before anything is written (they came from elsewhere: a workflow's history)."""
    return checked(entries).into(store, session_id)


_Write = Callable[[SessionStore, str], None]


@dataclass(frozen=True, slots=True)
class Checked:
    """Journal entries read and checked, ready to write (``into``)."""

    writes: tuple[_Write, ...]

    def into(self, store: SessionStore, session_id: str) -> int:
        """Write them into session ``session_id`` of ``store``, in order; how many."""
        for write in self.writes:
            write(store, session_id)
        return len(self.writes)


def checked(entries: Any) -> Checked:
    """The entries, checked: ``JournalError`` when they are not a ``Journal``'s (so a
    session need not be made for entries that cannot fill it)."""
    return Checked(tuple(_checked(entry, n)
                         for n, entry in enumerate(_as_list(entries, "the journal"))))


def _checked(entry: Any, n: int) -> _Write:
    where = f"journal entry {n}"
    fields = _as_list(entry, where)
    kind = fields[0] if fields else None
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise JournalError(f"{where}: not a journal entry (kind {str(kind)[:40]!r})")
    try:
        return reader(fields[1:], where)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise JournalError(f"{where} ({kind}): malformed: {type(e).__name__}: "
                           f"{str(e)[:200]}") from None


def _message(f: list[Any], where: str) -> _Write:
    seq, message, taint = f
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError("the position is not a number")
    # Read and written back: what is stored is a message, whatever the entry held.
    stored = message_to_dict(message_from_dict(_as_dict(message, where)))
    marks = _taint(taint, where)
    return lambda store, sid: store.append_message(sid, seq, stored, marks)


def _event(f: list[Any], where: str) -> _Write:
    run_id, event = f
    body = _as_dict(event, where)
    if not isinstance(body.get("kind"), str):
        raise ValueError("the event has no kind")
    run = str(run_id)
    return lambda store, sid: store.append_event(sid, run, body)


def _taint_entry(f: list[Any], where: str) -> _Write:
    taint, cause = f
    marks = _taint(taint, where)
    why = str(cause)
    return lambda store, sid: store.record_taint(sid, marks, why)


def _outcome(f: list[Any], where: str) -> _Write:
    run_id, outcome, pending = f
    body = _as_dict(outcome, where)
    paused = None if pending is None else _as_dict(pending, where)
    run = str(run_id)
    return lambda store, sid: store.record_outcome(sid, run, body, paused)


def _approvals(f: list[Any], where: str) -> _Write:
    (tools,) = f
    names = [str(t) for t in _as_list(tools, where)]
    return lambda store, sid: store.record_approvals(sid, names)


_READERS: dict[str, Callable[[list[Any], str], _Write]] = {
    "message": _message, "event": _event, "taint": _taint_entry, "outcome": _outcome,
    "approvals": _approvals,
}


def _taint(value: Any, where: str) -> Taint:
    return Taint.from_dict(_as_dict(value, where))


def _as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise JournalError(f"{where}: expected a list, not {type(value).__name__}")
    return value


def _as_dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise JournalError(f"{where}: expected an object, not {type(value).__name__}")
    return dict(value)


__all__ = ["LIMIT_BYTES", "Checked", "Journal", "JournalError", "bounded", "checked",
           "journal_session", "replay"]
