"""A decision belongs to one pending call: the paused call it was made for (its position in
the turn, its id, tool and exact arguments), used up once applied. A compromised model that
reuses the id in a later turn, a host that names a call that is not pending, a stale or
doctored pending state: none of them gets a call run on someone else's yes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Recorder, statuses
from tests.servers.http import Canned, LoopbackServer
from tests.test_chat import answer, tether, workspace
from tether import Agent, Capabilities, Decision, tool
from tether import events as ev
from tether.errors import PendingStateError
from tether.providers.scripted import Scripted, call, calls
from tether.run.pending import DeferringApprover, PendingState
from tether.store import Session, SQLiteStore

deleted: list[str] = []


@tool(needs_approval=True, capabilities=Capabilities(destructive=True))
def delete_file(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [delete_file, add]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    deleted.clear()


async def paused(*replies: Any) -> Any:
    """A run paused by a host that answers later."""
    result = await Agent(Scripted(list(replies)), tools=TOOLS,
                         approver=DeferringApprover()).run("tidy up")
    assert result.stop_cause == "paused"
    return result


# --- the key must name a pending call ----------------------------------------------------------


async def test_a_decision_for_an_unknown_id_is_rejected_naming_the_pending_ids() -> None:
    result = await paused(call("delete_file", path="a", id="d1"))
    agent = Agent(Scripted(["never asked"]), tools=TOOLS)
    with pytest.raises(PendingStateError,
                       match=r"no pending call has id nope; pending: d1 \(#0 delete_file\)"):
        await agent.resume(result.conversation, {"nope": Decision.allow()})
    assert deleted == [] and agent.model.requests == []  # type: ignore[attr-defined]


async def test_a_decision_for_a_call_of_the_turn_that_was_not_paused_is_rejected() -> None:
    result = await paused(calls(("add", {"a": 1, "b": 2}, "a1"), ("delete_file", {"path": "x"},
                                                                  "d1")))
    with pytest.raises(PendingStateError, match="no pending call has id a1"):
        await Agent(Scripted([]), tools=TOOLS).resume(result.conversation,
                                                      {"a1": Decision.allow()})


async def test_a_decision_for_an_answered_call_of_an_earlier_turn_is_rejected() -> None:
    result = await paused(call("add", a=1, b=2, id="old"), call("delete_file", path="x", id="d1"))
    with pytest.raises(PendingStateError, match="no pending call has id old"):
        await Agent(Scripted([]), tools=TOOLS).resume(result.conversation,
                                                      {"old": Decision.allow()})


async def test_decisions_for_a_conversation_that_is_not_paused_are_rejected() -> None:
    done = await Agent(Scripted(["hi"]), tools=TOOLS).run("hello")
    with pytest.raises(PendingStateError, match="pending: none"):
        await Agent(Scripted([]), tools=TOOLS).resume(done.conversation,
                                                      {"d1": Decision.allow()})


async def test_a_deferred_decision_is_refused_leave_the_call_out_instead() -> None:
    result = await paused(call("delete_file", path="a", id="d1"))
    with pytest.raises(PendingStateError, match=r"cannot be defer.*leave it out"):
        await Agent(Scripted([]), tools=TOOLS).resume(result.conversation,
                                                      {"d1": Decision.defer()})


# --- used up once applied ------------------------------------------------------------------------


@pytest.mark.parametrize("same_arguments", [True, False])
async def test_a_later_call_reusing_the_decided_id_is_asked_anew(same_arguments: bool) -> None:
    result = await paused(call("delete_file", path="a", id="d1"))
    again = "a" if same_arguments else "everything"
    # The compromised model comes back with the id that was just allowed.
    model = Scripted([call("delete_file", path=again, id="d1"),
                      call("delete_file", path=again, id="d1"), "done"])
    resumed = await Agent(model, tools=TOOLS).resume(result.conversation,
                                                     {"d1": Decision.allow()})
    assert deleted == ["a"]  # the paused call, once
    assert statuses(resumed) == ["ok", "denied", "denied"]
    assert all(r.output.startswith("Blocked by policy: Delete file needs approval and there "
                                   "is nobody to ask") for r in resumed.tool_calls[1:])
    by = [e.by for e in resumed.events if isinstance(e, ev.ApprovalDecided)]
    assert by == ["approver", "policy", "policy"]


async def test_a_decision_is_used_up_even_when_an_approver_is_there_to_ask() -> None:
    result = await paused(call("delete_file", path="a", id="d1"))
    approver = Recorder(Decision.deny("no more"))
    model = Scripted([call("delete_file", path="b", id="d1"), "done"])
    await Agent(model, tools=TOOLS, approver=approver).resume(result.conversation,
                                                              {"d1": Decision.allow()})
    assert deleted == ["a"]
    assert [(r.call_id, r.arguments) for r in approver.requests] == [("d1", {"path": "b"})]


async def test_the_same_decisions_cannot_be_replayed_on_the_resumed_conversation() -> None:
    result = await paused(call("delete_file", path="a", id="d1"))
    decisions = {"d1": Decision.allow()}
    resumed = await Agent(Scripted(["done"]), tools=TOOLS).resume(result.conversation, decisions)
    with pytest.raises(PendingStateError, match="pending: none"):
        await Agent(Scripted(["again"]), tools=TOOLS).resume(resumed.conversation, decisions)
    assert deleted == ["a"]


async def test_a_resume_that_pauses_again_lists_every_call_of_the_turn_it_waits_on() -> None:
    result = await paused(calls(("delete_file", {"path": "a"}, "d1"),
                                ("delete_file", {"path": "b"}, "d2")))
    agent = Agent(Scripted(["done"]), tools=TOOLS, approver=DeferringApprover())
    again = await agent.resume(result.conversation, {"d1": Decision.allow()})
    # d2 is still undecided, so nothing ran; d1's decision was used and must be given again.
    assert again.stop_cause == "paused" and deleted == []
    assert [(p.call_id, p.position) for p in again.pending] == [("d1", 0), ("d2", 1)]
    final = await agent.resume(again.conversation, {p: Decision.allow() for p in again.pending})
    assert final.stop_cause == "completed" and deleted == ["a", "b"]


# --- two pending calls, one id ------------------------------------------------------------------


async def test_an_id_two_pending_calls_share_cannot_decide_either() -> None:
    result = await paused(calls(("delete_file", {"path": "a"}, "dup"), ("add", {"a": 1, "b": 1},
                                                                        "dup"),
                                ("delete_file", {"path": "b"}, "dup")))
    assert [(p.position, p.arguments) for p in result.pending] == [(0, {"path": "a"}),
                                                                   (2, {"path": "b"})]
    agent = Agent(Scripted(["done"]), tools=TOOLS)
    with pytest.raises(PendingStateError, match=r"shared by pending calls dup \(#0 delete_file\)"
                                                r", dup \(#2 delete_file\).*PendingCall"):
        await agent.resume(result.conversation, {"dup": Decision.allow()})
    first, second = result.pending
    resumed = await agent.resume(result.conversation, {first: Decision.allow(),
                                                       second: Decision.deny("keep b")})
    assert deleted == ["a"]
    results = resumed.conversation.messages[-2].tool_results
    assert [r.call_id for r in results] == ["dup", "dup", "dup"]  # the ids the wire needs
    assert [r.content for r in results] == ["deleted a", "2", "keep b"]


async def test_a_pending_call_from_another_pause_is_not_a_key_for_this_one() -> None:
    first = await paused(call("delete_file", path="a", id="d1"))
    stale = first.pending[0]
    denied = await Agent(Scripted([call("delete_file", path="everything", id="d1")]),
                         tools=TOOLS, approver=DeferringApprover()).resume(
        first.conversation, {stale: Decision.deny("no")})
    assert denied.stop_cause == "paused"
    # Same id, same position, same tool: other arguments, so another call.
    with pytest.raises(PendingStateError, match="no pending call has id d1"):
        await Agent(Scripted(["done"]), tools=TOOLS).resume(denied.conversation,
                                                            {stale: Decision.allow()})
    assert deleted == []


# --- a saved state that does not say what the conversation holds --------------------------------


def saved(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(PendingState.from_result(result).to_dict()))
    return data


async def test_a_decision_made_for_other_arguments_than_will_run_is_not_applied() -> None:
    result = await paused(call("delete_file", path="everything", id="d1"))
    doctored = saved(result)
    doctored["calls"][0]["arguments"] = {"path": "harmless.tmp"}  # what the person is shown
    state = PendingState.from_dict(doctored)
    resumed = await Agent(Scripted(["done"]), tools=TOOLS).resume(
        state, {c: Decision.allow() for c in state.calls})
    assert deleted == []
    [notice] = [e for e in resumed.events if isinstance(e, ev.Notice)
                and e.source == "approval"]
    assert "was not applied" in notice.message
    assert statuses(resumed) == ["denied"]  # asked anew: nobody to ask, so refused


async def test_a_decision_made_for_another_reason_to_ask_is_not_applied() -> None:
    result = await paused(call("delete_file", path="a", id="d1"))
    doctored = saved(result)
    doctored["calls"][0]["reason"] = "trifecta"
    state = PendingState.from_dict(doctored)
    resumed = await Agent(Scripted(["done"]), tools=TOOLS).resume(
        state, {"d1": Decision.allow()})
    assert deleted == [] and statuses(resumed) == ["denied"]


@pytest.mark.parametrize(("position", "tool_name"), [(1, "delete_file"), (0, "add"), (7, None)])
async def test_a_state_whose_call_is_not_the_one_at_its_position_does_not_load(
        position: int, tool_name: str | None) -> None:
    result = await paused(calls(("delete_file", {"path": "a"}, "d1"), ("add", {"a": 1, "b": 1},
                                                                       "a1")))
    doctored = saved(result)
    doctored["calls"][0]["position"] = position
    if tool_name is not None:
        doctored["calls"][0]["tool"] = tool_name
    with pytest.raises(PendingStateError, match="not unanswered calls"):
        PendingState.from_dict(doctored)


async def test_a_version_2_state_without_positions_does_not_load() -> None:
    doctored = saved(await paused(call("delete_file", path="a", id="d1")))
    del doctored["calls"][0]["position"]
    with pytest.raises(PendingStateError, match="lacks its position"):
        PendingState.from_dict(doctored)


async def test_a_conversation_keeps_its_pending_calls_through_to_dict() -> None:
    from tether.conversation import Conversation

    result = await paused(calls(("delete_file", {"path": "a"}, "dup"),
                                ("delete_file", {"path": "b"}, "dup")))
    restored = Conversation.from_dict(json.loads(json.dumps(result.conversation.to_dict())))
    assert restored.pending == result.pending
    first, second = restored.pending
    await Agent(Scripted(["done"]), tools=TOOLS).resume(
        restored, {second: Decision.allow(), first: Decision.deny("no")})
    assert deleted == ["b"]


async def test_a_new_prompt_on_a_paused_conversation_drops_its_pending_calls() -> None:
    result = await paused(call("delete_file", path="a", id="d1"))
    conversation = result.conversation
    conversation.messages.pop()  # the host discards the paused turn and asks something else
    await Agent(Scripted([call("delete_file", path="b", id="d1")]), tools=TOOLS,
                approver=DeferringApprover()).run("something else", conversation=conversation)
    assert [p.arguments for p in conversation.pending] == [{"path": "b"}]


# --- the command line ---------------------------------------------------------------------


def test_sessions_resume_names_a_call_by_id_or_position_and_refuses_a_shared_id(
        tmp_path: Path) -> None:
    @tool(needs_approval=True, capabilities=Capabilities(destructive=True))
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "not run here"

    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session.create(store, provider="loop", model="m", id="twins")
    Agent(Scripted([calls(("write_file", {"path": "a.txt", "content": "A"}, "w"),
                          ("write_file", {"path": "b.txt", "content": "B"}, "w"))]),
          tools=[write_file], approver=DeferringApprover()).run_sync("write", session=session)
    store.close()

    with LoopbackServer() as server:
        server.queue(answer("Wrote a."))
        env = workspace(tmp_path, server.url)
        shown = tether(tmp_path, env, "sessions", "show", "twins")
        ambiguous = tether(tmp_path, env, "sessions", "resume", "twins", "--allow", "w")
        unknown = tether(tmp_path, env, "sessions", "resume", "twins", "--allow", "#5")
        resumed = tether(tmp_path, env, "sessions", "resume", "twins", "--allow", "#0",
                         "--deny", "#1")
    assert "#0 w" in shown.stdout and "#1 w" in shown.stdout
    assert ambiguous.returncode == 1 and "paused calls #0, #1 share the id 'w'" in \
        ambiguous.stderr
    assert unknown.returncode == 1 and "no paused call #5; waiting: w (#0), w (#1)" in \
        unknown.stderr
    # 2: a call was refused (the one denied), as the README's exit codes say.
    assert resumed.returncode == 2, resumed.stderr
    assert (tmp_path / "a.txt").read_text() == "A" and not (tmp_path / "b.txt").exists()


def test_sessions_resume_decisions_do_not_reach_the_next_turn(tmp_path: Path) -> None:
    @tool(needs_approval=True, capabilities=Capabilities(destructive=True))
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "not run here"

    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session.create(store, provider="loop", model="m", id="again")
    Agent(Scripted([call("write_file", path="a.txt", content="A", id="w1")]),
          tools=[write_file], approver=DeferringApprover()).run_sync("write", session=session)
    store.close()

    reuse = Canned.json({
        "id": "x", "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "w1", "type": "function", "function": {
                    "name": "write_file",
                    "arguments": json.dumps({"path": "b.txt", "content": "B"})}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5}})
    with LoopbackServer() as server:
        server.queue(reuse, answer("Done."))
        env = workspace(tmp_path, server.url)
        resumed = tether(tmp_path, env, "sessions", "resume", "again", "--allow", "w1")
    assert (tmp_path / "a.txt").read_text() == "A"
    assert not (tmp_path / "b.txt").exists()  # the reused id was asked anew: nobody there
    assert "Blocked by policy" in resumed.stderr


async def test_pending_calls_that_do_not_name_the_paused_calls_are_refused() -> None:
    import dataclasses

    result = await paused(call("delete_file", path="a", id="d1"))
    conversation = result.conversation
    conversation.pending = [dataclasses.replace(conversation.pending[0], tool="add")]
    with pytest.raises(PendingStateError, match="not unanswered calls"):
        await Agent(Scripted([]), tools=TOOLS).resume(conversation, {"d1": Decision.allow()})
    assert deleted == []
