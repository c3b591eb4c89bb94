"""A conversation: its messages and what they have exposed the agent to (its taint)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.approval import ApprovalReason
from tether.messages import Message, ToolCall, message_from_dict, message_to_dict
from tether.trust import CLEAN, Taint


@dataclass(slots=True)
class Conversation:
    """Messages plus what they have exposed the agent to. Pass one to ``run`` to continue.

    ``taint`` only grows. ``session_approvals`` holds the tools a person allowed "for this
    session". ``on_append`` (set by the session store) sees each message as it is added.
    """

    messages: list[Message] = field(default_factory=list)
    taint: Taint = CLEAN
    session_approvals: set[str] = field(default_factory=set)
    on_append: Callable[[Message, Taint], None] | None = None

    def append(self, message: Message) -> None:
        self.messages.append(message)
        if self.on_append is not None:
            self.on_append(message, self.taint)

    def grow_taint(self, taint: Taint) -> None:
        self.taint = self.taint | taint

    @property
    def pending_calls(self) -> list[ToolCall]:
        """Calls of the last assistant message that have no result yet (a paused run)."""
        if not self.messages or self.messages[-1].role != "assistant":
            return []
        return self.messages[-1].tool_calls

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": [message_to_dict(m) for m in self.messages],
            "taint": self.taint.to_dict(),
            "session_approvals": sorted(self.session_approvals),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Conversation:
        return cls(
            [message_from_dict(m) for m in d.get("messages", [])],
            Taint.from_dict(d.get("taint", {})),
            set(d.get("session_approvals", [])),
        )


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call waiting for a host's decision (a paused run)."""

    call_id: str
    tool: str
    arguments: Any
    reason: ApprovalReason
    explanation: str
