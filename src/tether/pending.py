"""A run paused for approval, as data that outlives the process.

A host that answers later (a web UI, a ticket queue) gives the agent a
``DeferringApprover``: every gated call is answered ``Decision.defer()``, the run stops with
``stop_cause == "paused"`` and ``PendingState.from_result(result)`` is what to keep. Later,
maybe in another process::

    state = PendingState.from_dict(json.loads(saved))
    result = await agent.resume(state.conversation, {c.call_id: Decision.allow()
                                                     for c in state.calls})

A stored session keeps its pending state itself (``Session.pending``); ``agent.resume(session,
decisions)`` works the same way. The format carries a ``version``; every version this
release has ever written keeps loading (tests/corpus/pending/ holds saved ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.approval import ApprovalRequest, Decision
from tether.errors import TetherError

if TYPE_CHECKING:
    from tether.agent import Conversation, PendingCall, RunResult

# The version this release writes. Bump it (and add a loader branch plus corpus files)
# whenever the shape of ``to_dict`` changes.
PENDING_STATE_VERSION = 1
_READABLE_VERSIONS = (1,)


class PendingStateError(TetherError):
    """A saved pending state cannot be read (wrong shape, or a newer format)."""


class DeferringApprover:
    """Answers every approval request with ``Decision.defer()``: the run pauses and the
    host decides later (``agent.resume``). ``requests`` keeps what was asked, in order."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def approve(self, request: ApprovalRequest) -> Decision:
        self.requests.append(request)
        return Decision.defer()


def pending_call_to_dict(call: PendingCall) -> dict[str, Any]:
    return {"call_id": call.call_id, "tool": call.tool, "arguments": call.arguments,
            "reason": call.reason, "explanation": call.explanation}


def pending_call_from_dict(d: Mapping[str, Any]) -> PendingCall:
    from tether.agent import PendingCall

    if not isinstance(d, Mapping):
        raise PendingStateError(f"a pending call must be an object, not {type(d).__name__}")
    missing = [k for k in ("call_id", "tool") if not isinstance(d.get(k), str)]
    if missing:
        raise PendingStateError(f"a pending call lacks {', '.join(missing)}: {dict(d)!r}")
    reason = d.get("reason", "needs_approval")
    if reason not in ("needs_approval", "trifecta"):
        raise PendingStateError(f"pending call {d['call_id']}: unknown reason {reason!r}")
    return PendingCall(d["call_id"], d["tool"], d.get("arguments"), reason,
                       str(d.get("explanation", "")))


def calls_to_dict(calls: Sequence[PendingCall]) -> dict[str, Any]:
    """The pending calls alone, versioned (what a session store keeps beside its messages)."""
    return {"version": PENDING_STATE_VERSION, "calls": [pending_call_to_dict(c) for c in calls]}


def calls_from_dict(d: Mapping[str, Any]) -> tuple[PendingCall, ...]:
    _check_version(d)
    calls = d.get("calls")
    if not isinstance(calls, list):
        raise PendingStateError("a pending state needs a list of calls")
    return tuple(pending_call_from_dict(c) for c in calls)


@dataclass(frozen=True, slots=True)
class PendingState:
    """The calls a paused run waits on, with the conversation to resume.

    ``to_dict()`` is JSON-ready and self-contained (messages, taint, session approvals and
    the calls); ``from_dict`` reads every version listed in ``_READABLE_VERSIONS``.
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
        return {**calls_to_dict(self.calls), "conversation": self.conversation.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PendingState:
        from tether.agent import Conversation

        calls = calls_from_dict(d)
        conv = d.get("conversation")
        if not isinstance(conv, Mapping):
            raise PendingStateError("a pending state needs its conversation")
        try:
            conversation = Conversation.from_dict(dict(conv))
        except (KeyError, TypeError, ValueError) as e:
            raise PendingStateError(f"the saved conversation cannot be read: {e}") from None
        waiting = {c.id for c in conversation.pending_calls}
        unknown = [c.call_id for c in calls if c.call_id not in waiting]
        if unknown:
            raise PendingStateError(f"pending call(s) {', '.join(unknown)} are not unanswered "
                                    f"calls of the conversation's last message")
        return cls(calls, conversation, int(d["version"]))

    def check_decisions(self, decisions: Mapping[str, Decision]) -> None:
        """Raise ``PendingStateError`` unless ``decisions`` answers exactly these calls."""
        check_decisions(self.calls, decisions)


def check_decisions(calls: Sequence[PendingCall], decisions: Mapping[str, Decision]) -> None:
    """Every pending call needs a decision, and every decision a pending call."""
    ids = [c.call_id for c in calls]
    unknown = sorted(set(decisions) - set(ids))
    if unknown:
        raise PendingStateError(f"no pending call has id {', '.join(unknown)}; "
                                f"pending: {', '.join(ids) or 'none'}")
    missing = [i for i in ids if i not in decisions]
    if missing:
        raise PendingStateError(f"no decision for pending call(s) {', '.join(missing)}")
    deferred = [i for i, d in decisions.items() if d.scope == "defer"]
    if deferred:
        raise PendingStateError(f"a decision cannot be defer ({', '.join(deferred)}): "
                                f"allow or deny each call")


def _check_version(d: Mapping[str, Any]) -> None:
    if not isinstance(d, Mapping):
        raise PendingStateError(f"a pending state must be an object, not {type(d).__name__}")
    version = d.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise PendingStateError("a pending state needs an integer version")
    if version not in _READABLE_VERSIONS:
        newest = max(_READABLE_VERSIONS)
        raise PendingStateError(
            f"pending state version {version} cannot be read by this tether (it reads "
            f"version{'s' if len(_READABLE_VERSIONS) > 1 else ''} "
            f"{', '.join(map(str, _READABLE_VERSIONS))})"
            + ("; upgrade tether" if version > newest else ""))


__all__ = [
    "PENDING_STATE_VERSION",
    "DeferringApprover",
    "PendingState",
    "PendingStateError",
    "check_decisions",
]
