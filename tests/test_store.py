"""What only the SQLite session store does: its file, its place, its schema migrations.
What every store does (kills, restarts, second writers, taint) is
tests/test_store_conformance.py, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from tether import Agent, Capabilities, Decision, tool
from tether.approval import ApprovalRequest
from tether.config import load_config
from tether.providers.scripted import Scripted, call
from tether.store import (
    SCHEMA_VERSION,
    Session,
    SQLiteStore,
    StoreError,
    default_store_path,
    migrate,
)
from tether.trust import Taint


@tool(needs_approval=True, capabilities=Capabilities(destructive=True))
def delete_note(name: str) -> str:
    """Delete a note."""
    return f"deleted {name}"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


# --- the file and its schema ------------------------------------------------------------------


def test_a_version_1_store_is_migrated_and_its_sessions_continue(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    assert migrate(conn, target=1) == 0
    conn.execute("INSERT INTO sessions (id, created, updated, title) VALUES "
                 "('old', 1.0, 1.0, 'from v1')")
    message = json.dumps({"role": "user", "parts": [{"kind": "text", "text": "hi"}]})
    conn.execute("INSERT INTO messages VALUES ('old', 0, 'user', ?, 0, 0, 1.0)", (message,))
    conn.execute("INSERT INTO taint (session_id, private, untrusted, cause, created) VALUES "
                 "('old', 0, 1, 'fetch', 1.0)")
    conn.close()

    store = SQLiteStore(db)
    assert store.schema_version == SCHEMA_VERSION == 3
    session = Session.load("old", store)
    assert [m.text for m in session.messages] == ["hi"]
    assert session.taint == Taint(private=False, untrusted=True)
    # The messages stored before v3 are searched like new ones.
    assert [i.id for i in store.list(text="HI")] == ["old"] and store.list(text="ho") == []
    # What v2 added works on the migrated file: a paused run keeps its pending calls.
    Agent(Scripted([call("delete_note", name="x", id="d1")]), tools=[delete_note],
          approver=_Deferring()).run_sync("delete x", session=session)
    assert [c.call_id for c in Session.load("old", store).pending.calls] == ["d1"]  # type: ignore[union-attr]


def test_a_version_2_store_gets_the_search_text_of_every_message_a_chunk_at_a_time(
        db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    migrate(conn, target=2)
    for n in range(3):
        conn.execute("INSERT INTO sessions (id, created, updated) VALUES (?, 1.0, 1.0)",
                     (f"s{n}",))
        conn.executemany("INSERT INTO messages VALUES (?, ?, 'user', ?, 0, 0, 1.0)", [
            (f"s{n}", seq, json.dumps({"role": "user", "parts": [
                {"kind": "text", "text": f"Note {n}-{seq}"}]})) for seq in range(400)])
    conn.close()
    store = SQLiteStore(db)  # 1,200 messages: more than one chunk of the migration
    assert [i.id for i in store.list(text="NOTE 2-399")] == ["s2"]
    assert [i.id for i in store.list(text="note 0-0")] == ["s0"]
    with sqlite3.connect(db) as check:
        assert check.execute("SELECT COUNT(*) FROM messages WHERE search = ''").fetchone() == \
            (0,)


class _Deferring:
    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.defer()


def test_a_store_written_by_a_newer_tether_is_refused_naming_the_versions(db: Path) -> None:
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match=r"newer tether \(schema version 99; this one knows "
                                         r"up to 3\)"):
        SQLiteStore(db)


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database " * 100)
    with pytest.raises(StoreError, match=r"notes\.txt"):
        SQLiteStore(path)


def test_the_store_file_is_private_to_the_user_and_in_wal_mode(db: Path) -> None:
    SQLiteStore(db).close()
    assert (db.stat().st_mode & 0o777) == 0o600
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_store_path_comes_from_env_then_config_then_the_data_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tether.toml").write_text('[store]\npath = "/srv/tether/s.db"\n')
    cfg = load_config(tmp_path, env={})
    monkeypatch.delenv("TETHER_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_store_path() == tmp_path / "data" / "tether" / "sessions.db"
    assert default_store_path(cfg.store.path) == Path("/srv/tether/s.db")
    monkeypatch.setenv("TETHER_STORE", str(tmp_path / "env.db"))
    assert default_store_path(cfg.store.path) == tmp_path / "env.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.delenv("TETHER_STORE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "tether" / "sessions.db"


def test_sessions_default_to_the_store_in_tether_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STORE", str(tmp_path / "env" / "s.db"))
    session = Session.create(title="env")
    assert Session.load(session.id).info.title == "env"
    assert (tmp_path / "env" / "s.db").exists()
    assert os.environ["TETHER_STORE"]
