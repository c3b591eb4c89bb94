"""Pending states: a paused run as versioned data, and a corpus of saved ones that must keep
resuming."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, Capabilities, Decision, tool
from tether.conversation import PENDING_STATE_VERSION
from tether.errors import PendingStateError
from tether.providers.scripted import Scripted, call
from tether.run.pending import DeferringApprover, PendingState
from tether.trust import SecurityConfig

CORPUS = Path(__file__).parent / "corpus" / "pending"
ran: list[tuple[str, Any]] = []


@tool(capabilities=Capabilities(private_data=True))
def read_notes(folder: str) -> str:
    """Read the notes in a folder."""
    ran.append(("read_notes", folder))
    return "meeting at 10"


@tool(capabilities=Capabilities(untrusted_input=True, external_send=True))
def fetch_url(url: str) -> str:
    """Fetch a web page."""
    ran.append(("fetch_url", url))
    return "a page"


@tool(capabilities=Capabilities(external_send=True))
def send_email(to: str, body: str) -> str:
    """Send an email."""
    ran.append(("send_email", to))
    return "sent"


@tool(needs_approval=True, capabilities=Capabilities(destructive=True))
def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(("delete_file", path))
    return f"deleted {path}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append(("add", (a, b)))
    return a + b


CORPUS_TOOLS = [read_notes, fetch_url, send_email, delete_file, add]
CORPUS_FILES = sorted(CORPUS.glob("v*_*.json"))


def test_the_corpus_has_a_file_for_every_version_up_to_the_current_one() -> None:
    versions = {int(p.name[1:].split("_", 1)[0]) for p in CORPUS_FILES}
    assert versions == set(range(1, PENDING_STATE_VERSION + 1))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("allow", [True, False], ids=["allowed", "denied"])
def test_every_saved_pending_state_still_loads_and_resumes(path: Path, allow: bool) -> None:
    saved = json.loads(path.read_text())
    state = PendingState.from_dict(saved)
    assert state.version == saved["version"]
    # Every call knows its place in the paused turn (version 1 learns it from the message).
    unanswered = state.conversation.unanswered_calls
    assert all(unanswered[c.position].id == c.call_id for c in state.calls)  # type: ignore[index]
    taint_before = state.conversation.taint
    decisions = {c: Decision.allow() if allow else Decision.deny("not now") for c in state.calls}
    state.check_decisions(decisions)

    ran.clear()
    agent = Agent(Scripted(["All done."]), tools=CORPUS_TOOLS,
                  security=SecurityConfig(trifecta="ask"))
    result = asyncio.run(agent.resume(state, decisions))
    assert result.stop_cause == "completed" and result.text == "All done."
    denied = [r for r in result.tool_calls if r.status == "denied"]
    assert len(denied) == (0 if allow else len(state.calls))
    for c in state.calls:
        first_argument = next(iter(c.arguments.values()))
        assert ((c.tool, first_argument) in ran) == allow
    # Every call of the paused turn got its result, so the conversation is whole again.
    assert not result.conversation.unanswered_calls and not result.conversation.pending
    assert (result.taint | taint_before) == result.taint  # never cleaner than it was


def test_a_paused_run_round_trips_through_json() -> None:
    agent = Agent(Scripted([call("read_notes", folder="w", id="r"),
                            call("delete_file", path="a", id="d")]),
                  tools=CORPUS_TOOLS, approver=DeferringApprover())
    result = agent.run_sync("read then delete")
    state = PendingState.from_result(result)
    text = json.dumps(state.to_dict())
    again = PendingState.from_dict(json.loads(text))
    assert again.calls == state.calls and again.call_ids == ["d"]
    assert again.conversation.messages == result.conversation.messages
    assert again.conversation.taint.private


def test_the_written_format_matches_the_corpus_of_its_version() -> None:
    """A change to to_dict's shape must come with a new version (and new corpus files)."""
    agent = Agent(Scripted([call("delete_file", path="a", id="d")]), tools=CORPUS_TOOLS,
                  approver=DeferringApprover())
    fresh = PendingState.from_result(agent.run_sync("delete a")).to_dict()
    saved = json.loads(sorted(CORPUS.glob(f"v{PENDING_STATE_VERSION}_*.json"))[0].read_text())
    assert fresh["version"] == PENDING_STATE_VERSION

    def shape(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: shape(v) for k, v in d.items() if k not in ("arguments",)}
        if isinstance(d, list):
            return [shape(d[0])] if d else []
        return type(d).__name__

    assert set(fresh) == set(saved)
    assert shape(fresh["calls"]) == shape(saved["calls"])
    assert set(fresh["conversation"]) == set(saved["conversation"])


def test_a_state_from_a_newer_tether_is_refused_naming_the_version() -> None:
    saved = json.loads(CORPUS_FILES[0].read_text())
    with pytest.raises(PendingStateError, match=r"version 99 cannot be read.*upgrade tether"):
        PendingState.from_dict({**saved, "version": 99})


@pytest.mark.parametrize(("change", "message"), [
    ({"version": "1"}, "integer version"),
    ({"calls": "c1"}, "list of calls"),
    ({"calls": [{"tool": "x"}]}, "lacks call_id"),
    ({"calls": [{"call_id": "nope", "tool": "delete_file"}]}, "not unanswered calls"),
    ({"conversation": None}, "needs its conversation"),
])
def test_a_damaged_state_is_a_named_error(change: dict[str, Any], message: str) -> None:
    saved = json.loads((CORPUS / "v1_needs_approval.json").read_text())
    with pytest.raises(PendingStateError, match=message):
        PendingState.from_dict({**saved, **change})


def test_decisions_must_answer_exactly_the_pending_calls() -> None:
    state = PendingState.from_dict(json.loads((CORPUS / "v1_needs_approval.json").read_text()))
    with pytest.raises(PendingStateError, match="no decision for pending call"):
        state.check_decisions({})
    with pytest.raises(PendingStateError, match="no pending call has id zzz"):
        state.check_decisions({"call_del": Decision.allow(), "zzz": Decision.allow()})
    with pytest.raises(PendingStateError, match="cannot be defer"):
        state.check_decisions({"call_del": Decision.defer()})


def test_a_run_that_is_not_paused_has_no_pending_state() -> None:
    result = Agent(Scripted(["hi"])).run_sync("hello")
    with pytest.raises(PendingStateError, match="not paused"):
        PendingState.from_result(result)


def test_the_deferring_approver_keeps_what_it_was_asked() -> None:
    approver = DeferringApprover()
    Agent(Scripted([call("delete_file", path="a")]), tools=CORPUS_TOOLS,
          approver=approver).run_sync("delete a")
    assert [(r.tool, r.arguments) for r in approver.requests] == [("delete_file", {"path": "a"})]
