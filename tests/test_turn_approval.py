"""One prompt per turn: every call of a turn that needs a person goes to the approver as one
``TurnApprovalRequest``, each call shown and decided on its own, bound by its position."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from tests.conftest import Recorder, statuses
from tether import (
    Agent,
    ApprovalRequest,
    Decision,
    TurnApprovalRequest,
    TurnApprover,
    tool,
)
from tether import events as ev
from tether.providers import Scripted, calls
from tether.run.pending import DeferringApprover, PendingState

deployed: list[str] = []


@tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy to a target."""
    deployed.append(target)
    return f"deployed {target}"


@tool
def look(target: str) -> str:
    """Look at a target (changes nothing)."""
    return f"{target} looks fine"


@pytest.fixture(autouse=True)
def _clear() -> None:
    deployed.clear()


class Turns:
    """A turn approver that answers each turn with the next of ``answers`` and keeps every
    turn it was asked about (and each request of it)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.turns: list[TurnApprovalRequest] = []
        self.single: list[ApprovalRequest] = []

    async def approve_turn(self, turn: TurnApprovalRequest) -> Any:
        self.turns.append(turn)
        return self.answers.pop(0)

    async def approve(self, request: ApprovalRequest) -> Decision:
        self.single.append(request)
        return Decision.deny("asked call by call")


def three(*, ids: Sequence[str] = ("c0", "c1", "c2")) -> Any:
    return calls(*((("deploy", {"target": t}, i)) for t, i in zip(("a", "b", "c"), ids,
                                                                 strict=True)))


def denial(result: Any, position: int) -> str:
    return str(result.tool_calls[position].output)


async def test_a_turn_approver_is_asked_once_about_every_gated_call_of_the_turn() -> None:
    approver = Turns([Decision.allow(), Decision.deny("not b"), Decision.allow()])
    assert isinstance(approver, TurnApprover)
    result = await Agent(Scripted([three(), "done"]), tools=[deploy],
                         approver=approver).run("deploy all three")
    assert len(approver.turns) == 1 and approver.single == []
    [turn] = approver.turns
    assert [(r.call_id, r.tool, r.arguments, r.position) for r in turn.requests] == [
        ("c0", "deploy", {"target": "a"}, 0), ("c1", "deploy", {"target": "b"}, 1),
        ("c2", "deploy", {"target": "c"}, 2)]
    assert sorted(deployed) == ["a", "c"]  # run side by side, each in its thread
    assert statuses(result) == ["ok", "denied", "ok"]
    assert denial(result, 1).startswith("Denied by the user: not b.")


async def test_the_requests_of_a_turn_come_before_any_decision_and_each_call_has_both() -> None:
    approver = Turns([Decision.allow(), Decision.deny("no")])
    result = await Agent(Scripted([calls(("deploy", {"target": "a"}),
                                         ("deploy", {"target": "b"})), "done"]),
                         tools=[deploy], approver=approver).run("deploy")
    kinds = [(type(e).__name__, e.call_id) for e in result.events
             if isinstance(e, ev.ApprovalRequested | ev.ApprovalDecided)]
    assert kinds == [("ApprovalRequested", "call_0"), ("ApprovalRequested", "call_1"),
                     ("ApprovalDecided", "call_0"), ("ApprovalDecided", "call_1")]


async def test_decisions_bind_by_position_when_the_model_repeats_a_call_id() -> None:
    approver = Turns([Decision.deny("not a"), Decision.allow(), Decision.deny("not c")])
    result = await Agent(Scripted([three(ids=("dup", "dup", "dup")), "done"]),
                         tools=[deploy], approver=approver).run("deploy")
    assert deployed == ["b"]
    assert statuses(result) == ["denied", "ok", "denied"]


async def test_only_the_calls_that_need_a_person_are_in_the_turns_request() -> None:
    approver = Turns([Decision.allow()])
    model = Scripted([calls(("look", {"target": "a"}), ("nope", {}),
                            ("deploy", {"target": "b"}), ("deploy", {"target": 3})), "done"])
    result = await Agent(model, tools=[deploy, look], approver=approver).run("go")
    [turn] = approver.turns
    assert [r.position for r in turn.requests] == [2]
    assert statuses(result) == ["ok", "unknown_tool", "ok", "invalid_args"]


async def test_a_turn_with_nothing_gated_asks_nobody() -> None:
    approver = Turns()
    await Agent(Scripted([calls(("look", {"target": "a"})), "done"]), tools=[look],
                approver=approver).run("look")
    assert approver.turns == [] and approver.single == []


@pytest.mark.parametrize(("answer", "said"), [
    ([Decision.allow()], "answered 1 decision(s) for 3 call(s)"),
    ([Decision.allow()] * 4, "answered 4 decision(s) for 3 call(s)"),
    ([], "answered 0 decision(s) for 3 call(s)"),
    ({0: Decision.allow(), 1: Decision.allow(), 2: Decision.allow()}, "a dict, not a list"),
    ({"c0": Decision.allow(), "c1": Decision.allow(), "c2": Decision.allow()}, "a dict"),
    (Decision.allow(), "a Decision, not a list"),
    (None, "a NoneType, not a list"),
    ("yyy", "a str, not a list"),
    ((d for d in [Decision.allow()] * 3), "a generator, not a list"),
])
async def test_an_answer_that_cannot_be_placed_call_by_call_denies_the_whole_turn(
        answer: Any, said: str) -> None:
    result = await Agent(Scripted([three(), "done"]), tools=[deploy],
                         approver=Turns(answer)).run("deploy")
    assert deployed == []
    assert statuses(result) == ["denied"] * 3
    decided = [e for e in result.events if isinstance(e, ev.ApprovalDecided)]
    assert [(e.allowed, e.by) for e in decided] == [(False, "error")] * 3
    assert all(said in (e.reason or "") and "every call of the turn is denied" in
               (e.reason or "") for e in decided)
    assert denial(result, 0).startswith("Blocked by policy: the approver answered")


async def test_an_entry_that_is_not_a_decision_denies_its_own_call_only() -> None:
    approver = Turns([Decision.allow(), "yes", Decision.allow()])
    result = await Agent(Scripted([three(), "done"]), tools=[deploy],
                         approver=approver).run("deploy")
    assert sorted(deployed) == ["a", "c"]  # run side by side, each in its thread
    decided = [e for e in result.events if isinstance(e, ev.ApprovalDecided)]
    assert [(e.allowed, e.by) for e in decided] == [(True, "approver"), (False, "error"),
                                                   (True, "approver")]
    assert "answered a str for this call, not a Decision" in (decided[1].reason or "")


async def test_a_turn_approver_that_fails_denies_every_call_of_the_turn() -> None:
    class Broken(Turns):
        async def approve_turn(self, turn: TurnApprovalRequest) -> Any:
            raise ConnectionError("approval service down")

    result = await Agent(Scripted([three(), "done"]), tools=[deploy],
                         approver=Broken()).run("deploy")
    assert deployed == []
    decided = [e for e in result.events if isinstance(e, ev.ApprovalDecided)]
    assert [e.by for e in decided] == ["error"] * 3
    assert all("approval service down" in (e.reason or "") for e in decided)


async def test_a_turn_approver_that_never_answers_times_out_for_the_whole_turn() -> None:
    never = asyncio.Event()

    class Hanging(Turns):
        async def approve_turn(self, turn: TurnApprovalRequest) -> Any:
            await never.wait()
            return [Decision.allow()] * len(turn)

    result = await Agent(Scripted([three(), "done"]), tools=[deploy], approver=Hanging(),
                         approval_timeout_secs=0.01).run("deploy")
    assert deployed == []
    decided = [e for e in result.events if isinstance(e, ev.ApprovalDecided)]
    assert [e.by for e in decided] == ["timeout"] * 3


async def test_the_runs_interrupt_while_a_turn_is_asked_denies_every_call() -> None:
    interrupt = asyncio.Event()
    asked = asyncio.Event()

    class Waiting(Turns):
        async def approve_turn(self, turn: TurnApprovalRequest) -> Any:
            asked.set()
            await asyncio.Event().wait()  # a person who never answers; cancelled
            return [Decision.allow()] * len(turn)

    agent = Agent(Scripted([three(), "done"]), tools=[deploy], approver=Waiting())
    run = asyncio.ensure_future(agent.run("deploy", interrupt=interrupt))
    await asked.wait()
    interrupt.set()
    result = await run
    assert deployed == [] and result.stop_cause == "interrupted"
    decided = [e for e in result.events if isinstance(e, ev.ApprovalDecided)]
    assert [e.by for e in decided] == ["interrupt"] * 3


async def test_an_allow_for_the_session_answers_later_turns_not_the_rest_of_its_own() -> None:
    approver = Turns([Decision.allow_for_session(), Decision.deny("not this one")])
    model = Scripted([calls(("deploy", {"target": "a"}), ("deploy", {"target": "b"})),
                      calls(("deploy", {"target": "c"})), "done"])
    result = await Agent(model, tools=[deploy], approver=approver).run("deploy")
    assert sorted(deployed) == ["a", "c"]  # run side by side, each in its thread
    assert len(approver.turns) == 1  # the third call: the session's approval
    assert statuses(result) == ["ok", "denied", "ok"]
    assert result.conversation.session_approvals == {"deploy"}


async def test_an_approver_with_approve_alone_is_asked_call_by_call_in_order() -> None:
    approver = Recorder(Decision.allow())
    result = await Agent(Scripted([three(), "done"]), tools=[deploy],
                         approver=approver).run("deploy")
    assert [r.position for r in approver.requests] == [0, 1, 2]
    assert statuses(result) == ["ok", "ok", "ok"]


async def test_a_paused_turn_resumes_with_its_undecided_calls_asked_together() -> None:
    deferring = DeferringApprover()
    agent = Agent(Scripted([three(), "done"]), tools=[deploy], approver=deferring)
    paused = await agent.run("deploy")
    assert paused.stop_cause == "paused" and len(deferring.requests) == 3
    state = PendingState.from_dict(PendingState.from_result(paused).to_dict())
    approver = Turns([Decision.deny("not b"), Decision.allow()])
    agent.approver = approver
    result = await agent.resume(state, {state.calls[0]: Decision.allow()})
    [turn] = approver.turns
    assert [r.position for r in turn.requests] == [1, 2]
    assert sorted(deployed) == ["a", "c"]  # run side by side, each in its thread
    assert statuses(result) == ["ok", "denied", "ok"]


async def test_a_turn_approver_may_defer_some_calls_and_the_turn_waits_on_them() -> None:
    approver = Turns([Decision.allow(), Decision.defer(), Decision.deny("no")])
    agent = Agent(Scripted([three(), "done"]), tools=[deploy], approver=approver)
    paused = await agent.run("deploy")
    assert paused.stop_cause == "paused" and deployed == []
    assert [p.position for p in paused.pending] == [1]
    state = PendingState.from_result(paused)
    agent.approver = Turns([Decision.allow(), Decision.allow()])
    result = await agent.resume(state, {state.calls[0]: Decision.allow()})
    # The calls the approver answered before the pause are asked again, together.
    assert [r.position for r in agent.approver.turns[0].requests] == [0, 2]
    assert sorted(deployed) == ["a", "b", "c"]  # run side by side
    assert statuses(result) == ["ok", "ok", "ok"]
