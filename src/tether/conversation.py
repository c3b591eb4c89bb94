"""A conversation: its messages and what they have exposed the agent to (its taint).

Two words, two meanings: a call is *unanswered* while it has no result yet (the last
assistant message's calls, until the tool message answers them); it is *pending* while it
waits for a host's decision (a run paused for approval; ``Conversation.pending``). Every
pending call is unanswered; an unanswered call is pending only when a run paused on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tether.approval import ApprovalReason
from tether.messages import Message, ToolCall, message_from_dict, message_to_dict
from tether.provenance import Source, sources_of
from tether.trust import CLEAN, Taint

if TYPE_CHECKING:
    from tether.events import Event


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

    def sources(self, system_prompt: str | None = None) -> tuple[Source, ...]:
        """Every text the model has seen in this conversation, with its labels."""
        return sources_of(self.messages, system_prompt, prompts_trusted=self.prompts_trusted,
                          inherited=self.inherited_sources)

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

    @property
    def pending_calls(self) -> list[ToolCall]:
        """The old name of ``unanswered_calls`` (these are not all ``pending``: only the
        ones a paused run waits on for a decision are)."""
        return self.unanswered_calls

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "messages": [message_to_dict(m) for m in self.messages],
            "taint": self.taint.to_dict(),
            "session_approvals": sorted(self.session_approvals),
        }
        if self.pending:
            from tether.pending import calls_to_dict

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
            from tether.pending import calls_from_dict

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


@runtime_checkable
class SessionLike(Protocol):
    """What a run needs of a stored session (``Agent.run(prompt, session=...)``): the live
    conversation to continue (the same object each time; it stores what is appended), and
    every event of the run, each handed over before anyone else sees it. ``Session`` is one.
    """

    def conversation(self) -> Conversation: ...

    def record(self, event: Event) -> None: ...
