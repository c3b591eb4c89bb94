"""Approvals by signal: a gated call waits in the workflow, durably, for its decision.

The gate asks the approver once per turn about every call of the turn that needs a person;
``SignalApprover`` parks each request as a ``PendingCall`` (with its position in the turn),
all of the turn's at once, and waits until each has a ``decide`` signal that names that very
call: its position, id, tool and exact arguments, as ``Agent.resume`` binds a host's
decision. A signal that names anything else is refused and kept in ``rejected`` (a query
shows it); it never fails the workflow.

The binding (``bind_signal``) is plain data in, verdict out, so it is tested without a
server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.approval import ApprovalRequest, Decision, TurnApprovalRequest
from tether.conversation import Conversation, PendingCall, pending_call_to_dict
from tether.display import inline
from tether.trust import Taint

from .payloads import canonical, capabilities_from_dict, capabilities_to_dict, jsonable


@dataclass(frozen=True, slots=True)
class Bound:
    """A signal that answers one waiting call."""

    call: PendingCall
    decision: Decision


def signal_payload(call: PendingCall, decision: Decision) -> dict[str, Any]:
    """What a ``decide`` signal carries for ``call`` (as a ``pending`` query showed it)."""
    return {"position": call.position, "call_id": call.call_id, "tool": call.tool,
            "arguments": jsonable(call.arguments), "decision": decision.to_dict()}


def shown(call: PendingCall, request: ApprovalRequest | None = None,
          turn: int | None = None) -> dict[str, Any]:
    """A waiting call as a query shows it: JSON data, what a signal must name back, and
    what a person is shown before deciding (title, capabilities, the conversation's taint,
    whether it may be allowed for the session); ``turn`` numbers the prompt it belongs to
    (the calls of one turn wait together, and share it)."""
    d = pending_call_to_dict(call)
    d["arguments"] = jsonable(call.arguments)
    if turn is not None:
        d["turn"] = turn
    if request is not None:
        d.update(display_name=request.display_name, taint=request.taint.to_dict(),
                 capabilities=capabilities_to_dict(request.capabilities),
                 can_cache=request.can_cache, content_params=list(request.content_params))
    return d


def request_of(d: Mapping[str, Any]) -> ApprovalRequest:
    """The approval request a ``shown`` call describes (for a console approver)."""
    return ApprovalRequest(str(d["call_id"]), str(d["tool"]),
                           str(d.get("display_name", d["tool"])), d.get("arguments"),
                           d.get("reason", "needs_approval"),
                           str(d.get("explanation", "")), Taint.from_dict(d.get("taint", {})),
                           capabilities_from_dict(d.get("capabilities", {})),
                           bool(d.get("can_cache", True)),
                           tuple(str(p) for p in d.get("content_params") or ()),
                           position if isinstance(position := d.get("position"), int) else None)


def bind_signal(waiting: Sequence[PendingCall], payload: Any) -> Bound | str:
    """The waiting call a signal answers, with its decision; or why it answers none.

    The payload must name the call's ``position``, ``call_id``, ``tool`` and ``arguments``
    (compared as JSON, exactly), and carry a decision that allows or denies (``defer`` is no
    decision a host gives).
    """
    if not isinstance(payload, Mapping):
        return f"a decision is an object, not {type(payload).__name__}"
    missing = [k for k in ("position", "call_id", "tool", "arguments", "decision")
               if k not in payload]
    if missing:
        return f"a decision names {', '.join(missing)} of the call it answers"
    raw = payload["decision"]
    # Decision.to_dict's shape; "scope" is the verdict's old name (Decision.from_dict).
    verdict = raw.get("verdict", raw.get("scope")) if isinstance(raw, Mapping) else None
    if verdict not in ("once", "session", "deny"):
        return ("the decision must be {\"verdict\": \"once\" | \"session\" | \"deny\", "
                "\"reason\": ...}")
    assert isinstance(raw, Mapping)
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        return "a decision's reason is text"
    decision = Decision(verdict, reason)
    position, call_id, tool = payload["position"], payload["call_id"], payload["tool"]
    try:
        arguments = canonical(payload["arguments"])
    except (TypeError, ValueError, RecursionError):
        return "the arguments of a decision are JSON data"
    for call in waiting:
        if call.position == position and call.call_id == call_id and call.tool == tool \
                and canonical(jsonable(call.arguments)) == arguments:
            return Bound(call, decision)
    # Ids and names a model or a server wrote, and whatever the signal said: one line each.
    names = ", ".join(f"#{c.position} {inline(c.tool)} ({inline(c.call_id)})"
                      for c in waiting) or "none"
    return (f"no waiting call is #{inline(repr(position))} {inline(repr(tool))} "
            f"({inline(repr(call_id))}) with those arguments; waiting: {names}")


class SignalApprover:
    """An approver whose answers arrive by signal (see the module docstring).

    ``wait`` is how it waits (``workflow.wait_condition`` in a workflow); ``changed`` is
    told whenever the set of waiting calls changes; ``interrupted`` ends every wait with a
    denial (the run was interrupted).
    """

    def __init__(self, conversation: Conversation,
                 wait: Callable[[Callable[[], bool]], Any],
                 changed: Callable[[], None],
                 interrupted: Callable[[], bool]) -> None:
        self.conversation = conversation
        self.waiting: list[PendingCall] = []
        self.requests: dict[int, ApprovalRequest] = {}
        self.turn_of: dict[int, int] = {}  # which prompt (1, 2...) each waiting call is in
        self.rejected: list[str] = []
        self._prompts = 0
        self._answers: dict[int, Decision] = {}
        self._wait = wait
        self._changed = changed
        self._interrupted = interrupted
        self._turn = -1  # the conversation length when the turn being asked about began
        self._last = -1  # the position asked about last in that turn

    async def approve(self, request: ApprovalRequest) -> Decision:
        return (await self.approve_turn(TurnApprovalRequest((request,))))[0]

    async def approve_turn(self, turn: TurnApprovalRequest) -> list[Decision]:
        """Every call of the turn waits at once, each for its own signal; the turn is
        answered when all are (an interrupt denies every call of it)."""
        calls = [PendingCall(r.call_id, r.tool, r.arguments, r.reason, r.explanation,
                             r.position if r.position is not None else self._position(r))
                 for r in turn.requests]
        self._prompts += 1
        for call, request in zip(calls, turn.requests, strict=True):
            self.waiting.append(call)
            self.requests[id(call)] = request
            self.turn_of[id(call)] = self._prompts
        self._changed()
        try:
            await self._wait(lambda: all(id(c) in self._answers for c in calls)
                             or self._interrupted())
        finally:
            for call in calls:
                self._settle(call)
            self._changed()
        answers = [self._answers.pop(id(c), None) for c in calls]
        if any(a is None for a in answers):
            return [Decision.deny("the run was interrupted while the call waited for its "
                                  "approval")] * len(calls)
        return [a for a in answers if a is not None]

    def decide(self, payload: Any) -> str | None:
        """Apply one ``decide`` signal; the reason it was refused, or None."""
        bound = bind_signal(self.waiting, payload)
        if isinstance(bound, str):
            self.rejected = [*self.rejected[-19:], bound]
            return bound
        if id(bound.call) in self._answers:
            why = f"call #{bound.call.position} {inline(bound.call.tool)} is already decided"
            self.rejected = [*self.rejected[-19:], why]
            return why
        self._answers[id(bound.call)] = bound.decision
        self._settle(bound.call)  # decided: it waits no more, though its turn may
        return None

    def _settle(self, call: PendingCall) -> None:
        """``call`` waits no more (this very object: two waiting calls may be equal)."""
        self.waiting = [c for c in self.waiting if c is not call]
        self.requests.pop(id(call), None)
        self.turn_of.pop(id(call), None)

    def _position(self, request: ApprovalRequest) -> int | None:
        """The request's place among the calls of the turn being checked: the first call
        after the last one asked about with its id and tool (the gate asks in call order,
        so two calls that share an id are told apart)."""
        messages = self.conversation.messages
        if len(messages) != self._turn:
            self._turn, self._last = len(messages), -1
        calls = messages[-1].tool_calls if messages and messages[-1].role == "assistant" else []
        for position in range(self._last + 1, len(calls)):
            if calls[position].id == request.call_id and calls[position].name == request.tool:
                self._last = position
                return position
        return None
