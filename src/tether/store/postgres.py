"""Sessions in PostgreSQL: one store for many processes and machines.

``PostgresStore`` keeps what ``SQLiteStore`` keeps (sessions, their messages, taint
timeline, events, outcomes, paused approvals and "allow for this session"), with the same
semantics, in one database that web-service instances and workers on several machines
share::

    store = PostgresStore("postgresql://tether@db.internal:5432/tether")
    session = Session.create(store, title="tidy the notes")

``[store] url = "postgresql://..."`` in tether.toml, or ``TETHER_STORE_URL``, makes it the
store ``tether`` uses; ``TETHER_STORE_URL`` makes it the one ``Session.create()`` and
``Session.load()`` use without a store (``tether.store.default``). It needs
the ``postgres`` extra (``pip install 'tether[postgres]'``: psycopg 3 and psycopg_pool);
psycopg is imported when a store is opened, never by ``import tether``.

How it holds the SQLite store's promises:

- **Durable writes.** Every write is committed before it returns, at the server's
  ``synchronous_commit`` (on by default: the commit is flushed to the server's WAL), so a
  killed process loses at most the model answer still streaming.
- **Append positions.** ``append_message`` inserts under the primary key ``(session_id,
  seq)`` in the same statement that locks the session row: two writers continuing one
  session serialize on that row, and the second's position is taken, which raises
  ``SessionConflict``.
- **Taint only grows.** The session row keeps ``private = private OR new``; loading takes
  the most tainted of the row, every message and the taint timeline.
- **One snapshot per read.** ``load``, ``events`` and ``list`` are each one statement, so
  they see one consistent state however many writers there are.
- **Migrations.** Versioned like the SQLite file's (the same version numbers), applied
  under an advisory lock, so many processes starting at once upgrade
  the schema once. A database written by a newer tether is refused.

The tables live in their own schema, ``tether``, beside whatever else the database holds.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from tether.display import mask_url
from tether.store.base import (
    SessionConflict,
    SessionRecord,
    StoreError,
    search_text,
)
from tether.store.sql import (
    INFO_COLUMNS,
    POSTGRES,
    SQLStore,
    dumps,
    fill_search,
    info,
    info_columns,
)
from tether.trust import Taint

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

T = TypeVar("T")

SCHEMES = ("postgresql://", "postgres://")




# Each entry upgrades the schema by one version (tether.schema_version counts them): SQL
# statements, or a function of the connection where Python computes what is written. The
# versions mean what the SQLite store's do. Never edit a released entry: add one.
MIGRATIONS: list[tuple[str | Callable[[psycopg.Connection[Any]], None], ...]] = [
    # v1: sessions, their messages, events, taint timeline and run outcomes.
    (
        # Only when missing: CREATE SCHEMA needs the CREATE privilege on the database even
        # with IF NOT EXISTS, and a database owner may have created it for us.
        "DO $$ BEGIN IF to_regnamespace('tether') IS NULL THEN CREATE SCHEMA tether; "
        "END IF; END $$",
        "CREATE TABLE tether.schema_version (version INTEGER NOT NULL)",
        "INSERT INTO tether.schema_version (version) VALUES (0)",
        """CREATE TABLE tether.sessions (
            id TEXT PRIMARY KEY,
            created DOUBLE PRECISION NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            provider TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            workspace TEXT NOT NULL DEFAULT '',
            title TEXT NOT NULL DEFAULT '',
            private BOOLEAN NOT NULL DEFAULT FALSE,
            untrusted BOOLEAN NOT NULL DEFAULT FALSE)""",
        # Documents are JSON text, not jsonb: jsonb cannot hold a \\u0000 that a tool's
        # output may contain, and tether reads them whole.
        """CREATE TABLE tether.messages (
            session_id TEXT NOT NULL REFERENCES tether.sessions(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            message TEXT NOT NULL,
            private BOOLEAN NOT NULL,
            untrusted BOOLEAN NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (session_id, seq))""",
        """CREATE TABLE tether.events (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES tether.sessions(id) ON DELETE CASCADE,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            event TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE tether.taint (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES tether.sessions(id) ON DELETE CASCADE,
            private BOOLEAN NOT NULL,
            untrusted BOOLEAN NOT NULL,
            cause TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE tether.outcomes (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES tether.sessions(id) ON DELETE CASCADE,
            run_id TEXT NOT NULL,
            stop_cause TEXT NOT NULL,
            outcome TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL)""",
    ),
    # v2: paused approvals and "allow for this session" survive a restart; events, taint
    # and outcomes are read per session, and sessions listed by time, so index them.
    (
        """CREATE TABLE tether.pending (
            session_id TEXT PRIMARY KEY REFERENCES tether.sessions(id) ON DELETE CASCADE,
            state TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE tether.approvals (
            session_id TEXT NOT NULL REFERENCES tether.sessions(id) ON DELETE CASCADE,
            tool TEXT NOT NULL,
            PRIMARY KEY (session_id, tool))""",
        "CREATE INDEX events_by_session ON tether.events (session_id, id)",
        "CREATE INDEX taint_by_session ON tether.taint (session_id)",
        "CREATE INDEX outcomes_by_session ON tether.outcomes (session_id, id)",
        "CREATE INDEX sessions_by_updated ON tether.sessions (updated DESC, id)",
    ),
    # v3: `tether logs -q TEXT` searches each message's search text (base.search_text);
    # a `tether batch` item's session names its batch and item.
    (
        "ALTER TABLE tether.messages ADD COLUMN search TEXT NOT NULL DEFAULT ''",
        lambda conn: fill_search(conn, POSTGRES),
        "ALTER TABLE tether.sessions ADD COLUMN batch TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE tether.sessions ADD COLUMN batch_item TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX sessions_by_batch ON tether.sessions (batch) WHERE batch <> ''",
    ),
]
SCHEMA_VERSION = len(MIGRATIONS)

# pg_advisory_lock key for migrations: "tether" in ASCII, one value for every tether.
_MIGRATION_LOCK = 0x746574686572


# --- URLs -------------------------------------------------------------------------------------


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.lower().startswith(SCHEMES)


def _secrets(url: str) -> list[str]:
    """The password spellings in ``url`` (as written and percent-decoded), longest first."""
    found: set[str] = set()
    try:
        parts = urlsplit(url)
        if parts.password:
            found |= {parts.password, unquote(parts.password)}
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key.lower() in ("password", "sslpassword") and value:
                found.add(value)
    except ValueError:  # a malformed authority: mask_url still hides the user info
        pass
    return sorted((s for s in found if s), key=len, reverse=True)


# --- the store --------------------------------------------------------------------------------


class PostgresStore(SQLStore):
    """Sessions in a PostgreSQL database that many processes and machines share.

    ``url`` is a libpq connection URI (``postgresql://user[:password]@host:port/db?...``;
    libpq's environment variables and ``~/.pgpass`` apply as usual). Opening connects once,
    upgrades the schema if needed, then keeps a pool (``psycopg_pool``) of ``min_size`` to
    ``max_size`` connections: each write borrows one for a single committed statement or
    transaction and gives it back, so threads share a store, and a connection the server
    dropped (a restart, an idle timeout) is replaced instead of failing a write.
    ``timeout`` bounds the wait for a pooled connection, ``connect_timeout`` the first one.
    """

    dialect = POSTGRES

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 4,
                 connect_timeout: float = 10.0, timeout: float = 30.0,
                 retries: int = 3) -> None:
        if not is_postgres_url(url):
            raise StoreError(f"{mask_url(url)!r} is not a PostgreSQL URL (postgresql://...)")
        self.retries = retries
        self._secrets = _secrets(url)
        self._where = self._scrub(mask_url(url))
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError:
            raise StoreError("the PostgreSQL session store needs psycopg and psycopg_pool: "
                             "pip install 'tether[postgres]'") from None
        kwargs = self._connect_kwargs(url, connect_timeout)
        with self._errors("cannot open the session store"):
            with psycopg.connect(url, autocommit=True, **kwargs) as conn:
                migrate(conn)
                self.server_version: str = _server_version(conn)
            self._pool: ConnectionPool = ConnectionPool(
                url, kwargs={"autocommit": True, **kwargs}, min_size=min_size,
                max_size=max_size, timeout=timeout, open=False, name="tether-store",
                check=_check_connection)
            try:
                self._pool.open(wait=True, timeout=timeout)
            except BaseException:
                self._pool.close()  # its workers would go on trying to connect
                raise

    def _connect_kwargs(self, url: str, connect_timeout: float) -> dict[str, Any]:
        from psycopg.conninfo import conninfo_to_dict

        with self._errors("cannot open the session store"):
            given = conninfo_to_dict(url)
        kwargs: dict[str, Any] = {}
        if "connect_timeout" not in given:
            kwargs["connect_timeout"] = max(1, round(connect_timeout))
        if "application_name" not in given:  # what a DBA sees in pg_stat_activity
            kwargs["application_name"] = "tether"
        return kwargs

    @property
    def where(self) -> str:
        """The database's URL, its password masked."""
        return self._where

    @property
    def schema_version(self) -> int:
        with self._connection() as conn:
            return _schema_version(conn)

    # --- errors and connections -----------------------------------------------------------

    @contextmanager
    def _errors(self, doing: str = "session store") -> Iterator[None]:
        """psycopg's errors as ``StoreError``s that name the (masked) URL, never a password."""
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            yield
        except PoolTimeout as e:
            raise StoreError(f"{doing} {self.where}: no database connection became free or "
                             f"could be made ({self._scrub(str(e))})") from None
        except psycopg.Error as e:
            raise StoreError(f"{doing} {self.where}: {self._scrub(str(e).strip())}") from None

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._errors(), self._pool.connection() as conn:
            yield conn

    @property
    def _taken(self) -> type[Exception]:
        from psycopg import errors

        return errors.UniqueViolation

    def _write(self, fn: Callable[[psycopg.Connection[Any]], T], *,
               transaction: bool = False) -> T:
        """``fn`` on a pooled connection: one statement commits by itself (autocommit);
        ``transaction`` wraps several in one. A serialization failure or deadlock (the
        transaction was rolled back whole) is retried."""
        from psycopg import errors

        with self._errors():
            for attempt in range(self.retries + 1):
                try:
                    with self._pool.connection() as conn:
                        if not transaction:
                            return fn(conn)
                        with conn.transaction():
                            return fn(conn)
                except (errors.SerializationFailure, errors.DeadlockDetected):
                    if attempt == self.retries:
                        raise
        raise AssertionError("unreachable")

    # --- writes ---------------------------------------------------------------------------

    def append_message(self, session_id: str, seq: int, message: dict[str, Any],
                       taint: Taint) -> None:
        from psycopg import errors

        now = time.time()
        searched = _text(search_text(message))

        def write(conn: psycopg.Connection[Any]) -> None:
            # One statement: the session row is locked and touched, then the position
            # inserted. A second writer of this session waits on the row, then finds the
            # position taken.
            try:
                cur = conn.execute(
                    f"WITH s AS ({_TOUCH}) INSERT INTO tether.messages (session_id, seq, role, "
                    f"message, private, untrusted, created, search) SELECT s.id, %(seq)s, "
                    f"%(role)s, %(message)s, %(private)s, %(untrusted)s, %(now)s, %(search)s "
                    f"FROM s",
                    {**_touch_params(session_id, now, taint), "seq": seq,
                     "role": _text(str(message.get("role", ""))), "message": dumps(message),
                     "search": searched})
            except errors.UniqueViolation:
                raise SessionConflict(
                    f"session {session_id}: message {seq} was already written by another "
                    f"process; reload the session to continue it") from None
            if cur.rowcount == 0:
                raise self._not_found(session_id)

        self._write(write)

    def append_event(self, session_id: str, run_id: str, event: dict[str, Any]) -> None:
        from psycopg import errors

        now = time.time()

        def write(conn: psycopg.Connection[Any]) -> None:
            try:
                conn.execute("INSERT INTO tether.events (session_id, run_id, kind, event, "
                             "created) VALUES (%s, %s, %s, %s, %s)",
                             (_key(session_id), _key(run_id), _text(str(event.get("kind", ""))),
                              dumps(event), now))
            except errors.ForeignKeyViolation:
                raise self._not_found(session_id) from None

        self._write(write)

    def record_taint(self, session_id: str, taint: Taint, cause: str) -> None:
        now = time.time()

        def write(conn: psycopg.Connection[Any]) -> None:
            cur = conn.execute(
                f"WITH s AS ({_TOUCH}) INSERT INTO tether.taint (session_id, private, "
                f"untrusted, cause, created) SELECT s.id, %(private)s, %(untrusted)s, "
                f"%(cause)s, %(now)s FROM s",
                {**_touch_params(session_id, now, taint), "cause": _text(cause)})
            if cur.rowcount == 0:
                raise self._not_found(session_id)

        self._write(write)

    def record_outcome(self, session_id: str, run_id: str, outcome: dict[str, Any],
                       pending: dict[str, Any] | None) -> None:
        now = time.time()
        taint = Taint.from_dict(outcome.get("taint") or {})

        def write(conn: psycopg.Connection[Any]) -> None:
            if conn.execute(_TOUCH, _touch_params(session_id, now, taint)).rowcount == 0:
                raise self._not_found(session_id)
            key = _key(session_id)
            conn.execute("INSERT INTO tether.outcomes (session_id, run_id, stop_cause, "
                         "outcome, created) VALUES (%s, %s, %s, %s, %s)",
                         (key, _key(run_id), _text(str(outcome.get("stop_cause", ""))),
                          dumps(outcome), now))
            if pending is None:
                conn.execute("DELETE FROM tether.pending WHERE session_id = %s", (key,))
            else:
                conn.execute("INSERT INTO tether.pending (session_id, state, created) "
                             "VALUES (%s, %s, %s) ON CONFLICT (session_id) DO UPDATE SET "
                             "state = EXCLUDED.state, created = EXCLUDED.created",
                             (key, dumps(pending), now))

        self._write(write, transaction=True)

    def record_approvals(self, session_id: str, tools: Sequence[str]) -> None:
        def write(conn: psycopg.Connection[Any]) -> None:
            key = _key(session_id)
            # The row lock orders two writers of one session's set, as the SQLite store's
            # write lock does.
            if conn.execute("SELECT 1 FROM tether.sessions WHERE id = %s FOR UPDATE",
                            (key,)).fetchone() is None:
                raise self._not_found(session_id)
            conn.execute("DELETE FROM tether.approvals WHERE session_id = %s", (key,))
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO tether.approvals (session_id, tool) VALUES (%s, %s)",
                                [(key, t) for t in sorted({_key(t) for t in tools})])

        self._write(write, transaction=True)

    def delete(self, session_id: str) -> bool:
        def write(conn: psycopg.Connection[Any]) -> bool:
            return conn.execute("DELETE FROM tether.sessions WHERE id = %s",
                                (_key(session_id),)).rowcount > 0

        return self._write(write)

    # --- reads (each one statement: one snapshot) -------------------------------------------

    def load(self, session_id: str) -> SessionRecord:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {_INFO}, "
                "ARRAY(SELECT m.message FROM tether.messages m WHERE m.session_id = s.id "
                "      ORDER BY m.seq), "
                "COALESCE((SELECT bool_or(m.private) FROM tether.messages m "
                "          WHERE m.session_id = s.id), FALSE), "
                "COALESCE((SELECT bool_or(m.untrusted) FROM tether.messages m "
                "          WHERE m.session_id = s.id), FALSE), "
                "COALESCE((SELECT bool_or(t.private) FROM tether.taint t "
                "          WHERE t.session_id = s.id), FALSE), "
                "COALESCE((SELECT bool_or(t.untrusted) FROM tether.taint t "
                "          WHERE t.session_id = s.id), FALSE), "
                "ARRAY(SELECT a.tool FROM tether.approvals a WHERE a.session_id = s.id "
                "      ORDER BY a.tool), "
                "(SELECT p.state FROM tether.pending p WHERE p.session_id = s.id), "
                "ARRAY(SELECT o.outcome FROM tether.outcomes o WHERE o.session_id = s.id "
                "      ORDER BY o.id) "
                "FROM tether.sessions s WHERE s.id = %s", (_key(session_id),)).fetchone()
        if row is None:
            raise self._missing(session_id)
        found = info(row)
        messages, mp, mu, tp, tu, approvals, pending, outcomes = row[INFO_COLUMNS:]
        taint = found.taint | Taint(mp, mu) | Taint(tp, tu)
        return SessionRecord(found, [json.loads(m) for m in messages], taint, list(approvals),
                             json.loads(pending) if pending is not None else None,
                             [json.loads(o) for o in outcomes])

    def events(self, session_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT e.run_id, e.event FROM tether.sessions s LEFT JOIN tether.events e "
                "ON e.session_id = s.id AND (%(run)s::text IS NULL OR e.run_id = %(run)s) "
                "WHERE s.id = %(id)s ORDER BY e.id",
                {"id": _key(session_id), "run": None if run_id is None else _key(run_id)}
            ).fetchall()
        if not rows:
            raise self._missing(session_id)
        return [{"run_id": r, **json.loads(e)} for r, e in rows if e is not None]

    def _rows(self, query: str, params: Sequence[Any]) -> list[Any]:
        with self._connection() as conn:
            return conn.execute(query, params).fetchall()

    @property
    def closed(self) -> bool:
        return self._pool.closed

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"


def _check_connection(conn: psycopg.Connection[Any]) -> None:
    """Before a pooled connection is lent: is it still alive? An idle connection has
    nothing to read, so a readable socket means the server spoke first (it ended the
    connection: a restart, an idle timeout, a proxy) and a real round trip decides; a quiet
    one is lent as it is. That spares every write the round trip of psycopg_pool's
    ``check_connection``, which a connection dropped without a word would not pass either."""
    from psycopg_pool import ConnectionPool

    if conn.closed or conn.broken or select.select([conn.fileno()], [], [], 0)[0]:
        ConnectionPool.check_connection(conn)


# --- SQL shared by the methods ----------------------------------------------------------------

# The session row keeps the running maximum of the taint: it only grows. The UPDATE locks
# the row until the statement's (or transaction's) commit.
_TOUCH = ("UPDATE tether.sessions SET updated = %(now)s, private = private OR %(private)s, "
          "untrusted = untrusted OR %(untrusted)s WHERE id = %(id)s RETURNING id")


def _touch_params(session_id: str, now: float, taint: Taint) -> dict[str, Any]:
    return {"id": _key(session_id), "now": now, "private": taint.private,
            "untrusted": taint.untrusted}


_INFO = info_columns(POSTGRES)


# --- schema -----------------------------------------------------------------------------------


def migrate(conn: psycopg.Connection[Any], target: int = SCHEMA_VERSION) -> int:
    """Bring the schema up to ``target``; returns the version found before. ``conn`` is in
    autocommit mode. The steps run in one transaction while an advisory lock is held, so
    processes opening an old (or empty) database at once upgrade it once; DDL in
    PostgreSQL is transactional, so a failed step leaves the schema as it was."""
    found = _schema_version(conn)
    _refuse_newer(found)
    if found >= target:
        return found
    # A session lock, taken before the transaction begins: a transaction that waited for
    # a lock inside itself would still see the catalog as it was when it began (and
    # create the tables the first process just made).
    conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
    try:
        with conn.transaction():
            found = _schema_version(conn)  # another process may have got there first
            _refuse_newer(found)
            for version in range(found, target):
                for step in MIGRATIONS[version]:
                    if isinstance(step, str):
                        conn.execute(step)
                    else:
                        step(conn)
                conn.execute("UPDATE tether.schema_version SET version = %s", (version + 1,))
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
    return found


def _schema_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT to_regclass('tether.schema_version') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    version = conn.execute("SELECT max(version) FROM tether.schema_version").fetchone()
    return int(version[0]) if version is not None and version[0] is not None else 0


def _refuse_newer(found: int) -> None:
    if found > SCHEMA_VERSION:
        raise StoreError(f"the store was written by a newer tether (schema version {found}; "
                         f"this one knows up to {SCHEMA_VERSION}); upgrade tether")


def _server_version(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


# --- values -----------------------------------------------------------------------------------


_text = POSTGRES.text

# Ids are written and looked up the same way, so an id with a NUL still finds its session.
_key = _text


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresStore", "is_postgres_url", "mask_url",
           "migrate"]
