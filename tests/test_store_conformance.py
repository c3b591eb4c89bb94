"""One suite, every store: what a SessionStore promises, run against the SQLite file and a
real PostgreSQL server (tests/servers/postgres.py) alike.

Written as it happens, survives kills, restarts and a second writer; the taint is never
cleaner after a reload; two writers continuing one session conflict; writers of different
sessions lose nothing. Real files, a real server on loopback, real processes, no sleeps.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, Capabilities, Decision, tool
from tether.approval import ApprovalRequest
from tether.messages import Message, Text, ToolCall, ToolResult
from tether.providers.scripted import Scripted, call
from tether.store import (
    Session,
    SessionConflict,
    SessionInfo,
    SessionNotFound,
    SessionStore,
    SQLiteStore,
)
from tether.trust import Taint

CHILD = Path(__file__).with_name("store_child.py")
WAIT = 60.0  # a bound on waiting for a child's line; the waits end on the line itself


# --- the stores under test --------------------------------------------------------------------


@dataclass
class Backend:
    """One kind of store, and a way to open another handle on the same sessions (as
    another process would)."""

    kind: str
    target: str  # a SQLite file or a PostgreSQL URL: what tests/store_child.py opens
    opened: list[SessionStore] = field(default_factory=list)

    def open(self) -> SessionStore:
        store: SessionStore
        if self.kind == "postgres":
            from tether.store.postgres import PostgresStore

            store = PostgresStore(self.target)
        else:
            store = SQLiteStore(self.target)
        self.opened.append(store)
        return store

    def rows(self, table: str, session_id: str) -> int:
        """How many rows of ``table`` belong to the session, read around the store."""
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.target) as conn:
                row = conn.execute(f"SELECT COUNT(*) FROM tether.{table} "
                                   f"WHERE session_id = %s", (session_id,)).fetchone()
        else:
            with sqlite3.connect(self.target) as conn:
                row = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE session_id = ?",
                                   (session_id,)).fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "postgres":
        target = request.getfixturevalue("postgres_url")
    else:
        target = str(tmp_path / "sessions.db")
    opened = Backend(request.param, target)
    try:
        yield opened
    finally:
        for store in opened.opened:
            store.close()


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    return backend.open()


# --- a child process, and the tools the runs use ------------------------------------------------


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


def _user(text: str) -> Message:
    return Message("user", (Text(text),))


# --- killed processes -------------------------------------------------------------------------


def test_a_run_killed_while_a_tool_runs_keeps_every_message_and_the_taint(
        backend: Backend) -> None:
    child = Child("kill-during-tools", backend.target)
    session_id = child.wait_for("session ").split()[1]
    child.wait_for("tool-finished read_secret")
    child.kill()

    session = Session.load(session_id, backend.open())
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
    assert [m.role for m in Session.load(session_id, backend.open()).messages] == \
        ["user", "assistant", "tool", "user", "assistant"]


def test_a_run_killed_mid_stream_loses_only_the_response_in_flight(backend: Backend) -> None:
    child = Child("kill-during-model", backend.target)
    session_id = child.wait_for("session ").split()[1]
    child.wait_for("model-streaming")
    child.kill()

    session = Session.load(session_id, backend.open())
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
    reloaded = Session.load(session_id, backend.open())
    assert [m.role for m in reloaded.messages] == ["user", "assistant", "tool", "assistant"]
    assert reloaded.taint.private and reloaded.info.last_stop == "completed"


# --- pausing for approval across a restart -------------------------------------------------------


@pytest.mark.parametrize("allow", [True, False])
def test_a_paused_approval_resumes_in_a_new_process(backend: Backend, allow: bool) -> None:
    child = Child("pause", backend.target)
    session_id = child.wait_for("session ").split()[1]
    assert child.wait_for("stopped") == "stopped paused c2"
    assert child.proc.wait(timeout=WAIT) == 0

    session = Session.load(session_id, backend.open())
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

    reloaded = Session.load(session_id, backend.open())
    assert reloaded.pending is None and not reloaded.info.paused
    assert [o["stop_cause"] for o in reloaded.outcomes] == ["paused", "completed"]
    assert [m.role for m in reloaded.messages] == \
        ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_allow_for_this_session_survives_a_reload(backend: Backend) -> None:
    class AllowForSession:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def approve(self, request: ApprovalRequest) -> Decision:
            self.asked.append(request.tool)
            return Decision.allow_for_session()

    session = Session.create(backend.open())
    approver = AllowForSession()
    Agent(Scripted([call("delete_note", name="a"), "ok"]), tools=[delete_note],
          approver=approver).run_sync("delete a", session=session)
    assert approver.asked == ["delete_note"]

    again = Session.load(session.id, backend.open())
    assert again.conversation().session_approvals == {"delete_note"}
    result = Agent(Scripted([call("delete_note", name="b"), "ok"]), tools=[delete_note]) \
        .run_sync("delete b", session=again)  # no approver now: the cached answer counts
    assert [r.status for r in result.tool_calls] == ["ok"]


def test_outcomes_are_kept_in_order_and_each_run_replaces_the_pending_state(
        store: SessionStore) -> None:
    session = Session.create(store)
    paused = {"version": 2, "calls": [{"call_id": "c1"}]}
    store.record_outcome(session.id, "r1", {"stop_cause": "paused"}, paused)
    info = store.load(session.id).info
    assert (info.paused, info.last_stop) == (True, "paused")
    assert store.load(session.id).pending == paused
    again = {"version": 2, "calls": [{"call_id": "c2"}]}
    store.record_outcome(session.id, "r2", {"stop_cause": "paused"}, again)
    assert store.load(session.id).pending == again  # replaced, not added
    store.record_outcome(session.id, "r3", {"stop_cause": "completed",
                                            "taint": {"private": True}}, None)
    record = store.load(session.id)
    assert record.pending is None and not record.info.paused
    assert record.info.last_stop == "completed"
    assert [o["stop_cause"] for o in record.outcomes] == ["paused", "paused", "completed"]
    assert record.taint.private  # an outcome's taint joins the session's


def test_allow_for_this_session_is_a_set_that_each_write_replaces(store: SessionStore) -> None:
    session = Session.create(store)
    store.record_approvals(session.id, ["write_file", "delete_note", "write_file"])
    assert store.load(session.id).approvals == ["delete_note", "write_file"]
    store.record_approvals(session.id, ["fetch"])
    assert store.load(session.id).approvals == ["fetch"]
    store.record_approvals(session.id, [])
    assert store.load(session.id).approvals == []


# --- concurrency ------------------------------------------------------------------------------


def test_two_processes_write_one_store_at_once(backend: Backend) -> None:
    backend.open().close()  # create the schema first, so both start writing, not migrating
    runs = 30
    writers = [Child("writer", backend.target, name, str(runs), stdin=True)
               for name in ("a", "b")]
    for w, name in zip(writers, ("a", "b"), strict=True):
        w.wait_for(f"ready {name}")
    for w in writers:  # both start together
        assert w.proc.stdin is not None
        w.proc.stdin.write("go\n")
        w.proc.stdin.flush()
    for w, name in zip(writers, ("a", "b"), strict=True):
        w.wait_for(f"done {name}")
        assert w.proc.wait(timeout=WAIT) == 0

    store = backend.open()
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


def test_threads_writing_different_sessions_through_one_store_lose_nothing(
        store: SessionStore) -> None:
    threads, per_thread = 6, 15
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def work(name: str) -> None:
        try:
            start.wait(timeout=WAIT)
            for n in range(per_thread):
                session = Session.create(store, title=f"{name} {n}")
                conv = session.conversation()
                for k in range(4):
                    conv.append(_user(f"{name} {n} {k}"))
                    store.append_event(session.id, "r", {"kind": "note", "k": k})
                store.record_taint(session.id, Taint(private=n % 2 == 0), f"{name}")
                store.record_outcome(session.id, "r", {"stop_cause": "completed"}, None)
        except BaseException as e:  # reported below, in the test's thread
            failures.append(e)

    workers = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=WAIT)
    assert not failures, failures
    infos = store.list(limit=10_000)
    assert len(infos) == threads * per_thread
    for info in infos:
        record = store.load(info.id)
        name, n = info.title.split()
        assert [m["parts"][0]["text"] for m in record.messages] == \
            [f"{name} {n} {k}" for k in range(4)]
        assert [e["k"] for e in store.events(info.id)] == [0, 1, 2, 3]
        assert record.taint.private == (int(n) % 2 == 0)
        assert info.last_stop == "completed" and info.message_count == 4


def test_two_writers_continuing_one_session_conflict_instead_of_interleaving(
        backend: Backend) -> None:
    first = Session.create(backend.open())
    Agent(Scripted(["hello"])).run_sync("hi", session=first)
    a = Session.load(first.id, backend.open())
    b = Session.load(first.id, backend.open())
    Agent(Scripted(["from a"])).run_sync("a speaks", session=a)
    with pytest.raises(SessionConflict, match="already written by another process"):
        Agent(Scripted(["from b"])).run_sync("b speaks", session=b)
    texts = [m.text for m in Session.load(first.id, backend.open()).messages]
    assert texts == ["hi", "hello", "a speaks", "from a"]


def test_two_writers_racing_for_one_position_one_wins_and_one_conflicts(
        backend: Backend) -> None:
    stores = [backend.open(), backend.open()]
    session = Session.create(stores[0])
    for seq in range(20):  # many rounds: the two really race for some of them
        race = threading.Barrier(2)
        outcome: dict[str, str] = {}

        def write(name: str, store: SessionStore, seq: int = seq,
                  race: threading.Barrier = race, outcome: dict[str, str] = outcome) -> None:
            race.wait(timeout=WAIT)
            try:
                store.append_message(session.id, seq, {"role": "user", "parts": [
                    {"kind": "text", "text": name}]}, Taint())
                outcome[name] = "written"
            except SessionConflict:
                outcome[name] = "conflict"

        pair = [threading.Thread(target=write, args=(n, s)) for n, s in zip("ab", stores,
                                                                            strict=True)]
        for t in pair:
            t.start()
        for t in pair:
            t.join(timeout=WAIT)
        assert sorted(outcome.values()) == ["conflict", "written"], outcome
        winner = next(n for n, v in outcome.items() if v == "written")
        assert stores[1].load(session.id).messages[seq]["parts"][0]["text"] == winner
    assert stores[0].load(session.id).info.message_count == 20


# --- what a session holds -----------------------------------------------------------------------


def test_the_taint_is_the_most_tainted_of_every_record(store: SessionStore) -> None:
    session = Session.create(store)
    conv = session.conversation()
    conv.grow_taint(Taint(private=True))
    conv.append(_user("one"))  # the message row carries private
    store.record_taint(session.id, Taint(untrusted=True), "fetch")  # the timeline, untrusted
    assert Session.load(session.id, store).taint == Taint(private=True, untrusted=True)
    assert Session.load(session.id, store).conversation().taint == \
        Taint(private=True, untrusted=True)


def test_the_taint_is_never_cleaner_after_a_reload(backend: Backend) -> None:
    store = backend.open()
    session = Session.create(store)
    store.record_taint(session.id, Taint(private=True), "read_secret")
    # Later writes that carry no taint (or claim a clean one) clean nothing.
    store.record_taint(session.id, Taint(), "a clean claim")
    store.append_message(session.id, 0, {"role": "user", "parts": []}, Taint())
    store.record_outcome(session.id, "r", {"stop_cause": "completed", "taint": {}}, None)
    for reader in (store, backend.open()):
        record = reader.load(session.id)
        assert record.taint == Taint(private=True)
        assert record.info.taint == Taint(private=True)  # the session row's running maximum
        assert [i.taint for i in reader.list()] == [Taint(private=True)]
        assert Session.load(session.id, reader).conversation().taint == Taint(private=True)


def test_every_message_part_round_trips_through_the_store(backend: Backend) -> None:
    from tether.messages import Image, Reasoning

    session = Session.create(backend.open())
    messages = [
        Message("user", (Text("look"), Image("image/png", data=b"\x89PNG\x00\xff"))),
        Message("assistant", (Reasoning("hmm", "anthropic", signature="sig"),
                              ToolCall("c1", "fetch", '{"url": "x"}', {"thought": "s"}))),
        Message("tool", (ToolResult("c1", "fetch", "body", False, "untrusted", {"a": 1}),)),
    ]
    conv = session.conversation()
    for m in messages:
        conv.append(m)
    assert Session.load(session.id, backend.open()).messages == messages


def test_hostile_text_round_trips_or_is_repaired_but_never_fails_a_write(
        backend: Backend) -> None:
    store = backend.open()
    odd = "nul\x00 bell\x07 escape\x1b[31m rtl\u202e emoji\U0001f600 quote' \"; DROP TABLE x;--"
    session = Session.create(store, title=f"title {odd}", provider=odd, model=odd)
    conv = session.conversation()
    conv.append(Message("tool", (ToolResult("c1", "fetch", odd, False, "untrusted"),)))
    conv.append(_user("half a pair \ud83d alone"))  # a lone surrogate: stored as U+FFFD
    store.append_event(session.id, f"run {odd}", {"kind": "note", "text": odd})
    store.record_taint(session.id, Taint(untrusted=True), odd)
    store.record_approvals(session.id, [odd])

    again = Session.load(session.id, backend.open())
    assert again.messages[0].tool_results[0].content == odd  # documents: exactly
    assert again.messages[1].text == "half a pair \ufffd alone"
    assert [e["text"] for e in again.events()] == [odd]
    assert again.info.title.startswith("title nul")
    assert again.taint.untrusted
    assert len(again.conversation().session_approvals) == 1


def test_events_are_kept_in_order_and_read_by_run(store: SessionStore) -> None:
    session = Session.create(store)
    for n in range(5):
        store.append_event(session.id, "r1" if n < 3 else "r2", {"kind": "step", "n": n})
    assert [(e["run_id"], e["n"]) for e in store.events(session.id)] == \
        [("r1", 0), ("r1", 1), ("r1", 2), ("r2", 3), ("r2", 4)]
    assert [e["n"] for e in store.events(session.id, "r2")] == [3, 4]
    assert store.events(session.id, "r9") == []
    assert store.events(Session.create(store).id) == []
    with pytest.raises(SessionNotFound):
        store.events("nobody")


def test_listing_and_deleting_sessions(backend: Backend) -> None:
    store = backend.open()
    a = Session.create(store, provider="local", model="qwen", title="first  one")
    b = Session.create(store, title="second")
    Agent(Scripted(["hi"])).run_sync("hello", session=a)  # a is now the most recent
    infos = store.list()
    assert [i.id for i in infos] == [a.id, b.id]
    assert (infos[0].title, infos[0].message_count, infos[0].last_stop) == \
        ("first one", 2, "completed")
    assert (infos[0].provider, infos[0].model) == ("local", "qwen")
    assert [i.id for i in store.list(limit=1)] == [a.id]
    assert backend.rows("events", a.id) > 0
    assert store.delete(a.id) and not store.delete(a.id)
    with pytest.raises(SessionNotFound, match=a.id):
        Session.load(a.id, store)
    assert [i.id for i in store.list()] == [b.id]
    for table in ("messages", "events", "outcomes"):  # the cascade removed its rows
        assert backend.rows(table, a.id) == 0


def test_a_session_id_can_be_chosen_and_is_unique(store: SessionStore) -> None:
    Session.create(store, id="notes")
    with pytest.raises(SessionConflict, match="notes"):
        Session.create(store, id="notes")
    assert Session.open("notes", store).id == "notes"
    assert Session.open("fresh", store, title="t").info.title == "t"
    Session.create(store, id="odd\x00id")
    assert Session.load("odd\x00id", store).id in {"odd\x00id", "odd\\x00id"}


def test_writes_to_a_deleted_session_fail_loudly(store: SessionStore) -> None:
    session = Session.create(store)
    conv = session.conversation()
    store.delete(session.id)
    with pytest.raises(SessionNotFound):
        conv.append(_user("lost?"))
    writes: list[tuple[str, Any]] = [
        ("append_message", lambda: store.append_message(session.id, 0, {"role": "user"},
                                                        Taint())),
        ("append_event", lambda: store.append_event(session.id, "r", {"kind": "x"})),
        ("record_taint", lambda: store.record_taint(session.id, Taint(private=True), "x")),
        ("record_outcome", lambda: store.record_outcome(session.id, "r", {}, None)),
        ("record_approvals", lambda: store.record_approvals(session.id, ["x"])),
        ("load", lambda: store.load(session.id)),
    ]
    for name, write in writes:
        with pytest.raises(SessionNotFound, match=session.id):
            write()
        assert name  # named for the failure report


def test_a_new_session_keeps_what_it_was_created_with(store: SessionStore) -> None:
    info = SessionInfo("given", 10.5, 11.25, "anthropic", "claude", "/srv/ws", "the title",
                       taint=Taint(untrusted=True))
    store.create_session(info)
    loaded = store.load("given")
    assert loaded.info == SessionInfo("given", 10.5, 11.25, "anthropic", "claude", "/srv/ws",
                                      "the title", 0, Taint(untrusted=True), None, False)
    assert (loaded.messages, loaded.approvals, loaded.pending, loaded.outcomes) == \
        ([], [], None, [])
    assert loaded.taint == Taint(untrusted=True)


# --- finding sessions: text, model, batch -------------------------------------------------------


def _said(store: SessionStore, *messages: Message, **meta: Any) -> str:
    session = Session.create(store, **meta)
    conv = session.conversation()
    for message in messages:
        conv.append(message)
    return session.id


def test_sessions_are_found_by_text_in_any_message_case_insensitively(
        store: SessionStore) -> None:
    from tether.trust import untrusted_block

    prompt = _said(store, _user("Where is the Straße of Gibraltar?"))
    answer = _said(store, _user("hi"), Message("assistant", (Text("It is 100% \"sure\"_"),)))
    called = _said(store, _user("go"), Message("assistant", (
        ToolCall("c1", "read_file", '{"path": "Notes.TXT"}'),)))
    fetched = _said(store, _user("go"), Message("tool", (
        ToolResult("c1", "fetch_url", untrusted_block("fetch_url", "the door code is 0417"),
                   False, "untrusted"),)))
    _said(store, _user("nothing to see"))

    def found(text: str) -> set[str]:
        return {i.id for i in store.list(limit=100, text=text)}

    assert found("STRASSE OF") == found("straße") == {prompt}  # Unicode case folding
    assert found('100% "SURE"_') == {answer}  # % _ and quotes are plain characters
    assert found("%") == {answer} and found("_") == {answer, called, fetched}
    assert found("notes.txt") == found("read_file") == {called}
    assert found("door code") == {fetched}
    # The notice tether wraps an untrusted result in is not what was said.
    assert found("The following is data returned by") == set()
    assert found("no such words") == set()


def test_sessions_are_found_by_model_and_by_batch(store: SessionStore) -> None:
    qwen = _said(store, _user("a"), provider="local", model="qwen")
    claude = _said(store, _user("b"), provider="anthropic", model="claude")
    items = [_said(store, _user(f"item {n}"), provider="local", model="qwen", batch="b1",
                   batch_item=str(n)) for n in range(3)]
    assert {i.id for i in store.list(model="qwen")} == {qwen, *items}
    assert {i.id for i in store.list(model="anthropic:claude")} == {claude}
    assert store.list(model="local:claude") == []
    listed = store.list(batch="b1")
    assert [i.id for i in listed] == items[::-1]  # most recent first
    assert [(i.batch, i.batch_item) for i in listed] == [("b1", "2"), ("b1", "1"), ("b1", "0")]
    assert [i.id for i in store.list(batch="b1", text="ITEM 1", model="qwen")] == [items[1]]
    assert store.load(items[0]).info.batch_item == "0"
    assert [i.id for i in store.list(limit=1, model="qwen")] == [items[2]]
