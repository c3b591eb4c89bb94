"""What a session store holds and promises: the ``SessionStore`` protocol and its values.

Values crossing the protocol are plain JSON-ready dicts, so a backend only stores
documents: ``SQLiteStore`` (``tether.store.sqlite``) is the embedded default,
``PostgresStore`` (``tether.store.postgres``) one database for many processes and machines.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tether.errors import TetherError
from tether.trust import CLEAN, Taint, untrusted_content


class StoreError(TetherError):
    """The session store cannot be opened, read or written; the message names the file (or
    the database, without its password)."""


class SessionNotFound(StoreError):
    """No session has this id."""


class SessionConflict(StoreError):
    """Another writer changed the session (two processes continuing one conversation)."""


# --- what a store holds -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session's metadata, plus a summary for listings."""

    id: str
    created: float
    updated: float
    provider: str = ""
    model: str = ""
    workspace: str = ""
    title: str = ""
    message_count: int = 0
    taint: Taint = CLEAN
    last_stop: str | None = None
    paused: bool = False
    # A `tether batch` item's session: the batch's id and the item's (else empty).
    batch: str = ""
    batch_item: str = ""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """Everything needed to continue a session (events are read separately: they are many).

    ``messages`` are ``message_to_dict`` values in order; ``taint`` is the most tainted of
    the taint timeline and every message's taint; ``pending`` is ``calls_to_dict`` output
    when the last run paused for approval.
    """

    info: SessionInfo
    messages: list[dict[str, Any]]
    taint: Taint
    approvals: list[str] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    outcomes: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live. Values crossing it are plain JSON-ready dicts, so a backend only
    stores documents. Every write is its own committed transaction; implementations must be
    safe with several processes writing at once.

    ``append_message`` gets the message's position ``seq`` (0-based); a position that is
    already taken raises ``SessionConflict``: two writers continued one conversation.
    """

    def create_session(self, info: SessionInfo) -> None: ...

    def append_message(self, session_id: str, seq: int, message: dict[str, Any],
                       taint: Taint) -> None: ...

    def append_event(self, session_id: str, run_id: str, event: dict[str, Any]) -> None: ...

    def record_taint(self, session_id: str, taint: Taint, cause: str) -> None: ...

    def record_outcome(self, session_id: str, run_id: str, outcome: dict[str, Any],
                       pending: dict[str, Any] | None) -> None:
        """The run's ``RunResult.to_dict()``; ``pending`` replaces the session's pending
        state (None clears it)."""

    def record_approvals(self, session_id: str, tools: Sequence[str]) -> None:
        """The tools a person allowed "for this session" (the whole set, replacing)."""

    def load(self, session_id: str) -> SessionRecord: ...

    def events(self, session_id: str, run_id: str | None = None) -> list[dict[str, Any]]: ...

    def list(self, limit: int = 50, *, text: str | None = None, model: str | None = None,
             batch: str | None = None) -> list[SessionInfo]:
        """Sessions, most recently updated first. ``text``: only those with a message that
        holds it, case-insensitively (a prompt, an answer, a tool call's name or
        arguments, a tool's result: ``search_text``); ``model``: only those of this model
        (``MODEL`` or ``PROVIDER:MODEL``); ``batch``: only the items of this batch."""

    def delete(self, session_id: str) -> bool: ...

    def close(self) -> None: ...



def new_session_id() -> str:
    return uuid.uuid4().hex[:12]


def search_text(message: dict[str, Any]) -> str:
    """What ``list(text=...)`` searches in a stored message: its text, its tool calls' names
    and arguments, its tool results' names and content (the data an untrusted result
    wraps, not the notice written for the model), one part a line, case-folded. Kept beside
    the message, so a store finds it with a plain substring match (``instr``, ``strpos``),
    the same in every database."""
    lines: list[str] = []
    parts = message.get("parts")
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("kind")
        if kind == "text":
            lines.append(str(part.get("text", "")))
        elif kind == "tool_call":
            lines.append(f"{part.get('name', '')} {part.get('arguments', '')}")
        elif kind == "tool_result":
            content = str(part.get("content", ""))
            if part.get("trust") == "untrusted":
                content = untrusted_content(content) or content
            lines.append(f"{part.get('name', '')} {content}")
    return fold("\n".join(lines))


def fold(text: str) -> str:
    """Text as searched: case-folded (``"Straße"`` finds ``"STRASSE"``)."""
    return text.casefold()
