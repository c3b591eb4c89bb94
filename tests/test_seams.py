"""The seams between the loop and what it drives are typed: protocols that name every
method the loop calls, Literal types for closed sets, typed fields instead of bags of
extras, no private keyword arguments on public methods; the engine drives a host
(``RunHost``), not the Agent; and no old names kept beside the new ones."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import typing
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

import tether
from tether import (
    Agent,
    Conversation,
    Decision,
    Session,
    SessionLike,
    SQLiteStore,
    Tool,
    ToolContext,
    tool,
)
from tether import events as ev
from tether.approval import ApprovalRequest, Approver
from tether.errors import OutputFailure, RunRecord, TetherError
from tether.messages import Message, StopReason, Text, Usage
from tether.outcome import StopCause
from tether.providers import Scripted, call
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    Provider,
    StreamChunk,
)
from tether.result import RunResult, final_result
from tether.run.context.fitter import ContextFitter
from tether.run.hooks import NO_HOOKS
from tether.run.host import RunHost
from tether.run.loop import run_events
from tether.settings import AgentSettings
from tether.subagents import SubagentProfile, delegation_tools
from tether.tools.tool import RunScope
from tether.tools.toolsets import ManagedToolset, Toolset, collect_tools


@tool
def ping() -> str:
    """Ping."""
    return "pong"


# --- protocols that name every method the loop calls ---------------------------------------


class BareProvider:
    """Exactly what ``Provider`` names, nothing more: the loop needs nothing else."""

    name = "bare"
    model = "bare-1"

    def __init__(self, replies: list[Message]) -> None:
        self.replies = replies
        self.closed = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        message = self.replies.pop(0)
        stop: StopReason = "tool_calls" if message.tool_calls else "end_turn"
        yield Completed(ModelResponse(message, stop, Usage(1, 1, requests=1)))

    async def aclose(self) -> None:
        self.closed += 1


class BareToolset:
    """Exactly what ``ManagedToolset`` names, nothing more."""

    def __init__(self) -> None:
        self.name = "bare-tools"
        self.running = False
        self.closed = False

    @property
    def started(self) -> bool:
        return self.running

    async def start(self) -> Sequence[ev.Event] | None:
        self.running = True
        return None

    async def aclose(self) -> None:
        self.closed = True

    def tools(self) -> Sequence[Tool]:
        return [ping] if self.running else []


def test_a_provider_with_only_the_protocols_methods_runs_an_agent() -> None:
    model = BareProvider([Message("assistant", (call("ping").calls[0],)),
                          Message("assistant", (Text("pong it is"),))])
    assert isinstance(model, Provider)
    agent = Agent(model, tools=[ping])
    result = agent.run_sync("ping")
    assert result.text == "pong it is" and model.closed == 1


async def test_a_toolset_with_only_the_protocols_methods_is_started_offered_and_closed() -> None:
    toolset = BareToolset()
    assert isinstance(toolset, Toolset) and isinstance(toolset, ManagedToolset)
    model = Scripted([call("ping"), "done"])
    async with Agent(model, tools=[toolset]) as agent:
        result = await agent.run("ping")
    assert [r.status for r in result.tool_calls] == ["ok"]
    assert model.tool_names_offered(0) == ["ping"]
    assert toolset.closed


class HostSession:
    """A host's own session: what ``SessionLike`` names."""

    def __init__(self) -> None:
        self.conv = Conversation()
        self.events: list[ev.Event] = []

    def conversation(self) -> Conversation:
        return self.conv

    def record(self, event: ev.Event) -> None:
        self.events.append(event)


async def test_a_host_object_with_the_session_protocols_methods_is_a_session() -> None:
    session = HostSession()
    assert isinstance(session, SessionLike)
    result = await Agent(Scripted(["hi"])).run("hello", session=session)
    assert result.text == "hi"
    assert isinstance(session.events[-1], ev.RunFinished)
    assert [m.role for m in session.conv.messages] == ["user", "assistant"]


def test_the_stored_session_is_session_like(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        assert isinstance(Session.create(store), SessionLike)
    hints = typing.get_type_hints(Agent.run, vars(tether.agent))
    assert hints["session"] == SessionLike | None


# --- declared and typed -----------------------------------------------------------------


def test_tether_error_declares_the_result_it_ended() -> None:
    # Errors sit under the values a result is made of: they name it by a protocol of their
    # floor, which RunResult is (tests/typecheck/public_face.py holds it to it).
    hints = typing.get_type_hints(TetherError)
    assert hints["result"] == RunRecord | None
    assert TetherError("x").result is None


def literal(tp: Any) -> set[Any]:
    """The values of a Literal type (through an alias or an Optional)."""
    if typing.get_origin(tp) is Literal:
        return set(typing.get_args(tp))
    return set().union(*(literal(a) for a in typing.get_args(tp)))


def hints_of(cls: type) -> dict[str, Any]:
    import tether.approval
    import tether.messages

    return typing.get_type_hints(cls, {**vars(tether.approval), **vars(tether.messages),
                                       **vars(ev), "RunResult": RunResult,
                                       "StopCause": StopCause})


def test_closed_sets_are_literal_types() -> None:
    assert literal(hints_of(ev.ToolFinished)["status"]) == {
        "ok", "error", "denied", "blocked", "unknown_tool", "invalid_args"}
    decided = hints_of(ev.ApprovalDecided)
    assert literal(decided["verdict"]) == {"once", "session", "deny", "defer"}
    assert literal(decided["by"]) == {"approver", "session_cache", "policy",
                                      "permission_mode", "error", "timeout", "interrupt"}
    assert literal(hints_of(ApprovalRequest)["reason"]) == {"needs_approval", "trifecta",
                                                            "hook"}
    assert literal(hints_of(ev.HookDecided)["verdict"]) == {
        "refuse", "ask", "amend", "rewrite", "flag", "failed"}
    assert literal(hints_of(Decision)["verdict"]) == {"once", "session", "deny", "defer"}
    assert "end_turn" in literal(hints_of(ev.ModelResponded)["stop_reason"])
    import tether.errors

    failure = typing.get_type_hints(OutputFailure.__init__,
                                    {**vars(tether.errors), "RunResult": RunResult})
    assert literal(failure["reason"]) == {
        "prose", "bound", "mismatch", "provider", "empty_prompt", "truncated", "filtered",
        "rejected"}
    assert {c.value for c in StopCause} >= {"completed", "max_turns", "paused", "error",
                                            "truncated", "repeated_failure", "content_filter"}
    assert hints_of(ev.SubagentFinished)["stop_cause"] is StopCause


def test_a_tool_context_has_typed_fields_and_no_bag_of_extras() -> None:
    fields = {f.name for f in dataclasses.fields(ToolContext)}
    assert "extras" not in fields
    assert "run" in fields
    import tether.tools.tool

    hints = typing.get_type_hints(ToolContext, {**vars(tether.tools.tool), "Event": ev.Event})
    assert all(hint is not Any and typing.get_origin(hint) is not dict
               for hint in hints.values())
    assert {f.name for f in dataclasses.fields(RunScope)} == {"agent", "path", "interrupt",
                                                               "spend", "deps"}


async def test_a_tool_sees_the_run_it_belongs_to() -> None:
    seen: list[tuple[ToolContext, int]] = []

    @tool
    def look(ctx: ToolContext) -> str:
        """Look."""
        assert ctx.run is not None
        seen.append((ctx, ctx.run.spend.usage.requests))
        return "seen"

    agent = Agent(Scripted([call("look", id="c7"), "ok"]), tools=[look])
    result = await agent.run("look")
    [(ctx, spent_by_then)] = seen
    assert ctx.run is not None and ctx.run.agent is agent
    assert ctx.run.path == ("c7",) and ctx.run.interrupt is None
    assert spent_by_then == 1  # the run's spend, as it was when the tool ran
    assert ctx.run.spend.usage == result.usage


def public_callables() -> list[tuple[str, Any]]:
    out = []
    for name in tether.__all__:
        obj = getattr(tether, name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                func = member.__func__ if isinstance(member, classmethod | staticmethod) \
                    else member
                if inspect.isfunction(func):
                    out.append((f"{name}.{attr}", func))
        elif inspect.isfunction(obj):
            out.append((name, obj))
    return out


def test_no_public_method_takes_a_private_keyword_argument() -> None:
    found = public_callables()
    assert len(found) > 50
    private = [f"{where}({p})" for where, func in found
               for p in inspect.signature(func).parameters if p.startswith("_")]
    assert private == []


# --- names that explain themselves, old names that keep working ----------------------------


def test_reading_the_tools_changes_nothing() -> None:
    clash = dataclasses.replace(ping)

    class Dup:
        def tools(self) -> Sequence[Tool]:
            return [clash]

    agent = Agent(Scripted(["one", "two"]), tools=[ping, Dup()])
    for _ in range(3):
        tools = agent.tools
        assert list(tools) == ["ping"] and tools["ping"] is ping
        tools.clear()  # a copy: the agent's are untouched
    first = agent.run_sync("hi")
    second = agent.run_sync("again")
    clashes = [e for e in first.events if isinstance(e, ev.Notice) and "ping" in e.message]
    assert len(clashes) == 1  # reported once, by the first run, however often tools was read
    assert not [e for e in second.events if isinstance(e, ev.Notice)]


def test_pending_means_waiting_for_a_decision_and_unanswered_means_no_result_yet() -> None:
    conv = Conversation([Message.user("go"), Message("assistant", tuple(call("ping").calls))])
    assert [c.name for c in conv.unanswered_calls] == ["ping"]
    assert conv.pending == []  # no run paused on it


def test_a_decision_holds_a_verdict_and_a_saved_one_that_named_it_scope_still_reads() -> None:
    assert Decision.allow_for_session().verdict == "session"
    assert Decision.from_dict({"scope": "deny", "reason": "no"}) == Decision.deny("no")
    assert Decision.deny("no").to_dict() == {"verdict": "deny", "reason": "no"}
    decided = ev.ApprovalDecided("c", "t", True, "once", "approver", None)
    assert decided.verdict == "once"


def test_old_names_are_gone_and_the_new_ones_say_what_they_hold() -> None:
    tool = Tool(ping.spec, ping.handler, origin="mcp", server="files")
    assert (tool.origin, tool.server) == ("mcp", "files")
    assert ping.origin == "python" and ping.server is None
    for holder, old in ((tool, "source"), (tool, "source_name"), (Conversation(), "pending_calls"),
                        (Decision.allow(), "scope"), (decided_once(), "scope")):
        assert not hasattr(holder, old), old
    with pytest.raises(TypeError):
        Tool(ping.spec, ping.handler, source="mcp")  # type: ignore[call-arg]


def decided_once() -> ev.ApprovalDecided:
    return ev.ApprovalDecided("c", "t", True, "once", "approver", None)


# --- the engine drives a host, not the Agent -------------------------------------------------


class MiniHost:
    """A host that is not an ``Agent``: exactly what ``RunHost`` names, nothing more."""

    def __init__(self, model: Provider, tools: Sequence[Tool], *,
                 settings: AgentSettings | None = None, name: str = "mini") -> None:
        self.settings = settings or AgentSettings()
        self.model = model
        self.providers: dict[str, Provider] = {}
        self.approver = None
        self.hooks = NO_HOOKS
        self.toolsets: list[Tool | Toolset] = list(tools)
        self.name = name
        self.fitter = ContextFitter(self.settings.context, model)
        self.runs = 0
        self.spawned: list[MiniHost] = []

    @property
    def tools(self) -> dict[str, Tool]:
        return collect_tools(self.toolsets)[0]

    @contextlib.asynccontextmanager
    async def toolsets_for_run(self) -> AsyncIterator[None]:
        self.runs += 1
        yield

    def context_fitter(self) -> ContextFitter:
        return self.fitter

    def observer(self, conversation: Conversation, path: tuple[str, ...],
                 stream_requests: bool) -> None:
        return None

    def take_notices(self) -> list[ev.Notice]:
        return [ev.Notice("info", f"hello from {self.name}")]

    def spawn(self, model: Provider, settings: AgentSettings, tools: Iterable[Tool | Toolset],
              *, approver: Approver | None, name: str) -> MiniHost:
        child = MiniHost(model, [], settings=settings, name=name)
        child.toolsets = list(tools)
        child.approver = approver  # type: ignore[assignment]
        self.spawned.append(child)
        return child


async def test_a_host_that_is_not_an_agent_runs_a_whole_run_through_the_loop() -> None:
    model = Scripted([call("ping", id="c1"), "pong it is"])
    host = MiniHost(model, [ping])
    result = await final_result(run_events(host, "ping", stream_requests=False))
    assert result.text == "pong it is" and result.stop_cause == StopCause.COMPLETED
    assert [(r.name, r.status, r.output) for r in result.tool_calls] == [("ping", "ok", "pong")]
    assert host.runs == 1  # the host's toolsets' lifetime wrapped the run
    assert [e.message for e in result.events if isinstance(e, ev.Notice)] == \
        ["hello from mini"]  # the host's notices, handed over


async def test_a_sub_agent_runs_on_the_child_host_its_parent_host_spawns() -> None:
    child_model = Scripted(["the child's answer"])
    profile = SubagentProfile("ask", "Ask the child.", tools=["ping"], provider="kid")
    parent = MiniHost(Scripted([call("ask", task="do it", id="d1"), "done"]), [ping])
    parent.providers = {"kid": child_model}
    parent.toolsets[0:0] = delegation_tools([profile], parent)
    result = await final_result(run_events(parent, "delegate", stream_requests=False))
    assert result.text == "done"
    [child] = parent.spawned
    assert child.name == "ask" and child.model is child_model
    assert list(child.tools) == ["ping"]  # the profile's allowlist over the parent's tools
    assert child.settings.max_turns == profile.max_turns
    finished = [e for e in result.events if isinstance(e, ev.RunFinished)]
    assert [e.path for e in finished] == [("d1",)]  # the child's run, inside the parent's


def test_an_agent_is_a_run_host() -> None:
    agent = Agent(Scripted(["hi"]), tools=[ping])
    members = [name for name, value in vars(RunHost).items()
               if not name.startswith("_") and (callable(value) or isinstance(value, property))]
    assert {"settings", "model", "providers", "approver", "hooks", "tools", "toolsets",
            "toolsets_for_run", "context_fitter", "observer", "take_notices",
            "spawn"} == set(members)
    assert all(hasattr(agent, name) for name in members)
    host: RunHost = agent  # mypy checks the same in tether/agent.py (_a_run_host)
    assert host.tools == {"ping": ping}


@pytest.mark.parametrize("face", ["tether", "tether.providers"])
def test_what_type_checkers_see_of_a_lazy_face_is_what_it_exports(face: str) -> None:
    """The face's ``if TYPE_CHECKING:`` imports (each ``X as X``: an explicit re-export
    under mypy --strict) name every lazy export, from the very module it is loaded from."""
    import ast
    import importlib

    module = importlib.import_module(face)
    tree = ast.parse(Path(module.__file__ or "").read_text())
    [block] = [n for n in tree.body if isinstance(n, ast.If)
               and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"]
    seen: dict[str, str] = {}
    for node in ast.walk(block):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                seen[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        elif isinstance(node, ast.Assign):  # `name = _renamed`: an export under a new name
            [target] = node.targets
            assert isinstance(target, ast.Name) and isinstance(node.value, ast.Name)
            seen[target.id] = seen.pop(node.value.id)
    exports: dict[str, str] = module._EXPORTS
    assert set(seen) == set(exports)
    for name, home in exports.items():
        where, _, attr = home.partition(":")
        assert seen[name] == f"{where}:{attr or name}", name
        assert getattr(module, name) is getattr(importlib.import_module(where), attr or name)
