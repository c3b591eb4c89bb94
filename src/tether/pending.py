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
from tether.display import inline
from tether.errors import TetherError

if TYPE_CHECKING:
    from tether.agent import Conversation, PendingCall, RunResult
    from tether.messages import ToolCall

# The version this release writes. Bump it (and add a loader branch plus corpus files)
# whenever the shape of ``to_dict`` changes. Version 2 added each call's ``position``.
PENDING_STATE_VERSION = 2
_READABLE_VERSIONS = (1, 2)

# What ``Agent.resume`` takes: decisions keyed by PendingCall or by call id.
Decisions: TypeAlias = ("Mapping[str, Decision] | Mapping[PendingCall, Decision] "
                        "| Mapping[str | PendingCall, Decision]")


class PendingStateError(TetherError):
    """A saved pending state cannot be read (wrong shape, or a newer format), or decisions
    do not answer the calls that are pending."""


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
            "reason": call.reason, "explanation": call.explanation, "position": call.position}


def pending_call_from_dict(d: Mapping[str, Any]) -> PendingCall:
    from tether.agent import PendingCall

    if not isinstance(d, Mapping):
        raise PendingStateError(f"a pending call must be an object, not {type(d).__name__}")
    missing = [k for k in ("call_id", "tool") if not isinstance(d.get(k), str)]
    if missing:
        raise PendingStateError(f"a pending call lacks {', '.join(missing)}: "
                                f"{inline(repr(dict(d)))}")
    reason = d.get("reason", "needs_approval")
    if reason not in ("needs_approval", "trifecta"):
        raise PendingStateError(f"pending call {inline(d['call_id'])}: unknown reason "
                                f"{inline(repr(reason))}")
    position = d.get("position")
    if position is not None and (not isinstance(position, int) or isinstance(position, bool)
                                 or position < 0):
        raise PendingStateError(f"pending call {inline(d['call_id'])}: position must be a "
                                f"whole number from 0, not {inline(repr(position))}")
    return PendingCall(d["call_id"], d["tool"], d.get("arguments"), reason,
                       str(d.get("explanation", "")), position)


def calls_to_dict(calls: Sequence[PendingCall]) -> dict[str, Any]:
    """The pending calls alone, versioned (what a session store keeps beside its messages)."""
    return {"version": PENDING_STATE_VERSION, "calls": [pending_call_to_dict(c) for c in calls]}


def calls_from_dict(d: Mapping[str, Any],
                    unanswered: Sequence[ToolCall] | None = None) -> tuple[PendingCall, ...]:
    """The pending calls of a saved state. With ``unanswered`` (the calls of the paused turn)
    each call is checked against the call at its position (same id, same tool); a version 1
    state, which recorded no positions, gets them from there."""
    _check_version(d)
    calls = d.get("calls")
    if not isinstance(calls, list):
        raise PendingStateError("a pending state needs a list of calls")
    out = tuple(pending_call_from_dict(c) for c in calls)
    if d.get("version") != 1 and any(c.position is None for c in out):
        raise PendingStateError("a pending call lacks its position")
    if unanswered is None:
        return out
    return place_calls(out, unanswered)


def place_calls(calls: Sequence[PendingCall],
                unanswered: Sequence[ToolCall]) -> tuple[PendingCall, ...]:
    """``calls`` checked against the paused turn's calls: each names the call at its
    position (same id, same tool); one without a position gets the first free call with its
    id and tool. ``PendingStateError`` for any that names none."""
    import dataclasses

    taken: set[int] = set()
    out: list[PendingCall] = []
    wrong: list[str] = []
    for c in calls:
        position = c.position
        if position is None:  # version 1: the first free call with that id and tool
            position = next((i for i, t in enumerate(unanswered) if i not in taken
                             and t.id == c.call_id and t.name == c.tool), None)
        if position is None or position >= len(unanswered) or position in taken \
                or unanswered[position].id != c.call_id or unanswered[position].name != c.tool:
            wrong.append(c.call_id)
            continue
        taken.add(position)
        out.append(dataclasses.replace(c, position=position))
    if wrong:
        raise PendingStateError(f"pending call(s) {', '.join(wrong)} are not unanswered calls "
                                f"of the conversation's last message")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PendingState:
    """The calls a paused run waits on, with the conversation to resume.

    ``to_dict()`` is JSON-ready and self-contained (messages, taint, session approvals and
    the calls); ``from_dict`` reads every version listed in ``_READABLE_VERSIONS``.
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
        from tether.agent import Conversation

        _check_version(d)
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
    from tether.conversation import PendingCall

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
    from tether.agent import PendingCall

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
    from tether.agent import PendingCall

    if isinstance(key, PendingCall):
        return inline(key.call_id) if key.position is None else \
            f"{inline(key.call_id)} (#{key.position})"
    return inline(key)


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
    "bind_decisions",
    "check_decisions",
]
