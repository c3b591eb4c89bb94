"""The SQLite session store: written as it happens, survives kills, restarts and a second
writer, and migrates old files. Real files in tmp_path, real processes, no sleeps."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tether import Agent, Capabilities, Decision, tool
from tether.approval import ApprovalRequest
from tether.config import load_config
from tether.messages import Text, ToolCall, ToolResult
from tether.providers.scripted import Scripted, call
from tether.store import (
    SCHEMA_VERSION,
    Session,
    SessionConflict,
    SessionNotFound,
    SQLiteStore,
    StoreError,
    default_store_path,
    migrate,
)
from tether.trust import Taint

CHILD = Path(__file__).with_name("store_child.py")
WAIT = 60.0  # a bound on waiting for a child's line; the waits end on the line itself


class Child:
    """A tests/store_child.py process whose stdout lines we wait on."""

    def __init__(self, *args: str, stdin: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str) -> str:
        while True:
            try:
                line = self.lines.get(timeout=WAIT)
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"no line {prefix!r} from the child within {WAIT}s") \
                    from None
            if line is None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"the child ended before printing {prefix!r}:\n{err}")
            if line.startswith(prefix):
                return line

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=WAIT) == -signal.SIGKILL


@tool(capabilities=Capabilities(private_data=True))
def read_secret() -> str:
    """Read the user's secret note."""
    return "the vault code is 0417"


@tool(capabilities=Capabilities(untrusted_input=True, external_send=True))
def fetch(url: str) -> str:
    """Fetch a page."""
    return "<html>hello</html>"


deleted: list[str] = []


@tool(needs_approval=True, capabilities=Capabilities(destructive=True))
def delete_note(name: str) -> str:
    """Delete a note."""
    deleted.append(name)
    return f"deleted {name}"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


# --- killed processes -------------------------------------------------------------------------


def test_a_run_killed_while_a_tool_runs_keeps_every_message_and_the_taint(db: Path) -> None:
    child = Child("kill-during-tools", str(db))
    session_id = child.wait_for("session ").split()[1]
    child.wait_for("tool-finished read_secret")
    child.kill()

    session = Session.load(session_id, SQLiteStore(db))
    roles = [m.role for m in session.messages]
    assert roles == ["user", "assistant"]  # the turn's results were never appended
    assert [c.name for c in session.messages[1].tool_calls] == ["read_secret", "slow_fetch"]
    # The secret was read before the kill: the taint timeline says so, though no stored
    # message carries it. Never cleaner.
    assert session.taint == Taint(private=True, untrusted=False)
    events = session.events()
    assert [e["tool"] for e in events if e["kind"] == "tool_started"] == \
        ["read_secret", "slow_fetch"]
    assert [e["tool"] for e in events if e["kind"] == "tool_finished"] == ["read_secret"]
    assert [e["cause"] for e in events if e["kind"] == "taint_changed"] == ["read_secret"]
    assert session.info.last_stop is None  # the run never finished

    # Continuing: the unanswered calls are closed as interrupted, the taint comes along.
    model = Scripted(["I could not finish reading; shall I try again?"])
    result = Agent(model, tools=[read_secret, fetch]).run_sync("Go on", session=session)
    assert result.stop_cause == "completed" and result.taint.private
    sent = model.requests[0].messages
    interrupted = sent[2].tool_results
    assert [r.call_id for r in interrupted] == ["c1", "c2"]
    assert all(r.is_error and r.content.startswith("Interrupted") for r in interrupted)
    assert [m.role for m in Session.load(session_id, SQLiteStore(db)).messages] == \
        ["user", "assistant", "tool", "user", "assistant"]


def test_a_run_killed_mid_stream_loses_only_the_response_in_flight(db: Path) -> None:
    child = Child("kill-during-model", str(db))
    session_id = child.wait_for("session ").split()[1]
    child.wait_for("model-streaming")
    child.kill()

    session = Session.load(session_id, SQLiteStore(db))
    messages = session.messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[2].tool_results[0].content == "the vault code is 0417"
    assert session.taint.private
    assert all("The vault code is" not in m.text for m in messages)  # the partial answer

    # `sessions resume`: the run continues from its last message, asking the model again.
    model = Scripted(["The vault code is 0417."])
    result = asyncio.run(Agent(model, tools=[read_secret]).resume(session, {}))
    assert result.stop_cause == "completed" and result.text == "The vault code is 0417."
    assert len(model.requests[0].messages) == 3
    reloaded = Session.load(session_id, SQLiteStore(db))
    assert [m.role for m in reloaded.messages] == ["user", "assistant", "tool", "assistant"]
    assert reloaded.taint.private and reloaded.info.last_stop == "completed"


# --- pausing for approval across a restart -------------------------------------------------------


@pytest.mark.parametrize("allow", [True, False])
def test_a_paused_approval_resumes_in_a_new_process(db: Path, allow: bool) -> None:
    child = Child("pause", str(db))
    session_id = child.wait_for("session ").split()[1]
    assert child.wait_for("stopped") == "stopped paused c2"
    assert child.proc.wait(timeout=WAIT) == 0

    session = Session.load(session_id, SQLiteStore(db))
    assert session.info.paused and session.info.last_stop == "paused"
    pending = session.pending
    assert pending is not None
    assert [(c.call_id, c.tool, c.arguments, c.reason) for c in pending.calls] == \
        [("c2", "delete_note", {"name": "old"}, "needs_approval")]
    assert session.taint.private

    deleted.clear()
    decision = Decision.allow() if allow else Decision.deny("keep it")
    model = Scripted(["Done." if allow else "I left the note alone."])
    agent = Agent(model, tools=[read_secret, delete_note])  # no approver: decisions are given
    result = asyncio.run(agent.resume(session, {"c2": decision}))
    assert result.stop_cause == "completed"
    assert deleted == (["old"] if allow else [])
    assert [r.status for r in result.tool_calls] == (["ok"] if allow else ["denied"])
    assert result.taint.private  # the taint came back with the session

    reloaded = Session.load(session_id, SQLiteStore(db))
    assert reloaded.pending is None and not reloaded.info.paused
    assert [o["stop_cause"] for o in reloaded.outcomes] == ["paused", "completed"]
    assert [m.role for m in reloaded.messages] == \
        ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_allow_for_this_session_survives_a_reload(db: Path) -> None:
    class AllowForSession:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def approve(self, request: ApprovalRequest) -> Decision:
            self.asked.append(request.tool)
            return Decision.allow_for_session()

    store = SQLiteStore(db)
    session = Session.create(store)
    approver = AllowForSession()
    Agent(Scripted([call("delete_note", name="a"), "ok"]), tools=[delete_note],
          approver=approver).run_sync("delete a", session=session)
    assert approver.asked == ["delete_note"]

    again = Session.load(session.id, SQLiteStore(db))
    assert again.conversation().session_approvals == {"delete_note"}
    result = Agent(Scripted([call("delete_note", name="b"), "ok"]), tools=[delete_note]) \
        .run_sync("delete b", session=again)  # no approver now: the cached answer counts
    assert [r.status for r in result.tool_calls] == ["ok"]


# --- concurrency ------------------------------------------------------------------------------


def test_two_processes_write_one_store_at_once(db: Path) -> None:
    SQLiteStore(db).close()  # create the schema first, so both start writing, not migrating
    runs = 30
    writers = [Child("writer", str(db), name, str(runs), stdin=True) for name in ("a", "b")]
    for w, name in zip(writers, ("a", "b"), strict=True):
        w.wait_for(f"ready {name}")
    for w in writers:  # both start together
        assert w.proc.stdin is not None
        w.proc.stdin.write("go\n")
        w.proc.stdin.flush()
    for w, name in zip(writers, ("a", "b"), strict=True):
        w.wait_for(f"done {name}")
        assert w.proc.wait(timeout=WAIT) == 0

    store = SQLiteStore(db)
    infos = store.list(limit=1000)
    assert len(infos) == 2 * runs
    for info in infos:
        record = store.load(info.id)
        assert [m["role"] for m in record.messages] == ["user", "assistant", "tool", "assistant"]
        assert record.taint.private and info.last_stop == "completed"
        assert len(store.events(info.id)) >= 8
    titles = sorted(i.title for i in infos)
    assert titles == sorted([f"a {n}" for n in range(runs)] + [f"b {n}" for n in range(runs)])
    # The two really wrote at the same time: their sessions' lifetimes interleave.
    spans = {w: [(i.created, i.updated) for i in infos if i.title.startswith(w)]
             for w in ("a", "b")}
    a_start, a_end = min(c for c, _ in spans["a"]), max(u for _, u in spans["a"])
    b_start, b_end = min(c for c, _ in spans["b"]), max(u for _, u in spans["b"])
    assert a_start < b_end and b_start < a_end


def test_two_writers_continuing_one_session_conflict_instead_of_interleaving(db: Path) -> None:
    first = Session.create(SQLiteStore(db))
    Agent(Scripted(["hello"])).run_sync("hi", session=first)
    a = Session.load(first.id, SQLiteStore(db))
    b = Session.load(first.id, SQLiteStore(db))
    Agent(Scripted(["from a"])).run_sync("a speaks", session=a)
    with pytest.raises(SessionConflict, match="already written by another process"):
        Agent(Scripted(["from b"])).run_sync("b speaks", session=b)
    texts = [m.text for m in Session.load(first.id, SQLiteStore(db)).messages]
    assert texts == ["hi", "hello", "a speaks", "from a"]


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
    assert store.schema_version == SCHEMA_VERSION == 2
    session = Session.load("old", store)
    assert [m.text for m in session.messages] == ["hi"]
    assert session.taint == Taint(private=False, untrusted=True)
    # What v2 added works on the migrated file: a paused run keeps its pending calls.
    Agent(Scripted([call("delete_note", name="x", id="d1")]), tools=[delete_note],
          approver=_Deferring()).run_sync("delete x", session=session)
    assert [c.call_id for c in Session.load("old", store).pending.calls] == ["d1"]  # type: ignore[union-attr]


class _Deferring:
    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.defer()


def test_a_store_written_by_a_newer_tether_is_refused_naming_the_versions(db: Path) -> None:
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match=r"newer tether \(schema version 99; this one knows "
                                         r"up to 2\)"):
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


# --- sessions ---------------------------------------------------------------------------------


def test_the_taint_is_the_most_tainted_of_every_record(db: Path) -> None:
    store = SQLiteStore(db)
    session = Session.create(store)
    conv = session.conversation()
    conv.grow_taint(Taint(private=True))
    conv.append(_user("one"))  # the message row carries private
    store.record_taint(session.id, Taint(untrusted=True), "fetch")  # the timeline, untrusted
    assert Session.load(session.id, store).taint == Taint(private=True, untrusted=True)
    assert Session.load(session.id, store).conversation().taint == \
        Taint(private=True, untrusted=True)


def _user(text: str) -> object:
    from tether.messages import Message

    return Message("user", (Text(text),))


def test_every_message_part_round_trips_through_the_store(db: Path) -> None:
    from tether.messages import Image, Message, Reasoning

    store = SQLiteStore(db)
    session = Session.create(store)
    messages = [
        Message("user", (Text("look"), Image("image/png", data=b"\x89PNG\x00\xff"))),
        Message("assistant", (Reasoning("hmm", "anthropic", signature="sig"),
                              ToolCall("c1", "fetch", '{"url": "x"}', {"thought": "s"}))),
        Message("tool", (ToolResult("c1", "fetch", "body", False, "untrusted", {"a": 1}),)),
    ]
    conv = session.conversation()
    for m in messages:
        conv.append(m)
    assert Session.load(session.id, store).messages == messages


def test_listing_and_deleting_sessions(db: Path) -> None:
    store = SQLiteStore(db)
    a = Session.create(store, provider="local", model="qwen", title="first  one")
    b = Session.create(store, title="second")
    Agent(Scripted(["hi"])).run_sync("hello", session=a)  # a is now the most recent
    infos = store.list()
    assert [i.id for i in infos] == [a.id, b.id]
    assert (infos[0].title, infos[0].message_count, infos[0].last_stop) == \
        ("first one", 2, "completed")
    assert store.delete(a.id) and not store.delete(a.id)
    with pytest.raises(SessionNotFound, match=a.id):
        Session.load(a.id, store)
    assert store.list()[0].id == b.id
    with sqlite3.connect(db) as conn:  # the cascade removed its rows
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?",
                            (a.id,)).fetchone()[0] == 0


def test_a_session_id_can_be_chosen_and_is_unique(db: Path) -> None:
    store = SQLiteStore(db)
    Session.create(store, id="notes")
    with pytest.raises(SessionConflict, match="notes"):
        Session.create(store, id="notes")
    assert Session.open("notes", store).id == "notes"
    assert Session.open("fresh", store, title="t").info.title == "t"


def test_writes_to_a_deleted_session_fail_loudly(db: Path) -> None:
    store = SQLiteStore(db)
    session = Session.create(store)
    conv = session.conversation()
    store.delete(session.id)
    with pytest.raises(SessionNotFound):
        conv.append(_user("lost?"))  # type: ignore[arg-type]


def test_sessions_default_to_the_store_in_tether_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STORE", str(tmp_path / "env" / "s.db"))
    session = Session.create(title="env")
    assert Session.load(session.id).info.title == "env"
    assert (tmp_path / "env" / "s.db").exists()
    assert os.environ["TETHER_STORE"]
