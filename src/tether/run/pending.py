"""A run paused for approval, as data that outlives the process.

A host that answers later (a web UI, a ticket queue) gives the agent a
``DeferringApprover``: every gated call is answered ``Decision.defer()``, the run stops with
``stop_cause == "paused"`` and ``PendingState.from_result(result)`` is what to keep. Later,
maybe in another process::

    state = PendingState.from_dict(json.loads(saved))
    result = await agent.resume(state, {c: Decision.allow() for c in state.calls})

A decision answers one pending call: the one at its position in the paused turn, with that
id, tool and those arguments, and it is used up by that turn. Key it by the ``PendingCall``
(always unambiguous) or by its call id (refused when two pending calls share the id). A
stored session keeps its pending state itself (``Session.pending``); ``agent.resume(session,
decisions)`` works the same way. The format carries a ``version``; every version this
release has ever written keeps loading (tests/corpus/pending/ holds saved ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from tether.approval import ApprovalRequest, Decision
from tether.conversation import (
    PENDING_STATE_VERSION,
    Conversation,
    PendingCall,
    calls_from_dict,
    calls_to_dict,
    check_pending_version,
    place_calls,
)
from tether.display import inline
from tether.errors import PendingStateError

if TYPE_CHECKING:
    from tether.result import RunResult

# What ``Agent.resume`` takes: decisions keyed by PendingCall or by call id.
Decisions: TypeAlias = (Mapping[str, Decision] | Mapping[PendingCall, Decision]
                        | Mapping[str | PendingCall, Decision])


class DeferringApprover:
    """Answers every approval request with ``Decision.defer()``: the run pauses and the
    host decides later (``agent.resume``). ``requests`` keeps what was asked, in order."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def approve(self, request: ApprovalRequest) -> Decision:
        self.requests.append(request)
        return Decision.defer()


@dataclass(frozen=True, slots=True)
class PendingState:
    """The calls a paused run waits on, with the conversation to resume.

    ``to_dict()`` is JSON-ready and self-contained (messages, taint, session approvals and
    the calls); ``from_dict`` reads every version listed in ``READABLE_PENDING_VERSIONS``.
    ``agent.resume(state, decisions)`` continues it.
    """

    calls: tuple[PendingCall, ...]
    conversation: Conversation
    version: int = field(default=PENDING_STATE_VERSION)

    @property
    def call_ids(self) -> list[str]:
        return [c.call_id for c in self.calls]

    @classmethod
    def from_result(cls, result: RunResult) -> PendingState:
        """The state of a run that stopped with ``stop_cause == "paused"``."""
        if str(result.stop_cause) != "paused" or not result.pending:
            raise PendingStateError(f"the run is not paused (stop_cause "
                                    f"{str(result.stop_cause)!r}); there is nothing to resume")
        return cls(tuple(result.pending), result.conversation)

    def to_dict(self) -> dict[str, Any]:
        conversation = self.conversation.to_dict()
        conversation.pop("pending", None)  # ``calls`` says it, once
        return {**calls_to_dict(self.calls), "conversation": conversation}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PendingState:
        check_pending_version(d)
        conv = d.get("conversation")
        if not isinstance(conv, Mapping):
            raise PendingStateError("a pending state needs its conversation")
        try:
            conversation = Conversation.from_dict({k: v for k, v in conv.items()
                                                   if k != "pending"})
        except (KeyError, TypeError, ValueError) as e:
            raise PendingStateError(f"the saved conversation cannot be read: {e}") from None
        calls = calls_from_dict(d, conversation.unanswered_calls)
        conversation.pending = list(calls)
        return cls(calls, conversation, int(d["version"]))

    def check_decisions(self, decisions: Decisions) -> None:
        """Raise ``PendingStateError`` unless ``decisions`` answers exactly these calls."""
        check_decisions(self.calls, decisions)


def paused_calls(conversation: Conversation) -> list[PendingCall]:
    """The calls a paused conversation waits on, each at its position in the paused turn.

    A conversation saved without them (by an older tether) waits on every unanswered call.
    """
    unanswered = conversation.unanswered_calls
    if not unanswered:
        return []
    if conversation.pending:
        return list(place_calls(conversation.pending, unanswered))
    calls = []
    for position, call in enumerate(unanswered):
        try:
            arguments = call.parsed_arguments()
        except ValueError:
            arguments = call.arguments
        calls.append(PendingCall(call.id, call.name, arguments, "needs_approval", "", position))
    return calls


def bind_decisions(
    calls: Sequence[PendingCall], decisions: Decisions
) -> dict[int, tuple[PendingCall, Decision]]:
    """Each decision bound to the one pending call it answers, by that call's position.

    A key is a call id (it must name exactly one pending call) or a ``PendingCall`` (one of
    ``calls``: same position, id, tool and arguments). Raises ``PendingStateError`` for a
    key that answers no pending call (naming the pending ones), an id two pending calls
    share, two decisions for one call, and a ``defer`` (leave a call out to have the
    approver asked again).
    """
    bound: dict[int, tuple[PendingCall, Decision]] = {}
    unknown: list[str] = []
    for key, decision in decisions.items():
        if not isinstance(decision, Decision):
            raise PendingStateError(f"the decision for {_key(key)} is {decision!r}, not a "
                                    f"Decision")
        if isinstance(key, PendingCall):
            match = [c for c in calls if c == key or (key.position is None and c.call_id ==
                     key.call_id and c.tool == key.tool and c.arguments == key.arguments)]
        elif isinstance(key, str):
            match = [c for c in calls if c.call_id == key]
            if len(match) > 1:
                raise PendingStateError(
                    f"call id {inline(repr(key))} is shared by pending calls "
                    f"{', '.join(_describe(c) for c in match)}: an id cannot say which one a "
                    f"decision answers. Key each decision by its PendingCall "
                    f"(result.pending[i] or state.calls[i]) instead.")
        else:
            raise PendingStateError(f"a decision is keyed by a call id or a PendingCall, not "
                                    f"{type(key).__name__}")
        if len(match) != 1:
            unknown.append(_key(key))
            continue
        call = match[0]
        assert call.position is not None
        if call.position in bound:
            raise PendingStateError(f"two decisions answer pending call {_describe(call)}")
        if decision.verdict == "defer":
            raise PendingStateError(f"a decision cannot be defer ({_key(key)}): allow or deny "
                                    f"the call, or leave it out to ask the approver again")
        bound[call.position] = (call, decision)
    if unknown:
        pending = ", ".join(_describe(c) for c in calls) or "none"
        raise PendingStateError(f"no pending call has id {', '.join(unknown)}; pending: "
                                f"{pending}")
    return bound


def check_decisions(calls: Sequence[PendingCall], decisions: Decisions) -> None:
    """Every pending call needs a decision, and every decision a pending call."""
    bound = bind_decisions(calls, decisions)
    missing = [_describe(c) for c in calls if c.position not in bound]
    if missing:
        raise PendingStateError(f"no decision for pending call(s) {', '.join(missing)}")


def _describe(call: PendingCall) -> str:
    # Ids and tool names a model or a server wrote: on one line, hidden characters visible.
    return inline(call.call_id) if call.position is None else \
        f"{inline(call.call_id)} (#{call.position} {inline(call.tool)})"


def _key(key: Any) -> str:
    if isinstance(key, PendingCall):
        return inline(key.call_id) if key.position is None else \
            f"{inline(key.call_id)} (#{key.position})"
    return inline(key)


__all__ = [
    "DeferringApprover",
    "PendingState",
    "bind_decisions",
    "check_decisions",
]
