"""Sessions that survive the process: a conversation, its taint, its events, its outcomes.

A ``Session`` is what a host hands to ``agent.run(..., session=...)``. Everything is written
as it happens and committed at once (append-only), so a killed process loses at most the
model response that was still streaming::

    session = Session.create(provider="local", model="qwen", title="tidy the notes")
    await agent.run("Tidy my notes", session=session)
    ...  # later, in another process
    session = Session.load(session_id)
    await agent.run("Now summarise them", session=session)   # same taint, never cleaner

The storage behind it is a ``SessionStore``: a small protocol of plain JSON-ready values.
``SQLiteStore`` is the embedded default: one file under the user's data dir
(``$XDG_DATA_HOME/tether/sessions.db``, else ``~/.local/share/tether/sessions.db``), or
``TETHER_STORE``, or ``[store] path``. ``PostgresStore`` (``tether.store_postgres``) keeps
them in one PostgreSQL database for many processes and machines: ``TETHER_STORE_URL`` or
``[store] url``. ``open_store`` picks between them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from tether.errors import TetherError
from tether.textrepair import repair
from tether.trust import CLEAN, Taint

if TYPE_CHECKING:
    from tether.agent import Conversation
    from tether.config import Config
    from tether.events import Event
    from tether.messages import Message
    from tether.pending import PendingState

T = TypeVar("T")


class StoreError(TetherError):
    """The session store cannot be opened, read or written; the message names the file."""


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

    def list(self, limit: int = 50) -> list[SessionInfo]:
        """Sessions, most recently updated first."""

    def delete(self, session_id: str) -> bool: ...

    def close(self) -> None: ...


# --- SQLite ---------------------------------------------------------------------------------

# Each entry upgrades the schema by one version (PRAGMA user_version counts them). Never
# edit a released entry: add one.
MIGRATIONS: list[tuple[str, ...]] = [
    # v1: sessions, their messages, events, taint timeline and run outcomes.
    (
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            provider TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            workspace TEXT NOT NULL DEFAULT '',
            title TEXT NOT NULL DEFAULT '',
            private INTEGER NOT NULL DEFAULT 0,
            untrusted INTEGER NOT NULL DEFAULT 0)""",
        """CREATE TABLE messages (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            message TEXT NOT NULL,
            private INTEGER NOT NULL,
            untrusted INTEGER NOT NULL,
            created REAL NOT NULL,
            PRIMARY KEY (session_id, seq))""",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            event TEXT NOT NULL,
            created REAL NOT NULL)""",
        """CREATE TABLE taint (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            private INTEGER NOT NULL,
            untrusted INTEGER NOT NULL,
            cause TEXT NOT NULL,
            created REAL NOT NULL)""",
        """CREATE TABLE outcomes (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            run_id TEXT NOT NULL,
            stop_cause TEXT NOT NULL,
            outcome TEXT NOT NULL,
            created REAL NOT NULL)""",
    ),
    # v2: paused approvals and "allow for this session" survive a restart; events are
    # read per session, so index them.
    (
        """CREATE TABLE pending (
            session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            state TEXT NOT NULL,
            created REAL NOT NULL)""",
        """CREATE TABLE approvals (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            tool TEXT NOT NULL,
            PRIMARY KEY (session_id, tool))""",
        "CREATE INDEX events_by_session ON events (session_id, id)",
        "CREATE INDEX taint_by_session ON taint (session_id)",
        "CREATE INDEX outcomes_by_session ON outcomes (session_id, id)",
    ),
]
SCHEMA_VERSION = len(MIGRATIONS)

_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED (extended codes are masked to these)


def default_store_path(config: Config | None = None) -> Path:
    """``TETHER_STORE``, else ``[store] path`` of the config, else the user's data dir."""
    env = os.environ.get("TETHER_STORE")
    if env:
        return Path(env).expanduser()
    if config is not None and config.store.path:
        return Path(config.store.path).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tether" / "sessions.db"


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring the schema up to ``target``; returns the version found before. Each step runs
    in one immediate transaction, so two processes opening an old file do it once."""
    found = _user_version(conn)
    if found > SCHEMA_VERSION:
        raise StoreError(f"the store was written by a newer tether (schema version {found}; "
                         f"this one knows up to {SCHEMA_VERSION}); upgrade tether")
    for version in range(found, target):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _user_version(conn) != version:  # another process got there first
                conn.execute("ROLLBACK")
                continue
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return found


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    text = str(error).lower()
    return "locked" in text or "busy" in text


class SQLiteStore:
    """The embedded store: one SQLite file in WAL mode.

    Writers take the write lock at the start of each (short) transaction (``BEGIN
    IMMEDIATE``), wait ``busy_timeout_ms`` for it, and retry a few times beyond that, so
    several processes can write one file. ``synchronous=NORMAL``: a commit survives the
    process being killed; an OS crash may lose the last moments.
    """

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 5000,
                 retries: int = 5) -> None:
        self.path = Path(path).expanduser()
        self.retries = retries
        self.closed = False
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                # Sessions hold private data: the file (and SQLite's -wal/-shm, which take
                # the database's mode) are for the user only.
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000,
                                         isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open the session store {self.path}: {e}") from None
        try:
            self._retry(lambda: self._setup(busy_timeout_ms))
        except StoreError:
            self._conn.close()
            raise
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise StoreError(f"{self.path} is not a usable session store: {e}") from None

    def _setup(self, busy_timeout_ms: int) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode}); is it on "
                             f"a network file system?")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)

    @property
    def schema_version(self) -> int:
        with self._lock:
            return _user_version(self._conn)

    @property
    def where(self) -> str:
        """Where the sessions are, fit to print (the file's path)."""
        return str(self.path)

    # --- transactions ---------------------------------------------------------------------

    def _retry(self, fn: Callable[[], T]) -> T:
        delay = 0.01
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not _is_busy(e):
                    raise StoreError(f"session store {self.path}: {e}") from None
                if attempt == self.retries:
                    raise StoreError(f"session store {self.path} stayed locked by another "
                                     f"process ({e}); try again") from None
                time.sleep(delay)  # busy_timeout already waited; back off a little more
                delay = min(delay * 4, 1.0)
        raise AssertionError("unreachable")

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def attempt() -> T:
            with self._lock:
                conn = self._conn
                conn.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(conn)
                    conn.execute("COMMIT")
                    return out
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise

        return self._retry(attempt)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        # One read transaction: every SELECT sees the same snapshot.
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def attempt() -> T:
            with self._reading() as conn:
                return fn(conn)

        return self._retry(attempt)

    # --- writes ---------------------------------------------------------------------------

    def create_session(self, info: SessionInfo) -> None:
        def write(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO sessions (id, created, updated, provider, model, workspace, "
                    "title, private, untrusted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (_text(info.id), info.created, info.updated, _text(info.provider),
                     _text(info.model), _text(info.workspace), _text(info.title),
                     info.taint.private, info.taint.untrusted))
            except sqlite3.IntegrityError:
                raise SessionConflict(f"a session with id {info.id!r} already exists") from None

        self._write(write)

    def append_message(self, session_id: str, seq: int, message: dict[str, Any],
                       taint: Taint) -> None:
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            self._touch(conn, session_id, now, taint)
            try:
                conn.execute(
                    "INSERT INTO messages (session_id, seq, role, message, private, untrusted, "
                    "created) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (session_id, seq, str(message.get("role", "")), _dumps(message),
                     taint.private, taint.untrusted, now))
            except sqlite3.IntegrityError:
                raise SessionConflict(
                    f"session {session_id}: message {seq} was already written by another "
                    f"process; reload the session to continue it") from None

        self._write(write)

    def append_event(self, session_id: str, run_id: str, event: dict[str, Any]) -> None:
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            try:
                conn.execute("INSERT INTO events (session_id, run_id, kind, event, created) "
                             "VALUES (?, ?, ?, ?, ?)",
                             (session_id, run_id, str(event.get("kind", "")), _dumps(event),
                              now))
            except sqlite3.IntegrityError:  # the foreign key: no such session
                raise SessionNotFound(f"no session {session_id!r} in {self.path} "
                                      f"(deleted?)") from None

        self._write(write)

    def record_taint(self, session_id: str, taint: Taint, cause: str) -> None:
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            self._touch(conn, session_id, now, taint)
            conn.execute("INSERT INTO taint (session_id, private, untrusted, cause, created) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (session_id, taint.private, taint.untrusted, cause, now))

        self._write(write)

    def record_outcome(self, session_id: str, run_id: str, outcome: dict[str, Any],
                       pending: dict[str, Any] | None) -> None:
        now = time.time()

        def write(conn: sqlite3.Connection) -> None:
            self._touch(conn, session_id, now, Taint.from_dict(outcome.get("taint") or {}))
            conn.execute("INSERT INTO outcomes (session_id, run_id, stop_cause, outcome, "
                         "created) VALUES (?, ?, ?, ?, ?)",
                         (session_id, run_id, str(outcome.get("stop_cause", "")),
                          _dumps(outcome), now))
            conn.execute("DELETE FROM pending WHERE session_id = ?", (session_id,))
            if pending is not None:
                conn.execute("INSERT INTO pending (session_id, state, created) VALUES (?, ?, ?)",
                             (session_id, _dumps(pending), now))

        self._write(write)

    def record_approvals(self, session_id: str, tools: Sequence[str]) -> None:
        def write(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() \
                    is None:
                raise SessionNotFound(f"no session {session_id!r} in {self.path} (deleted?)")
            conn.execute("DELETE FROM approvals WHERE session_id = ?", (session_id,))
            conn.executemany("INSERT INTO approvals (session_id, tool) VALUES (?, ?)",
                             [(session_id, t) for t in sorted(set(tools))])

        self._write(write)

    def delete(self, session_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0

        return self._write(write)

    def _touch(self, conn: sqlite3.Connection, session_id: str, now: float, taint: Taint) -> None:
        # The session row keeps the running maximum of the taint: it only grows.
        cur = conn.execute("UPDATE sessions SET updated = ?, private = MAX(private, ?), "
                           "untrusted = MAX(untrusted, ?) WHERE id = ?",
                           (now, taint.private, taint.untrusted, session_id))
        if cur.rowcount == 0:
            raise SessionNotFound(f"no session {session_id!r} in {self.path} (deleted?)")

    # --- reads ----------------------------------------------------------------------------

    def load(self, session_id: str) -> SessionRecord:
        def read(conn: sqlite3.Connection) -> SessionRecord:
            info = self._info(conn, session_id)
            messages: list[dict[str, Any]] = []
            taint = info.taint
            for raw, private, untrusted in conn.execute(
                    "SELECT message, private, untrusted FROM messages WHERE session_id = ? "
                    "ORDER BY seq", (session_id,)):
                messages.append(json.loads(raw))
                taint = taint | Taint(bool(private), bool(untrusted))
            for private, untrusted in conn.execute(
                    "SELECT private, untrusted FROM taint WHERE session_id = ?", (session_id,)):
                taint = taint | Taint(bool(private), bool(untrusted))
            approvals = [r[0] for r in conn.execute(
                "SELECT tool FROM approvals WHERE session_id = ? ORDER BY tool", (session_id,))]
            row = conn.execute("SELECT state FROM pending WHERE session_id = ?",
                               (session_id,)).fetchone()
            outcomes = [json.loads(r[0]) for r in conn.execute(
                "SELECT outcome FROM outcomes WHERE session_id = ? ORDER BY id", (session_id,))]
            return SessionRecord(info, messages, taint, approvals,
                                 json.loads(row[0]) if row else None, outcomes)

        return self._read(read)

    def events(self, session_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            self._info(conn, session_id)
            query = "SELECT run_id, event FROM events WHERE session_id = ?"
            params: tuple[str, ...] = (session_id,)
            if run_id is not None:
                query += " AND run_id = ?"
                params += (run_id,)
            return [{"run_id": r, **json.loads(e)} for r, e in
                    conn.execute(query + " ORDER BY id", params)]

        return self._read(read)

    def list(self, limit: int = 50) -> list[SessionInfo]:
        def read(conn: sqlite3.Connection) -> list[SessionInfo]:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM sessions ORDER BY updated DESC, id LIMIT ?", (limit,))]
            return [self._info(conn, i) for i in ids]

        return self._read(read)

    def _info(self, conn: sqlite3.Connection, session_id: str) -> SessionInfo:
        row = conn.execute(
            "SELECT id, created, updated, provider, model, workspace, title, private, untrusted, "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), "
            "(SELECT stop_cause FROM outcomes o WHERE o.session_id = s.id "
            " ORDER BY o.id DESC LIMIT 1), "
            "EXISTS (SELECT 1 FROM pending p WHERE p.session_id = s.id) "
            "FROM sessions s WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} in {self.path} "
                                  f"(`tether sessions list` shows them)")
        return SessionInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[9],
                           Taint(bool(row[7]), bool(row[8])), row[10], bool(row[11]))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self.closed = True

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _dumps(value: Any) -> str:
    # A lone surrogate (a command-line argument that was not UTF-8, a tool's output) cannot
    # be stored as UTF-8 text: it is stored as U+FFFD rather than failing the write.
    return repair(json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")))


def _text(value: str) -> str:
    """A text column's value: a lone surrogate (SQLite stores UTF-8) written as ``\\udXXX``."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


_DEFAULT_STORES: dict[Path | str, SessionStore] = {}
_DEFAULT_LOCK = threading.Lock()


def default_store_url(config: Config | None = None) -> str | None:
    """The PostgreSQL store's URL when one is configured: ``TETHER_STORE_URL``, else
    ``[store] url`` of the config unless ``TETHER_STORE`` names a file (the environment wins
    over the files). None: the SQLite file of ``default_store_path``."""
    from tether.errors import ConfigError

    url, path = os.environ.get("TETHER_STORE_URL"), os.environ.get("TETHER_STORE")
    if url and path:
        raise ConfigError("TETHER_STORE (a SQLite file) and TETHER_STORE_URL (a PostgreSQL "
                          "database) are both set; unset one")
    if url:
        return url
    if path or config is None:
        return None
    return config.store.url


def open_store(path: str | Path | None = None, config: Config | None = None, *,
               url: str | None = None) -> SessionStore:
    """The store sessions use, opened once per process and shared: the PostgreSQL database
    at ``url`` (default: ``default_store_url(config)``), else the SQLite file at ``path``
    (default: ``default_store_path(config)``)."""
    from tether.errors import ConfigError

    if path is not None and url is not None:
        raise ConfigError("open_store: give a path (SQLite) or a url (PostgreSQL), not both")
    if path is None and url is None:
        url = default_store_url(config)
    key: Path | str
    if url is not None:
        key = url
    else:
        key = (Path(path).expanduser() if path is not None else default_store_path(config))
        key = key.resolve()
    with _DEFAULT_LOCK:
        store = _DEFAULT_STORES.get(key)
        if store is None or getattr(store, "closed", False):
            if isinstance(key, str):
                from tether.store_postgres import PostgresStore

                store = PostgresStore(key)
            else:
                store = SQLiteStore(key)
            _DEFAULT_STORES[key] = store
        return store


# --- Session ----------------------------------------------------------------------------------


def new_session_id() -> str:
    return uuid.uuid4().hex[:12]


class Session:
    """One stored conversation. Pass it to ``agent.run(prompt, session=...)``,
    ``agent.stream(...)`` or ``agent.resume(session, decisions)``.

    ``conversation()`` is the live Conversation (the same object on every call): each
    message appended to it is written at once. ``record(event)`` is called by the agent for
    every event of a run given this session; ``listeners`` see them too (a UI rendering a
    resumed run).
    """

    def __init__(self, store: SessionStore, record: SessionRecord) -> None:
        self.store = store
        self._record = record
        self._conversation: Conversation | None = None
        self._run_id: str | None = None
        self._taint = record.taint
        self.listeners: list[Callable[[Event], None]] = []

    # --- opening ----------------------------------------------------------------------------

    @classmethod
    def create(cls, store: SessionStore | None = None, *, provider: str = "", model: str = "",
               workspace: str | Path = "", title: str = "", id: str | None = None) -> Session:
        """A new, empty session (``id`` defaults to 12 random hex digits)."""
        store = store if store is not None else open_store()
        now = time.time()
        where = str(Path(workspace).resolve()) if str(workspace) else ""
        info = SessionInfo(id or new_session_id(), now, now, provider, model, where,
                           " ".join(title.split())[:200])
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
        from tether.messages import message_from_dict

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
        from tether.pending import PendingState

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
        from tether.agent import Conversation
        from tether.messages import message_from_dict

        conv = Conversation([message_from_dict(m) for m in self._record.messages],
                            self._record.taint, set(self._record.approvals))
        if self._record.pending is not None:
            from tether.pending import calls_from_dict

            conv.pending = list(calls_from_dict(self._record.pending, conv.pending_calls))
        # A function, not the bound method: copy.deepcopy (dataclasses.asdict of a RunResult)
        # keeps a function as it is, but would copy the session, store and locks behind a
        # bound method, and fail.
        conv.on_append = lambda message, taint: self._on_append(message, taint)
        self._conversation = conv
        if conv.pending_calls and self._record.pending is None:
            from tether.messages import Message, ToolResult

            conv.append(Message("tool", tuple(
                ToolResult(c.id, c.name, "Interrupted: the process running this call stopped "
                           "before its result was recorded. It may or may not have run; check "
                           "before calling it again.", True, "trusted")
                for c in conv.pending_calls)))
        return conv

    def _on_append(self, message: Message, taint: Taint) -> None:
        from tether.messages import message_to_dict

        assert self._conversation is not None
        seq = len(self._conversation.messages) - 1
        self.store.append_message(self.id, seq, message_to_dict(message), taint)

    def record(self, event: Event) -> None:
        """Persist one event of a run on this session (the agent calls this)."""
        from tether import events as ev

        for listener in self.listeners:
            listener(event)
        top = not event.path
        if isinstance(event, ev.RunStarted) and top:
            self._run_id = uuid.uuid4().hex[:12]
        run_id = self._run_id or "-"
        if isinstance(event, ev.TextDelta | ev.ReasoningDelta):
            return  # the ModelResponded that follows holds the whole text
        if isinstance(event, ev.TaintChanged) and top:
            self.store.record_taint(self.id, event.after, event.cause)
            self._taint = self._taint | event.after
        if isinstance(event, ev.RunFinished) and top:
            from tether.pending import calls_to_dict

            result = event.result
            pending = calls_to_dict(result.pending) if str(result.stop_cause) == "paused" \
                else None
            self.store.record_outcome(self.id, run_id, result.to_dict(), pending)
            self._record = dataclasses.replace(
                self._record, pending=pending, outcomes=[*self._record.outcomes, result.to_dict()])
            self._run_id = None
            return
        if isinstance(event, ev.ApprovalDecided) and top and event.scope == "session" \
                and self._conversation is not None:
            self.store.record_approvals(self.id, sorted(self._conversation.session_approvals))
        from tether.events import event_to_dict

        self.store.append_event(self.id, run_id, event_to_dict(event))


__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SQLiteStore",
    "Session",
    "SessionConflict",
    "SessionInfo",
    "SessionNotFound",
    "SessionRecord",
    "SessionStore",
    "StoreError",
    "default_store_path",
    "default_store_url",
    "migrate",
    "open_store",
]
