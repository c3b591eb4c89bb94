"""Sessions in one SQLite file: the embedded default store.

One file under the user's data dir (``$XDG_DATA_HOME/tether/sessions.db``, else
``~/.local/share/tether/sessions.db``), or ``TETHER_STORE``, or ``[store] path``. Every write
is its own committed transaction in WAL mode, so several processes can share the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tether.paths import default_store
from tether.store.base import (
    SessionConflict,
    SessionInfo,
    SessionRecord,
    StoreError,
    search_text,
)
from tether.store.sql import SQLITE, SQLStore, dumps, fill_search, info, info_columns
from tether.trust import Taint

T = TypeVar("T")




# Each entry upgrades the schema by one version (PRAGMA user_version counts them): SQL
# statements, or a function of the connection where Python computes what is written. Never
# edit a released entry: add one.
MIGRATIONS: list[tuple[str | Callable[[sqlite3.Connection], None], ...]] = [
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
    # v3: `tether logs -q TEXT` searches each message's search text (base.search_text);
    # a `tether batch` item's session names its batch and item.
    (
        "ALTER TABLE messages ADD COLUMN search TEXT NOT NULL DEFAULT ''",
        lambda conn: fill_search(conn, SQLITE),
        "ALTER TABLE sessions ADD COLUMN batch TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sessions ADD COLUMN batch_item TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX sessions_by_batch ON sessions (batch) WHERE batch != ''",
    ),
]
SCHEMA_VERSION = len(MIGRATIONS)

_INFO = info_columns(SQLITE)

_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED (extended codes are masked to these)


def default_store_path(configured: str | Path | None = None) -> Path:
    """``TETHER_STORE``, else ``configured`` (``[store] path``), else the user's data dir."""
    env = os.environ.get("TETHER_STORE")
    if env:
        return Path(env).expanduser()
    if configured:
        return Path(configured).expanduser()
    return default_store(os.environ)


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
            for step in MIGRATIONS[version]:
                if isinstance(step, str):
                    conn.execute(step)
                else:
                    step(conn)
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


class SQLiteStore(SQLStore):
    """The embedded store: one SQLite file in WAL mode.

    Writers take the write lock at the start of each (short) transaction (``BEGIN
    IMMEDIATE``), wait ``busy_timeout_ms`` for it, and retry a few times beyond that, so
    several processes can write one file. ``synchronous=NORMAL``: a commit survives the
    process being killed; an OS crash may lose the last moments.
    """

    dialect = SQLITE

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

    @property
    def _taken(self) -> type[Exception]:
        return sqlite3.IntegrityError

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

    def append_message(self, session_id: str, seq: int, message: dict[str, Any],
                       taint: Taint) -> None:
        now = time.time()
        searched = _text(search_text(message))

        def write(conn: sqlite3.Connection) -> None:
            self._touch(conn, session_id, now, taint)
            try:
                conn.execute(
                    "INSERT INTO messages (session_id, seq, role, message, private, untrusted, "
                    "created, search) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (session_id, seq, str(message.get("role", "")), dumps(message),
                     taint.private, taint.untrusted, now, searched))
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
                             (session_id, run_id, str(event.get("kind", "")), dumps(event),
                              now))
            except sqlite3.IntegrityError:  # the foreign key: no such session
                raise self._not_found(session_id) from None

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
                          dumps(outcome), now))
            conn.execute("DELETE FROM pending WHERE session_id = ?", (session_id,))
            if pending is not None:
                conn.execute("INSERT INTO pending (session_id, state, created) VALUES (?, ?, ?)",
                             (session_id, dumps(pending), now))

        self._write(write)

    def record_approvals(self, session_id: str, tools: Sequence[str]) -> None:
        def write(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() \
                    is None:
                raise self._not_found(session_id)
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
            raise self._not_found(session_id)

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

    def _rows(self, query: str, params: Sequence[Any]) -> list[Any]:
        return self._read(lambda conn: conn.execute(query, params).fetchall())

    def _info(self, conn: sqlite3.Connection, session_id: str) -> SessionInfo:
        row = conn.execute(f"SELECT {_INFO} FROM sessions s WHERE s.id = ?",
                           (session_id,)).fetchone()
        if row is None:
            raise self._missing(session_id)
        return info(row)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self.closed = True

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



_text = SQLITE.text
