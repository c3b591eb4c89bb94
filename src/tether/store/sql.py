"""What the two SQL session stores share: one base (``SQLStore``) and a ``Dialect`` each.

``SQLiteStore`` and ``PostgresStore`` keep the same tables with the same meaning; they
differ in how their SQL is spelt (placeholders, where the tables live, the substring test,
the text a column can hold) and in how they hold a connection. The dialect says the first,
each store keeps the second; what is left is written once here: the documents as stored
(``dumps``), a stored message's search text (``fill_search``, the v3 migration), the
columns a listing reads (``info_columns``, ``info``) and the listing itself
(``SQLStore.list``), and what a missing session's error says.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from tether.store.base import SessionConflict, SessionInfo, SessionNotFound, fold, search_text
from tether.textrepair import repair
from tether.trust import Taint

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one database spells the SQL the stores share.

    ``param`` is a positional placeholder (``?``, ``%s``); ``tables`` the prefix of every
    table (PostgreSQL's live in the schema ``tether``); ``true`` the literal for true;
    ``contains`` the test that a column holds a plain substring (LIKE would read ``%`` and
    ``_`` as patterns), ``{column}`` and ``{param}`` filled in; ``nul`` whether a text
    column can hold a NUL (PostgreSQL's cannot: it is written as ``\\x00``); ``unbounded``
    the LIMIT value of a negative limit (no bound).
    """

    param: str
    tables: str
    true: str
    contains: str
    nul: bool
    unbounded: int | None

    def text(self, value: str) -> str:
        """A text column's value. A lone surrogate (the column holds UTF-8) is written as
        ``\\udXXX``, and where the column holds no NUL, a NUL as ``\\x00``."""
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value if self.nul else value.replace("\x00", "\\x00")

    def limit(self, limit: int) -> int | None:
        """``limit`` as the LIMIT parameter: a negative one is no bound."""
        return limit if limit >= 0 else self.unbounded


SQLITE = Dialect(param="?", tables="", true="1", contains="instr({column}, {param}) > 0",
                 nul=True, unbounded=-1)
POSTGRES = Dialect(param="%s", tables="tether.", true="TRUE",
                   contains="strpos({column}, {param}) > 0", nul=False, unbounded=None)


class Connection(Protocol):
    """What the shared SQL needs of a connection (sqlite3's and psycopg's both are)."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...

    def cursor(self) -> Any: ...


def dumps(value: Any) -> str:
    """A document as stored: compact JSON. A lone surrogate (a command-line argument that
    was not UTF-8, a tool's output) cannot be stored as UTF-8 text: it is stored as U+FFFD
    rather than failing the write. A NUL is escaped by JSON itself (\\u0000)."""
    return repair(json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")))


def fill_search(conn: Connection, dialect: Dialect, chunk: int = 500) -> None:
    """v3: the search text of every message stored before there was one, a chunk of
    messages at a time (a large store is never read whole into memory)."""
    p, t = dialect.param, dialect.tables
    after: tuple[str, int] = ("", -1)
    while rows := conn.execute(
            f"SELECT session_id, seq, message FROM {t}messages WHERE (session_id, seq) > "
            f"({p}, {p}) ORDER BY session_id, seq LIMIT {p}", (*after, chunk)).fetchall():
        cur = conn.cursor()
        try:
            cur.executemany(
                f"UPDATE {t}messages SET search = {p} WHERE session_id = {p} AND seq = {p}",
                [(dialect.text(_search(raw)), sid, seq) for sid, seq, raw in rows])
        finally:
            cur.close()
        after = (rows[-1][0], rows[-1][1])


def _search(raw: str) -> str:
    try:
        message = json.loads(raw)
    except ValueError:
        return ""
    return search_text(message) if isinstance(message, dict) else ""


def info_columns(dialect: Dialect) -> str:
    """The columns ``info`` reads, of a session row aliased ``s``."""
    t = dialect.tables
    return ("s.id, s.created, s.updated, s.provider, s.model, s.workspace, s.title, "
            "s.private, s.untrusted, "
            f"(SELECT COUNT(*) FROM {t}messages m WHERE m.session_id = s.id), "
            f"(SELECT o.stop_cause FROM {t}outcomes o WHERE o.session_id = s.id "
            " ORDER BY o.id DESC LIMIT 1), "
            f"EXISTS (SELECT 1 FROM {t}pending p WHERE p.session_id = s.id), "
            "s.batch, s.batch_item")


INFO_COLUMNS = 14


def info(row: Sequence[Any]) -> SessionInfo:
    """The ``SessionInfo`` of a row that starts with ``info_columns``."""
    return SessionInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6], int(row[9]),
                       Taint(bool(row[7]), bool(row[8])), row[10], bool(row[11]), row[12],
                       row[13])


class SQLStore(ABC):
    """What ``SQLiteStore`` and ``PostgresStore`` do alike: ``dialect`` spells their SQL,
    ``where`` names the store in messages, ``_rows`` runs one query in one snapshot,
    ``_write`` one committed write."""

    dialect: ClassVar[Dialect]

    @property
    @abstractmethod
    def where(self) -> str:
        """Where the sessions are, fit to print (never a password)."""

    @abstractmethod
    def _rows(self, query: str, params: Sequence[Any]) -> list[Any]:
        """The rows of ``query``, read in one snapshot."""

    @abstractmethod
    def _write(self, fn: Callable[[Any], T]) -> T:
        """``fn`` of a connection, committed as one write."""

    @property
    @abstractmethod
    def _taken(self) -> type[Exception]:
        """The error the driver raises for a row whose key is taken."""

    def create_session(self, info: SessionInfo) -> None:
        d = self.dialect
        query = (f"INSERT INTO {d.tables}sessions (id, created, updated, provider, model, "
                 f"workspace, title, private, untrusted, batch, batch_item) "
                 f"VALUES ({', '.join([d.param] * 11)})")
        row = (d.text(info.id), info.created, info.updated, d.text(info.provider),
               d.text(info.model), d.text(info.workspace), d.text(info.title),
               info.taint.private, info.taint.untrusted, d.text(info.batch),
               d.text(info.batch_item))
        taken = self._taken

        def write(conn: Any) -> None:
            try:
                conn.execute(query, row)
            except taken:
                raise SessionConflict(f"a session with id {info.id!r} already exists") from None

        self._write(write)

    def list(self, limit: int = 50, *, text: str | None = None, model: str | None = None,
             batch: str | None = None) -> list[SessionInfo]:
        d = self.dialect
        p = d.param
        where, params = [d.true], []
        if model is not None:
            where.append(f"(s.model = {p} OR s.provider || ':' || s.model = {p})")
            params += [d.text(model), d.text(model)]
        if batch is not None:
            where.append(f"s.batch = {p}")
            params.append(d.text(batch))
        if text is not None:
            where.append(f"EXISTS (SELECT 1 FROM {d.tables}messages m WHERE m.session_id = "
                         f"s.id AND {d.contains.format(column='m.search', param=p)})")
            params.append(d.text(fold(text)))
        rows = self._rows(f"SELECT {info_columns(d)} FROM {d.tables}sessions s "
                          f"WHERE {' AND '.join(where)} "
                          f"ORDER BY s.updated DESC, s.id LIMIT {p}",
                          (*params, d.limit(limit)))
        return [info(r) for r in rows]

    def _not_found(self, session_id: str) -> SessionNotFound:
        """A write found no session ``session_id`` (another process deleted it)."""
        return SessionNotFound(f"no session {session_id!r} in {self.where} (deleted?)")

    def _missing(self, session_id: str) -> SessionNotFound:
        """A read found no session ``session_id``."""
        return SessionNotFound(f"no session {session_id!r} in {self.where} "
                               f"(`tether sessions list` shows them)")
