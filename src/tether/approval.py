"""The approval gate: who says yes before a gated tool call runs.

An approver is any object with ``async def approve(self, request) -> Decision``. Whatever
goes wrong while asking (an exception, a timeout, a malformed answer) is a denial: the gate
fails closed. This module holds the protocol and the decisions (and ``ask``, which fails
closed); the approver that asks a person at the terminal is the command line's
(``tether.cli.approver``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from tether.trust import Capabilities, Taint

# Why a call is asked about: its tool needs approval, the trifecta interlock, or a host's
# hook asked (tether.run.hooks.AskApproval).
ApprovalReason: TypeAlias = Literal["needs_approval", "trifecta", "hook"]
PermissionMode: TypeAlias = Literal["ask", "allow", "read-only"]
PERMISSION_MODES: tuple[str, ...] = ("ask", "allow", "read-only")
# What a decision says: allow once, allow for the session, deny, or answer later.
ApprovalVerdict: TypeAlias = Literal["once", "session", "deny", "defer"]
VERDICTS: tuple[str, ...] = ("once", "session", "deny", "defer")
# Who decided a gated call: the approver (or a host's decision on resume), the session's
# approvals, the policy (nobody to ask), the permission mode, the gate failing closed
# because the approver failed or did not answer in time, or the run's interrupt, set while
# the approver was asked (Ctrl-C at the prompt), which denies the call.
DecidedBy: TypeAlias = Literal["approver", "session_cache", "policy", "permission_mode",
                               "error", "timeout", "interrupt"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One call waiting for a decision.

    ``reason`` is why it is asked: ``needs_approval`` (the tool is gated), ``trifecta``
    (the call could send data out while the conversation holds private data and untrusted
    text) or ``hook`` (a host's hook asked); ``explanation`` says it in words.
    ``can_cache`` says whether ``Decision.allow_for_session()`` will be honoured for this
    tool. ``content_params`` are the arguments the tool declares as content (a file's text,
    a message's body): the panel shows such a text as its lines; every other value stays on
    one line.
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
    content_params: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """An approver's answer. Build with ``allow()``, ``allow_for_session()``, ``deny(reason)``
    or (for hosts that answer later, see sessions) ``defer()``. ``verdict`` says which."""

    verdict: ApprovalVerdict
    reason: str | None = None

    @property
    def allowed(self) -> bool:
        return self.verdict in ("once", "session")

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
        return {"verdict": self.verdict, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Decision:
        """Reads ``to_dict``'s shape, and the older one that named the verdict ``scope``."""
        verdict = d.get("verdict", d.get("scope"))
        if verdict not in VERDICTS:
            raise ValueError(f"unknown decision verdict {verdict!r}")
        return cls(verdict, d.get("reason"))


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


INTERRUPTED = "the run was interrupted while waiting for an answer"


async def ask(
    approver: Approver, request: ApprovalRequest, timeout: float | None,
    interrupt: asyncio.Event | None = None,
) -> tuple[Decision, DecidedBy]:
    """Ask ``approver``; returns the decision and who made it. Never raises: an error, a
    timeout or an answer that is not a ``Decision`` denies. The run's ``interrupt``, set
    before or while the approver is asked, denies too: the approver is cancelled (a person
    at a prompt is asked no more) and waited for."""
    if interrupt is not None and interrupt.is_set():
        return Decision.deny(INTERRUPTED), "interrupt"
    try:
        async with asyncio.timeout(timeout):
            if interrupt is None:
                decision = await approver.approve(request)
            else:
                answered = await _unless_interrupted(approver.approve(request), interrupt)
                if answered is None:
                    return Decision.deny(INTERRUPTED), "interrupt"
                decision = answered
    except TimeoutError:
        return Decision.deny(f"the approver did not answer within {timeout:g}s"), "timeout"
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return Decision.deny(f"the approver failed ({type(e).__name__}: {e})"), "error"
    if not isinstance(decision, Decision):
        return Decision.deny(f"the approver answered {decision!r}, not a Decision"), "error"
    if decision.verdict == "session" and not request.can_cache:
        decision = Decision.allow()
    return decision, "approver"


async def _unless_interrupted(asking: Awaitable[Decision],
                              interrupt: asyncio.Event) -> Decision | None:
    """What ``asking`` answers, or None when ``interrupt`` is set first (``asking`` is then
    cancelled, and waited for, so nothing it started is left reading or running)."""
    answer = asyncio.ensure_future(asking)
    interrupted = asyncio.ensure_future(interrupt.wait())
    try:
        await asyncio.wait((answer, interrupted), return_when=asyncio.FIRST_COMPLETED)
    finally:  # our own cancellation too: neither task outlives this call
        interrupted.cancel()
        if not answer.done():
            answer.cancel()
            await asyncio.wait((answer,))
    if interrupt.is_set():  # an answer given in the same instant counts for nothing
        return None
    return answer.result()
