"""The approval gate: who says yes before a gated tool call runs.

An approver is any object with ``async def approve(self, request) -> Decision``. Whatever
goes wrong while asking (an exception, a timeout, a malformed answer) is a denial: the gate
fails closed.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from tether.trust import Capabilities, Taint

ApprovalReason: TypeAlias = Literal["needs_approval", "trifecta"]
PermissionMode: TypeAlias = Literal["ask", "allow", "read-only"]
PERMISSION_MODES: tuple[str, ...] = ("ask", "allow", "read-only")


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One call waiting for a decision.

    ``reason`` is why it is asked: ``needs_approval`` (the tool is gated) or ``trifecta``
    (the call could send data out while the conversation holds private data and untrusted
    text); ``explanation`` says it in words. ``can_cache`` says whether
    ``Decision.allow_for_session()`` will be honoured for this tool.
    """

    call_id: str
    tool: str
    display_name: str
    arguments: Any
    reason: ApprovalReason
    explanation: str
    taint: Taint
    capabilities: Capabilities = field(default_factory=Capabilities)
    can_cache: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    """An approver's answer. Build with ``allow()``, ``allow_for_session()``, ``deny(reason)``
    or (for hosts that answer later, see sessions) ``defer()``."""

    scope: Literal["once", "session", "deny", "defer"]
    reason: str | None = None

    @property
    def allowed(self) -> bool:
        return self.scope in ("once", "session")

    @classmethod
    def allow(cls) -> Decision:
        return cls("once")

    @classmethod
    def allow_for_session(cls) -> Decision:
        return cls("session")

    @classmethod
    def deny(cls, reason: str = "") -> Decision:
        return cls("deny", reason or None)

    @classmethod
    def defer(cls) -> Decision:
        return cls("defer")

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Decision:
        scope = d.get("scope")
        if scope not in ("once", "session", "deny", "defer"):
            raise ValueError(f"unknown decision scope {scope!r}")
        return cls(scope, d.get("reason"))


@runtime_checkable
class Approver(Protocol):
    async def approve(self, request: ApprovalRequest) -> Decision: ...


class AllowAll:
    """Approves everything that reaches it (``--yes``). The trifecta block still applies."""

    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.allow()


class DenyAll:
    """Refuses everything, with a reason a model can read."""

    def __init__(self, reason: str = "no approver is configured") -> None:
        self.reason = reason

    async def approve(self, request: ApprovalRequest) -> Decision:
        return Decision.deny(self.reason)


async def ask(
    approver: Approver, request: ApprovalRequest, timeout: float | None
) -> tuple[Decision, str]:
    """Ask ``approver``; returns the decision and who made it. Never raises: an error, a
    timeout or an answer that is not a ``Decision`` denies."""
    try:
        async with asyncio.timeout(timeout):
            decision = await approver.approve(request)
    except TimeoutError:
        return Decision.deny(f"the approver did not answer within {timeout:g}s"), "timeout"
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return Decision.deny(f"the approver failed ({type(e).__name__}: {e})"), "error"
    if not isinstance(decision, Decision):
        return Decision.deny(f"the approver answered {decision!r}, not a Decision"), "error"
    if decision.scope == "session" and not request.can_cache:
        decision = Decision.allow()
    return decision, "approver"


class ConsoleApprover:
    """Asks the person at the terminal: y (once), a (always, this session), n (deny)."""

    def __init__(self, console: Any = None) -> None:
        self._console = console
        self._lock = asyncio.Lock()  # one prompt at a time when calls run concurrently

    async def approve(self, request: ApprovalRequest) -> Decision:
        async with self._lock:
            return await asyncio.to_thread(self._prompt, request)

    def _prompt(self, request: ApprovalRequest) -> Decision:
        from rich.console import Console
        from rich.panel import Panel
        from rich.prompt import Prompt

        console: Console = self._console or Console(stderr=True)
        args = json.dumps(request.arguments, indent=2, ensure_ascii=False, default=str)
        body = f"[bold]{request.display_name}[/] ({request.tool})\n{args}\n\n" \
               f"[yellow]{request.explanation}[/]"
        console.print(Panel(body, title="Approval needed", border_style="yellow"))
        choices = ["y", "a", "n"] if request.can_cache else ["y", "n"]
        answer = Prompt.ask("Allow? y=once" + (", a=always this session" if request.can_cache
                                               else "") + ", n=deny",
                            choices=choices, default="n", console=console)
        if answer == "y":
            return Decision.allow()
        if answer == "a":
            return Decision.allow_for_session()
        return Decision.deny("the user said no")
