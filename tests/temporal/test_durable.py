"""Durable runs on a real Temporal server with real worker processes, killed with SIGKILL.

The model is a scripted Chat Completions server in this process (tests/servers/
scripted_chat.py); the workers load tests/temporal/fleet_tools.py. Waits are on events:
a request the model server saw, a note a tool posted, a line a process printed, an update
that returns when a run's state changes.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.servers.scripted_chat import Say, Seen, call
from tests.temporal.conftest import Fleet, finished
from tether import Decision

# A real Temporal dev server and worker processes: the slowest tests, grouped by the mark
# (`-m temporal`, `-m "not temporal"`), and on one xdist worker, so one dev server serves
# them all.
pytestmark = [pytest.mark.asyncio, pytest.mark.temporal, pytest.mark.xdist_group("temporal")]


async def seen(fleet: Fleet, predicate: Any) -> Seen:
    found: Seen = await asyncio.to_thread(fleet.model.wait_for, predicate)
    return found


async def noted(fleet: Fleet, note: str) -> None:
    await asyncio.to_thread(fleet.model.wait_for_note, note)


async def waiting_call(handle: Any) -> dict[str, Any]:
    """The first call the run waits on, once one does."""
    from tether.temporal.client import wait_pending

    state = await wait_pending(handle)
    while not state["pending"]:
        assert not state["finished"], "the run finished without waiting for approval"
        state = await wait_pending(handle, state["seq"])
    first: dict[str, Any] = state["pending"][0]
    return first


def held_from(worker: str, turn: int) -> Any:
    """A hold rule: requests from ``worker`` at ``turn`` are never answered."""
    never = threading.Event()
    return lambda s: never if s.worker == worker and s.turn == turn else None


async def test_a_run_answers_with_the_tools_of_the_worker_which_stops_on_sigterm(
        fleet: Fleet) -> None:
    from tether.temporal.client import start_run

    fleet.model.script["What is 2+3?"] = [call("add", a=2, b=3), Say("The sum is 5.")]
    worker = fleet.start("A")
    outcome = await finished(await start_run(await fleet.client(), "What is 2+3?",
                                             task_queue=fleet.task_queue))
    assert outcome["text"] == "The sum is 5."
    assert outcome["stop_cause"] == "completed"
    assert [(r["name"], r["input"], r["status"]) for r in outcome["tool_calls"]] == \
        [("add", {"a": 2, "b": 3}, "ok")]
    assert outcome["usage"]["requests"] == 2
    # The tool's result reached the model as it would in process.
    second = fleet.model.requests[-1].body["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_0_0", "content": "5"}
    assert worker.stop() == 0  # SIGTERM, as Ctrl-C: it drains and exits cleanly


async def test_a_completed_tool_call_is_not_run_again_after_its_worker_is_killed(
        fleet: Fleet) -> None:
    from tether.temporal.client import start_run

    fleet.model.script["Note it"] = [call("note", text="once"), Say("Noted.")]
    fleet.model.hold = held_from("A", 1)  # A never hears the model's answer after the note
    a = fleet.start("A")
    handle = await start_run(await fleet.client(), "Note it", task_queue=fleet.task_queue)
    await seen(fleet, lambda s: s.worker == "A" and s.turn == 1)  # the note's result is durable
    a.kill()
    fleet.start("B")
    outcome = await finished(handle)
    assert outcome["text"] == "Noted."
    assert fleet.ran() == ["note once on A"]  # B replayed the call's result; it never ran it
    assert [r["status"] for r in outcome["tool_calls"]] == ["ok"]
    assert any(s.worker == "B" and s.turn == 1 for s in fleet.model.requests)


async def test_a_call_running_when_its_worker_dies_comes_back_as_may_or_may_not_have_run(
        fleet: Fleet) -> None:
    from tether.temporal.client import start_run

    fleet.model.script["Stall"] = [call("stall", label="job"), Say("Told.")]
    a = fleet.start("A")
    handle = await start_run(await fleet.client(), "Stall", task_queue=fleet.task_queue)
    await noted(fleet, "stall job on A")
    a.kill()
    fleet.start("B")
    outcome = await finished(handle)
    assert fleet.ran() == ["stall job started on A"]  # never run again
    answer = fleet.model.requests[-1].body["messages"][-1]
    assert answer["role"] == "tool"
    assert "stall may or may not have run" in answer["content"]
    assert "check whether it took effect" in answer["content"]
    assert [r["status"] for r in outcome["tool_calls"]] == ["error"]
    assert outcome["text"] == "Told."


async def test_an_idempotent_call_running_when_its_worker_dies_runs_again_on_another(
        fleet: Fleet) -> None:
    from tether.temporal.client import start_run

    fleet.model.script["Stall safely"] = [call("stall_safe", label="job"), Say("Done.")]
    a = fleet.start("A")
    handle = await start_run(await fleet.client(), "Stall safely", task_queue=fleet.task_queue)
    await noted(fleet, "stall job on A")
    a.kill()
    fleet.start("B")
    outcome = await finished(handle)
    assert fleet.ran() == ["stall job started on A", "stall job started on B"]
    answer = fleet.model.requests[-1].body["messages"][-1]
    assert answer["content"] == "stalled job on B"
    assert [r["status"] for r in outcome["tool_calls"]] == ["ok"]


async def test_a_paused_approval_survives_a_worker_restart_and_resumes_by_signal(
        fleet: Fleet) -> None:
    from tether.temporal.client import decide, pending, start_run

    fleet.model.script["Launch"] = [call("launch", target="moon"), Say("Launched.")]
    a = fleet.start("A")
    client = await fleet.client()
    handle = await start_run(client, "Launch", task_queue=fleet.task_queue)
    waiting = await waiting_call(handle)
    assert (waiting["position"], waiting["tool"], waiting["arguments"], waiting["reason"]) == \
        (0, "launch", {"target": "moon"}, "needs_approval")
    a.kill()  # the run waits in Temporal, not in any process
    fleet.start("B")
    assert (await pending(handle))["pending"] == [waiting]  # a query, answered by B
    await decide(handle, waiting, Decision.allow())
    outcome = await finished(handle)
    assert outcome["text"] == "Launched."
    assert fleet.ran() == ["launch moon on B"]
    assert [r["status"] for r in outcome["tool_calls"]] == ["ok"]


async def test_a_signal_that_names_another_call_is_refused_and_the_call_keeps_waiting(
        fleet: Fleet) -> None:
    import dataclasses

    from tether.conversation import pending_call_from_dict
    from tether.temporal.approvals import signal_payload
    from tether.temporal.client import decide, start_run, wait_pending

    fleet.model.script["Launch"] = [call("launch", target="moon"), Say("Launched.")]
    fleet.start("A")
    handle = await start_run(await fleet.client(), "Launch", task_queue=fleet.task_queue)
    waiting = await waiting_call(handle)
    real = pending_call_from_dict(waiting)

    forged = [  # the same call with other arguments, another position, another id, defer
        {**signal_payload(real, Decision.allow()), "arguments": {"target": "mars"}},
        {**signal_payload(real, Decision.allow()), "position": 1},
        signal_payload(dataclasses.replace(real, call_id="other"), Decision.allow()),
        signal_payload(real, Decision.defer()),
        "allow",
    ]
    state = await wait_pending(handle)
    for payload in forged:
        await handle.signal("decide", payload)
        state = await wait_pending(handle, state["seq"])
    assert len(state["rejected"]) == len(forged)
    assert state["pending"] == [waiting]
    assert fleet.ran() == []
    await decide(handle, waiting, Decision.deny("not today"))
    outcome = await finished(handle)
    assert [r["status"] for r in outcome["tool_calls"]] == ["denied"]
    assert "Denied by the user: not today" in fleet.model.requests[-1].body["messages"][-1][
        "content"]


async def test_an_interrupt_signal_stops_the_run_as_ctrl_c_does_in_process(
        fleet: Fleet) -> None:
    from tether.temporal.client import start_run

    fleet.model.script["Think"] = [Say("never said")]
    fleet.model.hold = held_from("A", 0)  # the model is still thinking
    fleet.start("A")
    handle = await start_run(await fleet.client(), "Think", task_queue=fleet.task_queue)
    await seen(fleet, lambda s: s.worker == "A" and s.turn == 0)
    await handle.signal("interrupt")
    outcome = await finished(handle)
    assert outcome["stop_cause"] == "interrupted"
    assert outcome["text"] == "" and outcome["error"] is None
