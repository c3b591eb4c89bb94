"""A session written to a journal and replayed into a store is the session the same run
writes to the store directly (a durable run is logged this way); hostile entries are
refused before anything is written; a journal over its bound loses its events first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether import Agent, tool
from tether.messages import Message, Text, message_to_dict
from tether.providers.scripted import Scripted, call
from tether.store.journal import JournalError, bounded, journal_session, replay
from tether.store.session import Session
from tether.store.sqlite import SQLiteStore


@tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def agent() -> Agent:
    return Agent(Scripted([call("add", a=2, b=3), "The sum is 5.", "Twice that is 10."]),
                 tools=[add])


def comparable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events less what differs between two runs of one script (run ids, durations)."""
    return [{k: v for k, v in e.items() if k not in ("run_id", "duration_secs", "id", "at")}
            for e in events]


async def test_a_replayed_journal_leaves_the_session_the_run_writes_directly(
        tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    direct = Session.create(store, title="What is 2+3?")
    async with agent() as a:
        for turn in ("What is 2+3?", "And twice that?"):
            await a.run(turn, session=direct)

    session, journal = journal_session(iter(["r1", "r2"]).__next__)
    async with agent() as a:
        for turn in ("What is 2+3?", "And twice that?"):
            await a.run(turn, session=session)
    replayed = Session.create(store, title="What is 2+3?")
    assert replay(journal.entries, store, replayed.id) == len(journal.entries)

    want, got = Session.load(direct.id, store), Session.load(replayed.id, store)
    assert [m.role for m in got.messages] == ["user", "assistant", "tool", "assistant",
                                              "user", "assistant"]
    assert got.messages == want.messages
    assert got.taint == want.taint
    assert got.outcomes == want.outcomes
    assert got.events() and comparable(got.events()) == comparable(want.events())
    assert {e["run_id"] for e in got.events()} == {"r1", "r2"}
    info = store.load(replayed.id).info
    assert info.message_count == 6 and info.last_stop == "completed"


@pytest.mark.parametrize("entries", [
    "not a list", [["message"]], [["nonsense", 1]], [["message", -1, {}, {}]],
    [["message", 0, {"role": "user"}, {}]], [["event", "r", {"no": "kind"}]],
    [["outcome", "r", [], None]], [["approvals", "all"]], [[]], [5],
])
def test_entries_that_are_not_a_journals_are_refused_before_anything_is_written(
        tmp_path: Path, entries: Any) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    session = Session.create(store)
    good = ["approvals", ["add"]]
    with pytest.raises(JournalError):
        replay([good, *entries] if isinstance(entries, list) else entries, store, session.id)
    assert Session.load(session.id, store).messages == []
    assert store.load(session.id).approvals == []


def test_a_journal_over_its_bound_keeps_its_messages_and_outcomes_then_only_outcomes() -> None:
    message = message_to_dict(Message("user", (Text("x" * 300),)))
    entries: list[list[Any]] = [
        ["message", 0, message, {}], ["event", "r", {"kind": "notice", "m": "y" * 300}],
        ["outcome", "r", {"text": "done"}, None]]
    assert bounded(entries, 10_000) == entries
    kept = bounded(entries, 500)
    assert [e[0] for e in kept] == ["message", "outcome", "event"]
    assert "its events were left out" in kept[-1][2]["message"]
    least = bounded(entries, 100)
    assert [e[0] for e in least] == ["outcome", "event"]
    assert "its events and messages were left out" in least[-1][2]["message"]
