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
    SessionNotFound,
    SessionRecord,
    StoreError,
    fold,
    search_text,
)
from tether.textrepair import repair
from tether.trust import Taint

T = TypeVar("T")



def _fill_search(conn: sqlite3.Connection, chunk: int = 500) -> None:
    """v3: the search text of every message stored before there was one, a chunk of
    messages at a time (a large store is never read whole into memory)."""
    after: tuple[str, int] = ("", -1)
    while rows := conn.execute(
            "SELECT session_id, seq, message FROM messages WHERE (session_id, seq) > (?, ?) "
            "ORDER BY session_id, seq LIMIT ?", (*after, chunk)).fetchall():
        conn.executemany("UPDATE messages SET search = ? WHERE session_id = ? AND seq = ?",
                         [(_text(_search(raw)), sid, seq) for sid, seq, raw in rows])
        after = (rows[-1][0], rows[-1][1])


def _search(raw: str) -> str:
    try:
        message = json.loads(raw)
    except ValueError:
        return ""
    return search_text(message) if isinstance(message, dict) else ""


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
        _fill_search,
        "ALTER TABLE sessions ADD COLUMN batch TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sessions ADD COLUMN batch_item TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX sessions_by_batch ON sessions (batch) WHERE batch != ''",
    ),
]
SCHEMA_VERSION = len(MIGRATIONS)

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
                    "title, private, untrusted, batch, batch_item) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (_text(info.id), info.created, info.updated, _text(info.provider),
                     _text(info.model), _text(info.workspace), _text(info.title),
                     info.taint.private, info.taint.untrusted, _text(info.batch),
                     _text(info.batch_item)))
            except sqlite3.IntegrityError:
                raise SessionConflict(f"a session with id {info.id!r} already exists") from None

        self._write(write)

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
                    (session_id, seq, str(message.get("role", "")), _dumps(message),
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

    def list(self, limit: int = 50, *, text: str | None = None, model: str | None = None,
             batch: str | None = None) -> list[SessionInfo]:
        where, params = ["1"], []
        if model is not None:
            where.append("(s.model = ? OR s.provider || ':' || s.model = ?)")
            params += [_text(model), _text(model)]
        if batch is not None:
            where.append("s.batch = ?")
            params.append(_text(batch))
        if text is not None:
            # instr: a plain substring (LIKE would read % and _ as patterns).
            where.append("EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id AND "
                         "instr(m.search, ?) > 0)")
            params.append(_text(fold(text)))

        def read(conn: sqlite3.Connection) -> list[SessionInfo]:
            ids = [r[0] for r in conn.execute(
                f"SELECT s.id FROM sessions s WHERE {' AND '.join(where)} "
                f"ORDER BY s.updated DESC, s.id LIMIT ?", (*params, limit))]
            return [self._info(conn, i) for i in ids]

        return self._read(read)

    def _info(self, conn: sqlite3.Connection, session_id: str) -> SessionInfo:
        row = conn.execute(
            "SELECT id, created, updated, provider, model, workspace, title, private, untrusted, "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), "
            "(SELECT stop_cause FROM outcomes o WHERE o.session_id = s.id "
            " ORDER BY o.id DESC LIMIT 1), "
            "EXISTS (SELECT 1 FROM pending p WHERE p.session_id = s.id), batch, batch_item "
            "FROM sessions s WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} in {self.path} "
                                  f"(`tether sessions list` shows them)")
        return SessionInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[9],
                           Taint(bool(row[7]), bool(row[8])), row[10], bool(row[11]), row[12],
                           row[13])

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
