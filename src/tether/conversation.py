"""A conversation: its messages and what they have exposed the agent to (its taint).

Two words, two meanings: a call is *unanswered* while it has no result yet (the last
assistant message's calls, until the tool message answers them); it is *pending* while it
waits for a host's decision (a run paused for approval; ``Conversation.pending``). Every
pending call is unanswered; an unanswered call is pending only when a run paused on it.

The pending calls' codec lives beside them (``calls_to_dict``, ``calls_from_dict``): what a
conversation, a paused run's ``PendingState`` and a session store write is one format,
versioned (``PENDING_STATE_VERSION``); every version ever written keeps loading.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tether.approval import ApprovalReason
from tether.display import inline
from tether.errors import PendingStateError
from tether.messages import Message, ToolCall, message_from_dict, message_to_dict
from tether.provenance import Source, SourceIndex
from tether.trust import CLEAN, Taint


@dataclass(slots=True)
class Conversation:
    """Messages plus what they have exposed the agent to. Pass one to ``run`` to continue.

    ``taint`` only grows. ``session_approvals`` holds the tools a person allowed "for this
    session". ``pending`` holds the calls a paused run waits on for decisions
    (``Agent.resume`` answers them); it is empty otherwise. ``on_append`` (set by the
    session store) sees each message as it is added.

    For provenance (``tether.provenance``), each tool result carries its labels; the
    user's messages are trusted sources unless ``prompts_trusted`` is false (a child's
    conversation, whose task a model wrote while untrusted text could steer it), and
    ``inherited_sources`` are texts a delegating run hands down (its trusted ones).
    """

    messages: list[Message] = field(default_factory=list)
    taint: Taint = CLEAN
    session_approvals: set[str] = field(default_factory=set)
    on_append: Callable[[Message, Taint], None] | None = None
    pending: list[PendingCall] = field(default_factory=list)
    prompts_trusted: bool = True
    inherited_sources: tuple[Source, ...] = ()
    _index: SourceIndex | None = field(default=None, init=False, repr=False, compare=False)

    def sources(self, system_prompt: str | None = None) -> tuple[Source, ...]:
        """Every text the model has seen in this conversation, with its labels. Each
        message is read once (``SourceIndex``): the first call reads them all (a loaded
        conversation's too), later ones only those appended since."""
        return self.index().sources(self.messages, system_prompt, self.inherited_sources)

    def index(self) -> SourceIndex:
        """The sources read so far, and what they hold (``SourceIndex``): the values the
        model wrote into untraced calls, the secrets results declared."""
        index = self._index
        if index is None or index.prompts_trusted != self.prompts_trusted:
            index = self._index = SourceIndex(self.prompts_trusted)
        index.sources(self.messages)
        return index

    def append(self, message: Message) -> None:
        self.messages.append(message)
        if self.on_append is not None:
            self.on_append(message, self.taint)

    def grow_taint(self, taint: Taint) -> None:
        self.taint = self.taint | taint

    @property
    def unanswered_calls(self) -> list[ToolCall]:
        """Calls of the last assistant message that have no result yet (a paused run's, or
        a run's a killed process left)."""
        if not self.messages or self.messages[-1].role != "assistant":
            return []
        return self.messages[-1].tool_calls

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "messages": [message_to_dict(m) for m in self.messages],
            "taint": self.taint.to_dict(),
            "session_approvals": sorted(self.session_approvals),
        }
        if self.pending:
            out["pending"] = calls_to_dict(self.pending)
        if not self.prompts_trusted:
            out["prompts_trusted"] = False
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Conversation:
        conversation = cls(
            [message_from_dict(m) for m in d.get("messages", [])],
            Taint.from_dict(d.get("taint", {})),
            set(d.get("session_approvals", [])),
            prompts_trusted=d.get("prompts_trusted", True) is not False,
        )
        if d.get("pending") is not None:
            conversation.pending = list(calls_from_dict(d["pending"],
                                                        conversation.unanswered_calls))
        return conversation


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call waiting for a host's decision (a paused run).

    ``position`` is the call's place among the tool calls of the paused turn (0 first):
    what identifies it, since a call id is whatever the model or server wrote and two calls
    may share one. ``None`` only in states saved before positions were recorded.

    A ``PendingCall`` can key a decision (``agent.resume(conv, {result.pending[0]:
    Decision.allow()})``); it hashes by position, id and tool.
    """

    call_id: str
    tool: str
    arguments: Any
    reason: ApprovalReason
    explanation: str
    position: int | None = None

    def __hash__(self) -> int:
        # The arguments (a dict) are left out of the hash, not out of equality.
        return hash((self.position, self.call_id, self.tool))


# --- the pending calls' codec (what a paused run's state and a session store keep) --------

# The version this release writes. Bump it (and add a loader branch plus corpus files)
# whenever the shape of ``to_dict`` changes. Version 2 added each call's ``position``.
PENDING_STATE_VERSION = 2
READABLE_PENDING_VERSIONS = (1, 2)

def pending_call_to_dict(call: PendingCall) -> dict[str, Any]:
    return {"call_id": call.call_id, "tool": call.tool, "arguments": call.arguments,
            "reason": call.reason, "explanation": call.explanation, "position": call.position}


def pending_call_from_dict(d: Mapping[str, Any]) -> PendingCall:
    if not isinstance(d, Mapping):
        raise PendingStateError(f"a pending call must be an object, not {type(d).__name__}")
    missing = [k for k in ("call_id", "tool") if not isinstance(d.get(k), str)]
    if missing:
        raise PendingStateError(f"a pending call lacks {', '.join(missing)}: "
                                f"{inline(repr(dict(d)))}")
    reason = d.get("reason", "needs_approval")
    if reason not in ("needs_approval", "trifecta", "hook"):
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
    check_pending_version(d)
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


def check_pending_version(d: Mapping[str, Any]) -> None:
    """Raise ``PendingStateError`` unless ``d`` is a saved pending state of a version this
    release reads."""
    if not isinstance(d, Mapping):
        raise PendingStateError(f"a pending state must be an object, not {type(d).__name__}")
    version = d.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise PendingStateError("a pending state needs an integer version")
    if version not in READABLE_PENDING_VERSIONS:
        newest = max(READABLE_PENDING_VERSIONS)
        raise PendingStateError(
            f"pending state version {version} cannot be read by this tether (it reads "
            f"version{'s' if len(READABLE_PENDING_VERSIONS) > 1 else ''} "
            f"{', '.join(map(str, READABLE_PENDING_VERSIONS))})"
            + ("; upgrade tether" if version > newest else ""))



@runtime_checkable
class SessionLike(Protocol):
    """What a run needs of a stored session (``Agent.run(prompt, session=...)``): the live
    conversation to continue (the same object each time; it stores what is appended), and
    every event of the run, each handed over before anyone else sees it. ``Session`` is one.
    The events (``tether.events.Event``) sit on the floor above this one, which names them
    only by what it needs: a value recorded.
    """

    def conversation(self) -> Conversation: ...

    def record(self, event: Any) -> None: ...
