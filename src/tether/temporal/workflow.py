"""The ``tether.run`` workflow: tether's own loop (``Agent.run``), durable.

The loop runs here, deterministically, on recorded data: the run plan (settings and tool
catalogue, from the ``tether.describe`` activity), every model response (``tether.model``)
and every tool output (``tether.tool``). Usage, taint and the gate's verdicts are computed
from those records, so a replayed workflow reaches the same ones. A call that needs
approval waits for a ``decide`` signal (``approvals.py``); the ``pending`` query shows what
waits, and the ``wait_pending`` update returns when that changes. A sub-agent is a child
workflow of this same type.

Input (a dict): ``{"prompt": [turn, ...], "overrides": {...}, "approvals": "signal"}`` for a
run (a turn is a string, or a list of message parts as ``part_to_dict`` writes them: outside
text given with the prompt stays outside text; the overrides are flag values, as ``tether
run`` makes them; ``approvals: "refuse"`` runs with nobody to ask, as an unattended ``tether
batch`` does; ``log: true`` asks for the run's session log), or ``{"child": {...}, "plan":
{...}}`` for a sub-agent. Output: the run's outcome (``RunResult.to_dict`` fields, summed
over turns), with ``log`` when asked: the entries of a ``tether.store.journal.Journal``
its ``Session`` wrote (the client replays them into its store, as a batch item in process
is logged).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    # Everything the loop touches is imported here, outside the sandbox's reloading: tether
    # does no I/O at import time, and validators compile jsonschema lazily.
    import jsonschema  # noqa: F401

    from tether import events as ev
    from tether.agent import Agent
    from tether.conversation import Conversation
    from tether.errors import ConfigError, TetherError
    from tether.messages import Part, Usage, part_from_dict, usage_from_dict
    from tether.outcome import StopCause
    from tether.provenance import Source
    from tether.result import RunResult, final_result, summed
    from tether.settings import DEFAULT_MAX_REPEATED_FAILURES, AgentSettings, Prices
    from tether.store.journal import Journal, bounded, journal_session
    from tether.store.session import Session
    from tether.subagents import (
        SubagentProfile,
        child_conversation,
        child_wrote,
        delegation_answer,
        missing_tools_output,
    )
    from tether.tools.tool import Tool, ToolContext, ToolOutput
    from tether.trust import Taint, truncate

    from . import DESCRIBE, WORKFLOW
    from .approvals import SignalApprover, shown
    from .payloads import security_from_dict, source_from_dict, source_to_dict
    from .standins import ActivityModel, Timing, activity_tool, local_validator


def workflow_runner() -> Any:
    """The sandbox this workflow runs in: Temporal's, with every tether module (and what
    its validators use) passed through, so an import the loop makes while it runs is the
    worker's own module, not a fresh copy with classes of its own."""
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default
                                   .with_passthrough_modules("tether", "jsonschema", "pydantic",
                                                             "pydantic_core"))


@workflow.defn(name=WORKFLOW)
class TetherRun:
    """One tether run (or one sub-agent's run), durable."""

    def __init__(self) -> None:
        self._approver: SignalApprover | None = None
        self._early: list[str] = []  # signals refused before the run had an approver
        self._children: set[str] = set()
        self._started_children = 0
        self._seq = 0
        self._finished = False
        self._interrupt = asyncio.Event()
        self._ask = True

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        started = workflow.time()
        child = request.get("child")
        if child is None:
            plan = await _describe(request.get("overrides") or {})
            # A turn is the user's words, or message parts (outside text given with them).
            turns: list[str | tuple[Part, ...]] = [
                str(t) if isinstance(t, str) else tuple(part_from_dict(p) for p in t)
                for t in request["prompt"]]
            session, journal = _logged(bool(request.get("log")))
            conversation = Conversation() if session is None else session.conversation()
        else:
            session, journal = None, None
            plan = request["plan"]
            turns = [str(child["task"])]
            # Seeded as in process (tether.subagents.run_subagent): the parent's taint, the
            # task trusted only while nothing untrusted could have chosen it, the parent's
            # trusted texts inherited.
            conversation = child_conversation(
                Taint.from_dict(child["taint"]),
                [source_from_dict(s) for s in child.get("sources") or ()])
        ask = (child or request).get("approvals", "signal") != "refuse"
        try:
            agent = self._agent(plan, conversation, child, ask)
        except TetherError as e:  # settings the loop refuses (a ConfigError)
            raise ApplicationError(str(e), type=type(e).__name__, non_retryable=True) from None
        outcome = await self._turns(agent, turns, conversation, streamed=child is not None,
                                    session=session)
        if journal is not None:
            outcome["log"] = bounded(journal.entries)
        outcome["elapsed"] = round(workflow.time() - started, 3)
        outcome["workflow_id"] = workflow.info().workflow_id
        self._finished = True
        self._changed()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return outcome

    # --- signals, queries, updates ------------------------------------------------------------

    @workflow.signal(name="decide")
    def decide(self, payload: Any) -> None:
        """Decide a waiting call: ``approvals.signal_payload(call, decision)``."""
        if self._approver is None:
            self._early = [*self._early[-19:], "no call was waiting"]
        else:
            self._approver.decide(payload)
        self._changed()

    @workflow.signal(name="interrupt")
    def interrupt(self) -> None:
        """Stop the run as Ctrl-C does in process (stop cause ``interrupted``)."""
        self._interrupt.set()

    @workflow.query(name="pending")
    def pending(self) -> dict[str, Any]:
        """What waits for a decision here, the sub-agents (child workflows) running now,
        and the signals that were refused."""
        approver = self._approver
        return {
            "workflow_id": workflow.info().workflow_id,
            "seq": self._seq,
            "finished": self._finished,
            "pending": [shown(c, approver.requests.get(id(c)), approver.turn_of.get(id(c)))
                        for c in approver.waiting] if approver else [],
            "children": sorted(self._children),
            "rejected": [*self._early, *(approver.rejected if approver else [])],
        }

    @workflow.update(name="wait_pending")
    async def wait_pending(self, after: int) -> dict[str, Any]:
        """The ``pending`` state once it differs from state ``after`` (its ``seq``)."""
        await workflow.wait_condition(lambda: self._seq > after)
        return self.pending()

    def _changed(self) -> None:
        self._seq += 1

    # --- the agent ------------------------------------------------------------------------------

    def _agent(self, plan: dict[str, Any], conversation: Conversation,
               child: dict[str, Any] | None, ask: bool) -> Agent:
        settings, temporal = plan["agent"], plan["temporal"]
        timing = Timing(float(temporal["heartbeat_timeout_secs"]), settings["tool_timeout_secs"],
                        int(plan["security"]["max_result_chars"]),
                        int(temporal["inline_limit_bytes"]))
        entries = {e["spec"]["name"]: e for e in plan["tools"]}
        profiles = {p["name"]: SubagentProfile(**p) for p in plan["subagents"]}

        def tool(name: str) -> Tool:
            entry = entries[name]
            made = activity_tool(entry, local_validator(entry), timing)
            if made.origin == "subagent" and name in profiles:
                return self._delegation(made, profiles[name], plan, timing)
            return made

        approver = SignalApprover(conversation, workflow.wait_condition, self._changed,
                                  self._interrupt.is_set)
        self._approver = approver
        self._ask = ask
        run = run_settings(plan)
        if child is None:
            model = _model(plan, plan["model"]["provider"], plan["model"]["model"], timing)
            return Agent.from_settings(model, run, [tool(n) for n in entries],
                                       approver=approver if ask else None)
        # What a child gets, as tether.subagents.run_subagent builds it in process: the
        # parent's settings with the profile's changes (SubagentProfile.child_settings).
        profile = profiles[child["profile"]]
        provider = profile.provider or plan["model"]["provider"]
        base = plan["providers"].get(provider, {}).get("model", "")
        model = _model(plan, provider, profile.model or base, timing)
        return Agent.from_settings(model, profile.child_settings(run),
                                   [tool(n) for n in profile.tools],
                                   approver=approver if ask else None)

    def _delegation(self, made: Tool, profile: SubagentProfile, plan: dict[str, Any],
                    timing: Timing) -> Tool:
        caps = made.capabilities
        names = [e["spec"]["name"] for e in plan["tools"]]

        async def delegate(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
            missing = [n for n in profile.tools if n not in names]
            if missing:
                return missing_tools_output(profile, missing, names)
            task = arguments["task"]
            if ctx.emit is not None:
                await ctx.emit(ev.SubagentStarted(ctx.call_id, profile.name, task))
            result = await self._child(profile, task, ctx.taint, ctx.sources, plan, self._ask)
            output, trusted, why = delegation_answer(profile, caps, result)
            if ctx.emit is not None:
                await ctx.emit(ev.SubagentFinished(ctx.call_id, profile.name,
                                                   result.stop_cause, trusted, why,
                                                   result.usage))
            # In process a child's spend counts in its parent's as it happens; a child
            # workflow's counts when it ends, with its answer.
            return dataclasses.replace(output, usage=result.usage, written=child_wrote(result),
                                       content=truncate(output.content,
                                                        timing.max_result_chars))

        return dataclasses.replace(made, handler=delegate)

    async def _child(self, profile: SubagentProfile, task: str, taint: Taint,
                     sources: Sequence[Source], plan: dict[str, Any],
                     ask: bool) -> RunResult:
        self._started_children += 1
        info = workflow.info()
        child_id = f"{info.workflow_id}/{self._started_children}-{profile.name}"
        # Only the trusted texts cross: they are all the child inherits (child_conversation).
        inherited = [source_to_dict(s) for s in sources if s.trusted]
        try:
            handle = await workflow.start_child_workflow(
                WORKFLOW, {"child": {"profile": profile.name, "task": task,
                                     "taint": taint.to_dict(), "sources": inherited,
                                     "approvals": "signal" if ask else "refuse"},
                           "plan": plan},
                id=child_id, task_queue=info.task_queue)
        except ChildWorkflowError as e:
            return _failed(e, taint)
        # Shown only once it has started: a watcher that sees the id can query it at once.
        self._children.add(child_id)
        self._changed()
        try:
            outcome = await handle
        except ChildWorkflowError as e:
            return _failed(e, taint)
        finally:
            self._children.discard(child_id)
            self._changed()
        return _as_result(outcome)

    # --- turns ----------------------------------------------------------------------------------

    async def _turns(self, agent: Agent, turns: list[str | tuple[Part, ...]],
                     conversation: Conversation, streamed: bool,
                     session: Session | None = None) -> dict[str, Any]:
        """Each turn on the one conversation (``session``'s, when the run is logged),
        stopping at the first that does not complete; the outcome sums them (as ``tether
        batch`` does for a list of turns). ``streamed`` asks for streamed responses, as a
        sub-agent's run in process does."""
        results: list[RunResult] = []
        for turn in turns:
            try:
                result = await _run(agent, turn, conversation, self._interrupt, streamed,
                                    session)
            except TetherError as e:
                made: RunResult | None = getattr(e, "result", None)
                if made is None:  # the run could not start (an empty prompt)
                    raise ApplicationError(str(e), type=type(e).__name__,
                                           non_retryable=True) from None
                result = made
            results.append(result)
            if result.stop_cause != StopCause.COMPLETED:
                break
        ran = summed(results)
        summary = ran.to_dict()
        # A call's output stays out of the outcome: the outcome is a payload of the history,
        # and a large result goes through it once, then by reference (its activity's).
        summary["tool_calls"] = [{k: v for k, v in c.items() if k != "output"}
                                 for c in summary["tool_calls"]]
        return {key: summary[key] for key in ("text", "stop_cause", "usage", "turns",
                                              "tool_calls", "blocked_sends", "taint",
                                              "malformed_tool_args", "cost_usd", "error")} \
            | {"refused": sum(r.denied or r.blocked for r in ran.tool_calls),
               "error_type": type(ran.error).__name__ if ran.error is not None else None}


async def _run(agent: Agent, prompt: str | tuple[Part, ...], conversation: Conversation,
               interrupt: asyncio.Event, streamed: bool, session: Session | None) -> RunResult:
    # A session's conversation is ``conversation``: the run records its events there too.
    given: dict[str, Any] = {"conversation": conversation} if session is None \
        else {"session": session}
    if not streamed:
        return await agent.run(prompt, interrupt=interrupt, **given)
    return await final_result(agent.stream(prompt, interrupt=interrupt, **given))


def _logged(asked: bool) -> tuple[Session | None, Journal | None]:
    """The session a logged run writes (to a journal: the workflow does no I/O), its run
    ids the workflow's own, the same when it replays."""
    if not asked:
        return None, None
    return journal_session(lambda: workflow.uuid4().hex[:12])


async def _describe(overrides: dict[str, Any]) -> dict[str, Any]:
    # A local activity: the plan is the worker's own configuration, so the worker that runs
    # the workflow task reads it, without a round trip through the task queue. Its result
    # is recorded like any activity's.
    try:
        plan: dict[str, Any] = await workflow.execute_local_activity(
            DESCRIBE, overrides, start_to_close_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_attempts=3))
    except ActivityError as e:
        raise ApplicationError(f"no worker could prepare the run: {e.cause or e}",
                               type="ConfigError", non_retryable=True) from None
    return plan


def run_settings(plan: dict[str, Any]) -> AgentSettings:
    """The settings of a run the plan describes: the worker's configuration with the run's
    flag values, its security settings whole (``payloads.security_to_dict``). A
    sub-agent's are these changed by its profile, as in process."""
    settings, temporal = plan["agent"], plan["temporal"]
    prices = settings["prices"]
    # The activities cut results to the run's max_result_chars; cutting again here would
    # cut the cut.
    security = dataclasses.replace(security_from_dict(plan["security"]),
                                   max_result_chars=sys.maxsize)
    return AgentSettings(
        system_prompt=settings["system_prompt"], max_turns=settings["max_turns"],
        max_output_tokens=settings["max_output_tokens"], max_cost_usd=settings["max_cost_usd"],
        # A plan from a worker of an older tether has none: its default.
        max_repeated_failures=settings.get("max_repeated_failures",
                                           DEFAULT_MAX_REPEATED_FAILURES),
        prices=Prices(**prices) if prices else None,
        permission_mode=settings["permission_mode"], security=security,
        workspace=Path(plan["workspace"]),
        approval_timeout_secs=temporal["approval_timeout_secs"],
        tool_timeout_secs=None,  # the worker enforces it, inside the activity
        temperature=settings["temperature"], output_retries=settings["output_retries"])


def _model(plan: dict[str, Any], provider: str, model: str, timing: Timing) -> ActivityModel:
    entry = plan["providers"].get(provider)
    if entry is None:  # a sub-agent's profile names a provider the workers do not have
        raise ConfigError(f"provider {provider!r} is not configured; configured: "
                          f"{', '.join(sorted(plan['providers'])) or 'none'}")
    return ActivityModel(provider, entry["wire"], model, float(entry["timeout_secs"]), timing)


def _failed(error: ChildWorkflowError, taint: Taint) -> RunResult:
    """A child workflow that failed (its settings refused, or terminated), as a failed run
    that saw what it started with: ``delegation_answer`` words and labels it as it does a
    failed child in process (what the child may have read beyond that, its declared
    capabilities add)."""
    return RunResult(
        text="", stop_cause=StopCause.ERROR, usage=Usage(), turns=0, tool_calls=[],
        blocked_sends=0, taint=taint, malformed_tool_args=0, conversation=Conversation(),
        new_messages=[], error=TetherError(str(error.cause or error)))


def _as_result(outcome: dict[str, Any]) -> RunResult:
    """A child's outcome as the RunResult ``delegation_answer`` reads."""
    error = outcome.get("error")
    return RunResult(
        text=outcome["text"], stop_cause=StopCause(outcome["stop_cause"]),
        usage=usage_from_dict(outcome["usage"]), turns=outcome["turns"], tool_calls=[],
        blocked_sends=outcome["blocked_sends"], taint=Taint.from_dict(outcome["taint"]),
        malformed_tool_args=outcome["malformed_tool_args"], conversation=Conversation(),
        new_messages=[], error=TetherError(error) if error is not None else None)
