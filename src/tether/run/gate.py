"""The gate: one verdict per turn. The checks each call is held to are ``checks``; here,
who answers a call they send to a person, and the turn's verdict.

``decide`` answers an ``Ask``: the host's decision when the call is a resumed one, the
session's approvals, the permission mode, else the approver; it ends in ``Run``,
``Refuse`` or ``Defer`` (the approver will answer later). A call allowed "for this
session" joins the session's approvals.

``judge_turn`` is the whole verdict of a turn: every call checked (``checks.check``), then
every call that needs a decision decided together (``decide_turn``: the approver is asked
once for the turn, each call shown and decided on its own), and each settled where the
gate answers it itself; it yields the events and gives one ``TurnVerdict`` (what runs,
what was refused, what waits for a host). The loop then only pauses or runs.

A call is known by its position in the turn, never by its id (see ``checks``).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

from tether import events as ev
from tether.approval import (
    ApprovalRequest,
    Approver,
    DecidedBy,
    Decision,
    PermissionMode,
    TurnApprovalRequest,
    ask_turn,
)
from tether.conversation import Conversation, PendingCall
from tether.display import inline
from tether.messages import ToolCall
from tether.run.checks import (
    Ask,
    Defer,
    Refuse,
    Run,
    TurnView,
    Verdict,
    arguments_traced,
    check,
    readers_of,
    secrets_of,
    view_turn,
)
from tether.run.execution import Allowed, Done, Note, settled
from tether.run.hooks import NO_HOOKS, AskApproval, CallView, Hooks, RefuseCall, judge_call
from tether.run.interrupts import abandon
from tether.run.staged import Staged
from tether.settings import AgentSettings
from tether.tools.tool import Tool
from tether.trust import Taint, forecast

# --- approval ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asking:
    """Who answers an ``Ask``, and how: the approver (None: nobody to ask), the permission
    mode, how long the approver is waited for, and the session's approvals (tools a person
    allowed for the session; an allow "for this session" adds to them, for later turns). The
    run's ``interrupt``, set before or while the approver is asked, denies every call it is
    asked about."""

    approver: Approver | None
    permission_mode: PermissionMode
    timeout_secs: float | None
    session_approvals: set[str]
    interrupt: asyncio.Event | None = None


def answered_by_gate(call: ToolCall, asked: Ask, asking: Asking, given: Decision | None,
                     cached: frozenset[str] | set[str]) -> tuple[Decision, DecidedBy] | None:
    """The decision on an ``Ask`` that needs nobody asked, or None (the approver answers):
    the host's ``given`` decision, the session's approvals (``cached``: the tools allowed for
    the session before this turn's asking began), the permission mode, or the policy when
    there is nobody to ask."""
    tool, reason = asked.tool, asked.reason
    if given is not None:
        return given, "approver"
    if reason == "needs_approval" and call.name in cached:
        return Decision.allow(), "session_cache"
    if reason == "needs_approval" and asking.permission_mode == "allow":
        return Decision.allow(), "permission_mode"
    if asking.approver is None:
        how = ("set [security] trifecta = \"allow\" to waive the check, or run with an "
               "approver" if reason == "trifecta" else "run with an approver (a hook asks "
               "for one)" if reason == "hook" else
               "run with an approver, or allow it without asking ([tools] permission_mode "
               "= \"allow\"; on the command line, --yes)")
        why = f" ({asked.told})" if asked.told else ""
        return Decision.deny(
            f"Blocked by policy: {inline(tool.spec.display_name)} needs approval{why} and "
            f"there is nobody to ask. It was not run. To allow it, {how}."), "policy"
    return None


def request_for(call: ToolCall, position: int, asked: Ask, taint: Taint) -> ApprovalRequest:
    """What the approver is shown about one call."""
    tool = asked.tool
    return ApprovalRequest(call.id, call.name, tool.spec.display_name, asked.arguments,
                           asked.reason, asked.explanation, taint, tool.capabilities,
                           tool.cache_approval, tool.content_params, position)


def requested(request: ApprovalRequest) -> ev.ApprovalRequested:
    return ev.ApprovalRequested(request.call_id, request.tool, request.display_name,
                                request.arguments, request.reason, request.taint)


def concluded(call: ToolCall, position: int, asked: Ask, asking: Asking, decision: Decision,
              by: DecidedBy, from_approver: bool,
              ) -> tuple[ev.ApprovalDecided, Run | Refuse | Defer]:
    """The event and the verdict a decision comes to. A denial the approver was asked for
    is worded for the model (who denied, and that the call was not run); an allow for the
    session joins the session's approvals (for the calls of later turns)."""
    tool, arguments, reason = asked.tool, asked.arguments, asked.reason
    if from_approver and decision.verdict == "deny":
        said = inline(decision.reason or "no reason given")
        # An approver that failed or timed out did not refuse: the gate failed closed.
        who = {"approver": "Denied by the user", "interrupt": "Denied"}.get(
            by, "Blocked by policy")
        decision = Decision.deny(f"{who}: {said}. {inline(tool.spec.display_name)} was "
                                 f"not run.")
    if decision.verdict == "session" and reason == "needs_approval" and tool.cache_approval:
        asking.session_approvals.add(call.name)
    event = ev.ApprovalDecided(call.id, call.name, decision.allowed, decision.verdict, by,
                               decision.reason)
    verdict: Run | Refuse | Defer
    if decision.verdict == "defer":
        verdict = Defer(PendingCall(call.id, call.name, arguments, reason, asked.explanation,
                                    position))
    elif not decision.allowed:
        verdict = Refuse("denied", decision.reason or "denied")
    else:
        verdict = Run(tool, arguments)
    return event, verdict


async def decide(
    call: ToolCall, position: int, asked: Ask, asking: Asking, taint: Taint,
    given: Decision | None = None,
) -> AsyncIterator[ev.Event | Run | Refuse | Defer]:
    """One call's ``Ask`` decided on its own: yields the approval events and, last, the
    verdict. ``given`` is a host's decision for exactly this call (a resumed run, see
    ``given_decision``). A turn's asks are decided together (``decide_turn``)."""
    async for _, item in decide_turn([(position, call, asked, given)], asking, taint):
        yield item


Asked: TypeAlias = tuple[int, ToolCall, Ask, Decision | None]


async def decide_turn(
    asks: Sequence[Asked], asking: Asking, taint: Taint,
) -> AsyncIterator[tuple[int, ev.Event | Run | Refuse | Defer]]:
    """Every ``Ask`` of one turn decided, each by its position: ``asks`` holds, in call
    order, each asked call's position, the call, its ``Ask`` and the host's decision for
    it (or None). Yields ``(position, event)`` and, once per call, ``(position, verdict)``.

    The gate answers what it can first (``answered_by_gate``); the rest go to the approver
    as one ``TurnApprovalRequest`` (an ``ApprovalRequested`` each, then one question, then
    an ``ApprovalDecided`` each): each call is shown and decided on its own, by its
    position, and nothing decided for one call of the turn answers another (an allow for
    the session answers later turns)."""
    cached = frozenset(asking.session_approvals)
    waiting: list[Asked] = []
    for position, call, asked, given in asks:
        answer = answered_by_gate(call, asked, asking, given, cached)
        if answer is None:
            waiting.append((position, call, asked, given))
            continue
        event, verdict = concluded(call, position, asked, asking, *answer, from_approver=False)
        yield position, event
        yield position, verdict
    if not waiting:
        return
    assert asking.approver is not None  # answered_by_gate refuses when nobody can be asked
    requests = tuple(request_for(call, position, asked, taint)
                     for position, call, asked, _ in waiting)
    for (position, *_), request in zip(waiting, requests, strict=True):
        yield position, requested(request)
    answers = await ask_turn(asking.approver, TurnApprovalRequest(requests),
                             asking.timeout_secs, asking.interrupt)
    for (position, call, asked, _), answer in zip(waiting, answers, strict=True):
        event, verdict = concluded(call, position, asked, asking, *answer, from_approver=True)
        yield position, event
        yield position, verdict


def given_decision(
    given: tuple[PendingCall, Decision] | None, call: ToolCall, asked: Ask,
) -> Decision | ev.Notice | None:
    """A host's decision, if it answers this very call: the pending call it was made for
    has this call's id, tool, arguments and reason for asking. Otherwise a Notice saying it
    was not applied (the call is then asked about as if no decision had been given)."""
    if given is None:
        return None
    pending, decision = given
    same = pending.call_id == call.id and pending.tool == call.name \
        and pending.reason == asked.reason \
        and same_arguments(asked.tool, pending.arguments, asked.arguments)
    if same:
        return decision
    return ev.Notice("warning", f"the decision given for pending call "
                                f"{inline(pending.call_id)} ({inline(pending.tool)}) was not "
                                f"applied: the call in its place is {inline(call.name)} with "
                                f"other arguments or another reason to ask; it is asked about "
                                f"anew", source="approval")


def same_arguments(tool: Tool, decided: Any, arguments: dict[str, Any]) -> bool:
    """Whether the arguments a decision was made for are the ones that would run. Both are
    compared as the tool's validator shapes them (a saved state holds them as JSON)."""
    if decided == arguments:
        return True
    try:
        return tool.validate(copy.deepcopy(decided)) == arguments
    except ValueError:
        return False


def narrowed(verdict: Run | Ask, answer: RefuseCall | AskApproval | None) -> Run | Refuse | Ask:
    """The verdict after the host's hooks answered (``tether.run.hooks.judge_call``): only
    ever narrower. A refusal refuses; an ask turns a run into an ask of the approver (reason
    ``hook``: no permission mode or session approval answers it) and adds its reason to an
    ask; anything else changes nothing. The tool and arguments stay the gate's."""
    if isinstance(answer, RefuseCall):
        name = inline(verdict.tool.spec.display_name)
        return Refuse("denied", f"Refused by a hook: {inline(answer.reason)}. {name} was not "
                                f"run.")
    if isinstance(answer, AskApproval):
        said = f"A hook asks for approval: {inline(answer.reason)}."
        if isinstance(verdict, Ask) and verdict.reason == "trifecta":
            return replace(verdict, explanation=f"{verdict.explanation} {said}")
        return Ask(verdict.tool, verdict.arguments, "hook", said, told=said)
    return verdict


# --- the turn ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnVerdict:
    """The gate's verdict on a whole turn, each call by its position.

    - ``allowed``: the calls that run, with their validated arguments (``Allowed``);
    - ``refused``: the calls the gate answered itself, each settled (its result for the
      model and its record): refused at a stage, denied, or not run because the run was
      interrupted while the turn was judged;
    - ``deferred``: the calls that wait for a host's decision (the run pauses on them);
    - ``decided``: the calls a host's decision answered (a resumed turn's).
    """

    allowed: tuple[Allowed, ...] = ()
    refused: Mapping[int, Done] = field(default_factory=dict)
    deferred: tuple[PendingCall, ...] = ()
    decided: tuple[PendingCall, ...] = ()

    @property
    def pending(self) -> list[PendingCall]:
        """What a paused turn waits on, in call order: the deferred calls and the ones a
        host decided this time (the next resume decides the whole turn, and sees it).
        Empty unless a call was deferred."""
        if not self.deferred:
            return []
        return sorted([*self.decided, *self.deferred], key=lambda p: p.position or 0)


async def judge_turn(
    staged: Staged[TurnVerdict], calls: Sequence[ToolCall], tools: Mapping[str, Tool],
    conversation: Conversation, settings: AgentSettings, asking: Asking,
    decisions: Mapping[int, tuple[PendingCall, Decision]] | None = None,
    noted: Note | None = None,
    hooks: Hooks = NO_HOOKS,
) -> AsyncGenerator[ev.Event, None]:
    """Judge every call of a turn (a stage: ``tether.run.staged.Staged``): yields the
    events (each call's request, every stage's decision, the approver's, the result of each
    call the gate answered itself) and gives, last, the ``TurnVerdict``.

    ``tools`` are the turn's; ``decisions`` a resumed turn's host decisions, by position
    (each applied only to the very call it was made for: ``given_decision``); ``noted``
    words what the model reads of a refused call's result (the run's repeat rule);
    ``hooks``' ``before_tool_call`` answers on every call the checks would run or ask about
    can only narrow its verdict (``narrowed``; a ``HookError`` ends the judging). A call
    allowed while ``asking.interrupt`` was set (Ctrl-C at an approval prompt) is not run,
    unless the turn pauses: the turn is then resumed whole."""
    taint = conversation.taint
    turn = _viewed(calls, tools, conversation, settings)
    left = dict(decisions or {})
    verdicts: dict[int, Verdict] = {}
    asks: list[Asked] = []
    decided: list[PendingCall] = []
    refused: dict[int, Done] = {}

    def refuse(position: int, verdict: Refuse) -> ev.ToolFinished:
        call = calls[position]
        text = verdict.text if noted is None else noted(call, verdict.status, verdict.text)
        refused[position] = done = settled(call, verdict.status, text)
        return ev.ToolFinished(call.id, call.name, verdict.status, done.result, 0.0)

    for position, call in enumerate(calls):
        tool = turn.tools.get(call.name)
        yield ev.ToolCallRequested(call, tool.spec.display_name if tool else call.name)
        checked = check(call, position, turn)
        for event in checked.events:
            yield event
        verdict: Verdict = checked.verdict
        if hooks.before_tool_call and isinstance(verdict, Run | Ask):
            hooked, said = await _hooked(hooks, call, verdict, taint, settings)
            for event in said:
                yield event
            verdict = narrowed(verdict, hooked)
        if isinstance(verdict, Ask):
            asked, notice = _with_decision(position, call, verdict, left, decided)
            if notice is not None:
                yield notice
            asks.append(asked)
            continue
        verdicts[position] = verdict
        if isinstance(verdict, Refuse):  # settled at once, as the stage refused it
            yield refuse(position, verdict)
    if asks:  # the calls that need a decision, together: one question for the turn
        async for position, item in _decided(asks, asking, conversation.taint):
            if isinstance(item, Run | Refuse | Defer):
                verdicts[position] = item
                if isinstance(item, Refuse):
                    yield refuse(position, item)
            else:
                yield item
    allowed, deferred = _in_order(calls, verdicts, turn)
    if allowed and not deferred and _is_set(asking.interrupt):
        # Interrupted while the turn was judged: nothing starts after it. Each call still
        # gets its result: the conversation stays valid.
        for event in _not_started(allowed, refused):
            yield event
        allowed = []
    staged.give(TurnVerdict(tuple(allowed), refused, tuple(deferred), tuple(decided)))


def _viewed(calls: Sequence[ToolCall], tools: Mapping[str, Tool], conversation: Conversation,
            settings: AgentSettings) -> TurnView:
    """The turn as the checks read it: its tools, and the sources and secrets only a turn
    exposed to untrusted text (or with a send) needs."""
    taint = conversation.taint
    known = [tools[c.name] for c in calls if c.name in tools]
    # The texts seen are traced only where untrusted text could have chosen a value: once
    # the conversation holds some, or a call of this turn reads some (any call then, not
    # only a send: a result is a trusted source only if its call's values trace). Walking
    # the whole conversation for them is skipped on a turn with nothing exposed.
    traced = settings.security.endorse_destructive or forecast(
        taint, (t.capabilities for t in known)).untrusted
    sources = conversation.sources(settings.system_prompt) if traced else ()
    # The secrets the conversation's results declared matter only to a send.
    sends = any(t.capabilities.external_send for t in known)
    return view_turn(calls, tools, taint, settings.security, settings.permission_mode,
                     sources, secrets_of(conversation) if sends else (),
                     readers_of(conversation) if sends else ())


async def _hooked(hooks: Hooks, call: ToolCall, verdict: Run | Ask, taint: Taint,
                  settings: AgentSettings) -> tuple[RefuseCall | AskApproval | None,
                                                    list[ev.Event]]:
    """What the ``before_tool_call`` hooks answer on a call the checks would run or ask
    about. ``judge_call`` hands each hook its own copy of the arguments (the rest is
    frozen): a hook changing what it is shown changes nothing the gate reads."""
    return await judge_call(hooks, CallView(
        call.id, call.name, verdict.arguments, verdict.tool.capabilities, taint,
        "run" if isinstance(verdict, Run) else "ask"), settings.hook_timeout_secs)


def _with_decision(position: int, call: ToolCall, verdict: Ask,
                   left: dict[int, tuple[PendingCall, Decision]], decided: list[PendingCall],
                   ) -> tuple[Asked, ev.Notice | None]:
    """An ask with the host's decision for it, if one was given for this very call (it is
    then used up, and ``decided``); else the notice that the one given was not applied."""
    answer = left.pop(position, None)
    given = given_decision(answer, call, verdict)
    if isinstance(given, ev.Notice):
        return (position, call, verdict, None), given
    if given is not None and answer is not None:
        decided.append(answer[0])
    return (position, call, verdict, given), None


async def _decided(asks: list[Asked], asking: Asking, taint: Taint,
                   ) -> AsyncGenerator[tuple[int, ev.Event | Run | Refuse | Defer], None]:
    """``decide_turn``'s items, the question closed if its reader leaves early."""
    items = decide_turn(asks, asking, taint)
    try:
        async for item in items:
            yield item
    except BaseException:
        await abandon(items)
        raise


def _in_order(calls: Sequence[ToolCall], verdicts: Mapping[int, Verdict], turn: TurnView,
              ) -> tuple[list[Allowed], list[PendingCall]]:
    """The calls that run and the ones deferred, in call order."""
    allowed: list[Allowed] = []
    deferred: list[PendingCall] = []
    for position, call in enumerate(calls):
        verdict = verdicts[position]
        if isinstance(verdict, Defer):
            deferred.append(verdict.pending)
        elif isinstance(verdict, Run):
            allowed.append(Allowed(position, call, verdict.tool, verdict.arguments,
                                   arguments_traced(position, verdict.tool, verdict.arguments,
                                                    turn)))
    return allowed, deferred


def _is_set(interrupt: asyncio.Event | None) -> bool:
    return interrupt is not None and interrupt.is_set()


def _not_started(allowed: Sequence[Allowed], refused: dict[int, Done]) -> list[ev.Event]:
    """Allowed calls that will not start (the run was interrupted), each settled."""
    events: list[ev.Event] = []
    for waiting in allowed:
        refused[waiting.position] = unrun = settled(
            waiting.call, "denied", "Not run: the run was interrupted before it started.")
        events.append(ev.ToolFinished(waiting.call.id, waiting.call.name, "denied",
                                      unrun.result, 0.0))
    return events
