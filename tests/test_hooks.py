"""Hooks: five points of a run where a host's code may narrow what the run does, never widen
it; each answer an event; a hook that fails, hangs or answers what it may not ends the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import Recorder, statuses
from tether import (
    Agent,
    AmendRequest,
    AskApproval,
    CallView,
    Capabilities,
    Decision,
    Flag,
    HookError,
    RefuseCall,
    RequestView,
    ResultView,
    RewriteResult,
    RunEnd,
    SubagentProfile,
    ToolOutput,
    tool,
)
from tether import events as ev
from tether.errors import ConfigError
from tether.messages import ToolResult
from tether.outcome import StopCause
from tether.providers import Scripted, call, calls
from tether.providers.base import ModelResponse
from tether.result import RunResult
from tether.run.hooks import NO_HOOKS, Hooks

ran: list[str] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append("add")
    return a + b


@tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy to a target."""
    ran.append(f"deploy {target}")
    return "deployed"


@tool(capabilities=Capabilities(untrusted_input=True))
def read_page() -> str:
    """Read a web page."""
    return "the page says: card 4111 1111 1111 1111"


@tool
def card() -> ToolOutput:
    """A result a tool marks as outside text itself."""
    return ToolOutput("card 4111 1111 1111 1111", from_outside=True)


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


class Log:
    """A hook at every point, keeping what it saw, in order."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name = name
        self.seen = seen

    async def before_model_request(self, request: RequestView) -> None:
        self.seen.append(f"{self.name} request {request.turn}")

    async def after_model_response(self, response: ModelResponse) -> None:
        self.seen.append(f"{self.name} response")

    async def before_tool_call(self, call: CallView) -> None:
        self.seen.append(f"{self.name} call {call.tool} {call.verdict}")

    async def after_tool_result(self, result: ResultView) -> None:
        self.seen.append(f"{self.name} result {result.content}")

    async def on_run_end(self, result: RunEnd) -> None:
        self.seen.append(f"{self.name} end {result.stop_cause} {result.text}")


def decided(result: Any) -> list[tuple[str, str, str]]:
    return [(e.hook, e.point, e.verdict) for e in result.events
            if isinstance(e, ev.HookDecided)]


async def test_hooks_run_at_each_point_in_the_order_given() -> None:
    seen: list[str] = []
    agent = Agent(Scripted([call("add", a=2, b=3), "5"]), [add],
                  hooks=[Log("one", seen), Log("two", seen)])
    result = await agent.run("add")
    assert result.text == "5"
    assert seen == [
        "one request 1", "two request 1", "one response", "two response",
        "one call add run", "two call add run", "one result 5", "two result 5",
        "one request 2", "two request 2", "one response", "two response",
        "one end completed 5", "two end completed 5"]
    assert decided(result) == []  # "no change" is no decision


async def test_a_hook_refuses_a_call_the_gate_would_run_and_the_model_reads_why() -> None:
    class NoAdding:
        async def before_tool_call(self, call: CallView) -> RefuseCall | None:
            return RefuseCall("adding is closed today") if call.tool == "add" else None

    model = Scripted([call("add", a=2, b=3, id="c1"), "ok"])
    result = await Agent(model, [add], hooks=[NoAdding()]).run("add")
    assert ran == [] and statuses(result) == ["denied"]
    [refused] = [p for p in model.requests[1].messages[-1].parts if isinstance(p, ToolResult)]
    assert refused.content.startswith("Refused by a hook: adding is closed today.")
    [event] = [e for e in result.events if isinstance(e, ev.HookDecided)]
    assert (event.hook, event.point, event.verdict, event.reason, event.call_id) == (
        "NoAdding", "before_tool_call", "refuse", "adding is closed today", "c1")


async def test_a_hook_turns_a_run_into_an_ask_that_no_permission_mode_answers() -> None:
    class Careful:
        async def before_tool_call(self, call: CallView) -> AskApproval:
            return AskApproval("big numbers")

    approver = Recorder(Decision.deny("not today"))
    agent = Agent(Scripted([call("add", a=2, b=3), "ok"]), [add], hooks=[Careful()],
                  approver=approver, permission_mode="allow")
    result = await agent.run("add")
    assert ran == [] and statuses(result) == ["denied"]
    [asked] = approver.requests
    assert asked.reason == "hook" and "big numbers" in asked.explanation
    # With nobody to ask, the call is refused.
    nobody = Agent(Scripted([call("add", a=2, b=3), "ok"]), [add], hooks=[Careful()],
                   permission_mode="allow")
    assert statuses(await nobody.run("add")) == ["denied"] and ran == []


async def test_a_session_approval_does_not_answer_a_hooks_ask() -> None:
    class Careful:
        async def before_tool_call(self, call: CallView) -> AskApproval:
            return AskApproval("every deploy")

    approver = Recorder(Decision.allow_for_session())
    model = Scripted([call("deploy", target="a"), call("deploy", target="b"), "done"])
    result = await Agent(model, [deploy], hooks=[Careful()], approver=approver).run("go")
    assert statuses(result) == ["ok", "ok"]
    assert [r.reason for r in approver.requests] == ["hook", "hook"]  # asked each time


async def test_a_refusal_wins_over_an_ask_and_stops_the_later_hooks() -> None:
    seen: list[str] = []

    class Asks:
        async def before_tool_call(self, call: CallView) -> AskApproval:
            return AskApproval("ask")

    class Refuses:
        async def before_tool_call(self, call: CallView) -> RefuseCall:
            return RefuseCall("no")

    approver = Recorder(Decision.allow())
    model = Scripted([call("add", a=1, b=1), "ok"])
    result = await Agent(model, [add], approver=approver,
                         hooks=[Asks(), Refuses(), Log("late", seen)]).run("go")
    assert statuses(result) == ["denied"] and approver.requests == [] and ran == []
    assert not any("call" in s for s in seen)
    assert [d[2] for d in decided(result)] == ["ask", "refuse"]


async def test_a_hook_sees_a_copy_of_the_arguments_and_changing_it_changes_nothing() -> None:
    class Meddles:
        async def before_tool_call(self, call: CallView) -> None:
            call.arguments["target"] = "production"

    model = Scripted([call("deploy", target="staging"), "ok"])
    result = await Agent(model, [deploy], hooks=[Meddles()],
                         approver=Recorder(Decision.allow())).run("go")
    assert statuses(result) == ["ok"] and ran == ["deploy staging"]


async def test_a_hook_adds_instructions_and_drops_a_tool_for_one_request() -> None:
    class Narrow:
        async def before_model_request(self, request: RequestView) -> AmendRequest | None:
            if request.turn == 1:
                return AmendRequest("Answer in French.", drop_tools=frozenset({"add", "no_such"}),
                                    reason="first turn")
            return None

    model = Scripted([call("add", a=1, b=2), "fini"])
    result = await Agent(model, [add, deploy], system_prompt="Be brief.",
                         hooks=[Narrow()]).run("go")
    first, second = model.requests
    assert first.system == "Be brief.\n\nAnswer in French."
    assert [t.name for t in first.tools] == ["deploy"]
    # The model called the dropped tool anyway: refused as unknown, never run.
    assert statuses(result) == ["unknown_tool"] and ran == []
    assert second.system == "Be brief." and [t.name for t in second.tools] == ["add", "deploy"]
    assert decided(result) == [("Narrow", "before_model_request", "amend")]


async def test_a_rewritten_result_keeps_the_trust_of_what_the_tool_returned() -> None:
    class Redact:
        async def after_tool_result(self, result: ResultView) -> RewriteResult:
            assert result.outside
            return RewriteResult(result.content.replace("4111 1111 1111 1111", "[card]"),
                                 reason="card number")

    for reader in (read_page, card):
        model = Scripted([call(reader.name), "ok"])
        result = await Agent(model, [reader], hooks=[Redact()]).run("read")
        [seen] = [p for p in model.requests[1].messages[-1].parts if isinstance(p, ToolResult)]
        assert "4111" not in seen.content and "[card]" in seen.content
        assert seen.trust == "untrusted" and "<untrusted-data" in seen.content
        assert result.taint.untrusted
        assert "4111" not in result.tool_calls[0].output
        assert decided(result) == [("Redact", "after_tool_result", "rewrite")]


async def test_a_flag_is_an_event_and_changes_nothing() -> None:
    class Notes:
        async def after_model_response(self, response: ModelResponse) -> Flag:
            return Flag("long answer")

    result = await Agent(Scripted(["hello"]), hooks=[Notes()]).run("hi")
    assert result.text == "hello"
    [event] = [e for e in result.events if isinstance(e, ev.HookDecided)]
    assert (event.verdict, event.reason, event.point) == ("flag", "long answer",
                                                         "after_model_response")


class Raises:
    def __init__(self, point: str) -> None:
        self.point = point

    async def _fail(self, _: Any) -> None:
        raise RuntimeError("the audit log is down")

    def __getattr__(self, name: str) -> Any:
        if name == self.point:
            return self._fail
        raise AttributeError(name)


@pytest.mark.parametrize("point", ["before_model_request", "after_model_response",
                                   "before_tool_call", "after_tool_result", "on_run_end"])
async def test_a_hook_that_raises_ends_the_run_with_a_hook_error_wherever_it_runs(
        point: str) -> None:
    model = Scripted([call("add", a=2, b=3, id="c1"), "5"])
    agent = Agent(model, [add], hooks=[Raises(point)])
    with pytest.raises(HookError) as raised:
        await agent.run("add")
    error = raised.value
    assert error.point == point and "the audit log is down" in str(error)
    result = error.result
    assert isinstance(result, RunResult) and result.stop_cause == StopCause.ERROR
    assert [e.verdict for e in result.events if isinstance(e, ev.HookDecided)] == ["failed"]
    # Every call has its result: the conversation is valid to continue.
    calls_made = [c.id for m in result.conversation.messages for c in m.tool_calls]
    answered = {p.call_id for m in result.conversation.messages for p in m.parts
                if isinstance(p, ToolResult)}
    assert set(calls_made) <= answered
    if point in ("before_model_request", "before_tool_call"):
        assert ran == []
    if point == "after_tool_result":  # it ran, but what it returned is withheld
        assert ran == ["add"] and result.tool_calls[0].output.startswith("Not run")


async def test_a_hook_that_hangs_ends_the_run_after_hook_timeout_secs() -> None:
    class Hangs:
        async def before_tool_call(self, call: CallView) -> None:
            await asyncio.Event().wait()

    agent = Agent(Scripted([call("add", a=2, b=3), "5"]), [add], hooks=[Hangs()],
                  hook_timeout_secs=0.01)
    with pytest.raises(HookError, match=r"did not answer before_tool_call within 0\.01s"):
        await agent.run("add")
    assert ran == []


async def test_a_hook_that_answers_what_its_point_may_not_ends_the_run() -> None:
    class Widens:
        async def before_tool_call(self, call: CallView) -> Any:
            return Decision.allow()

    agent = Agent(Scripted([call("deploy", target="x"), "ok"]), [deploy], hooks=[Widens()])
    with pytest.raises(HookError, match="answered Decision from before_tool_call"):
        await agent.run("go")
    assert ran == []


def test_a_hook_is_checked_when_the_agent_is_made() -> None:
    class Sync:
        def before_tool_call(self, call: CallView) -> None:
            return None

    with pytest.raises(ConfigError, match="must be an async method"):
        Agent(Scripted(["x"]), hooks=[Sync()])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="has none of the hook methods"):
        Agent(Scripted(["x"]), hooks=[object()])  # type: ignore[list-item]
    assert Agent(Scripted(["x"])).hooks is NO_HOOKS and not NO_HOOKS
    hooks = Hooks.of([Log("a", [])])
    assert hooks and len(hooks.before_tool_call) == 1 and hooks.of(hooks) is hooks


async def test_a_sub_agent_runs_under_its_parents_hooks() -> None:
    class NoAdding:
        async def before_tool_call(self, call: CallView) -> RefuseCall | None:
            return RefuseCall("no") if call.tool == "add" else None

    child = Scripted([call("add", a=1, b=1), "child done"])
    profile = SubagentProfile("helper", "Helps.", tools=["add"], provider="kid")
    parent = Agent(Scripted([call("helper", task="add"), "done"]), [add],
                   subagents=[profile], providers={"kid": child}, hooks=[NoAdding()])
    result = await parent.run("delegate")
    assert result.text == "done" and ran == []
    refused = [e for e in result.events if isinstance(e, ev.HookDecided)]
    assert [(e.verdict, len(e.path)) for e in refused] == [("refuse", 1)]


async def test_a_paused_call_a_hook_asked_about_resumes_with_a_decision() -> None:
    from tether import DeferringApprover

    class Careful:
        async def before_tool_call(self, call: CallView) -> AskApproval:
            return AskApproval("check first")

    agent = Agent(Scripted([call("add", a=2, b=3), "5"]), [add], hooks=[Careful()],
                  approver=DeferringApprover())
    paused = await agent.run("add")
    assert paused.stop_cause == StopCause.PAUSED
    [pending] = paused.pending
    assert pending.reason == "hook"
    result = await agent.resume(paused.conversation, {pending: Decision.allow()})
    assert result.text == "5" and ran == ["add"]


async def test_calls_in_one_turn_are_each_judged_by_the_hooks() -> None:
    class OddOut:
        async def before_tool_call(self, call: CallView) -> RefuseCall | None:
            return RefuseCall("odd") if call.arguments["a"] % 2 else None

    model = Scripted([calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})), "ok"])
    result = await Agent(model, [add], hooks=[OddOut()]).run("go")
    assert statuses(result) == ["denied", "ok"] and ran == ["add"]
