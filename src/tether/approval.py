"""The approval gate: who says yes before a gated tool call runs.

An approver is any object with ``async def approve(self, request) -> Decision``. One that
also has ``async def approve_turn(self, turn) -> Sequence[Decision]`` (a ``TurnApprover``)
is asked once per turn about every call of the turn that needs a person, each call shown
and decided on its own; one with ``approve`` alone is asked call by call, in call order.
Whatever goes wrong while asking (an exception, a timeout, a malformed answer) is a denial:
the gate fails closed. This module holds the protocols and the decisions (and ``ask`` and
``ask_turn``, which fail closed); the approver that asks a person at the terminal is the
command line's (``tether.cli.approver``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from tether.trust import Capabilities, Taint

ApprovalReason: TypeAlias = Literal["needs_approval", "trifecta"]
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

    ``reason`` is why it is asked: ``needs_approval`` (the tool is gated) or ``trifecta``
    (the call could send data out while the conversation holds private data and untrusted
    text); ``explanation`` says it in words. ``can_cache`` says whether
    ``Decision.allow_for_session()`` will be honoured for this tool. ``content_params`` are
    the arguments the tool declares as content (a file's text, a message's body): the
    panel shows such a text as its lines; every other value stays on one line.
    ``position`` is the call's place in its turn (the model's first call is 0), which is
    what a decision binds to: ``call_id`` is whatever the model wrote, and may repeat.
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
    position: int | None = None


@dataclass(frozen=True, slots=True)
class TurnApprovalRequest:
    """Every call of one turn that needs a person, in call order: one prompt.

    ``approve_turn`` answers it with one ``Decision`` per request, in the same order: the
    n-th decision answers the n-th request, whatever its call id says. Calls of the turn
    the gate settled itself (refused, allowed for the session before, allowed by the
    permission mode) are not in it.
    """

    requests: tuple[ApprovalRequest, ...]

    def __len__(self) -> int:
        return len(self.requests)


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


@runtime_checkable
class TurnApprover(Approver, Protocol):
    """An approver that decides a whole turn at once (one prompt for the turn). The gate
    uses ``approve_turn`` whenever the approver has it; ``approve`` stays for whoever asks
    about one call."""

    async def approve_turn(self, turn: TurnApprovalRequest) -> Sequence[Decision]: ...


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
    decision: Decision | None
    try:
        async with asyncio.timeout(timeout):
            if interrupt is None:
                decision = await approver.approve(request)
            else:
                answered = await _unless_interrupted(approver.approve(request), interrupt)
                if answered is None and interrupt.is_set():
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


async def ask_turn(
    approver: Approver, turn: TurnApprovalRequest, timeout: float | None,
    interrupt: asyncio.Event | None = None,
) -> list[tuple[Decision, DecidedBy]]:
    """One decision per request of ``turn``, in its order, each with who made it. Never
    raises.

    An approver with ``approve_turn`` is asked once, and the turn waits at most ``timeout``
    for it. An error, a timeout, the run's ``interrupt``, or an answer that is not a list
    (or tuple) of exactly one entry per request denies every call of the turn, each saying
    why (a decision that cannot be placed answers nothing: decisions bind by position, and
    a missing or extra one shifts them all). An entry that is not a ``Decision`` denies its
    own call. An approver with ``approve`` alone is asked about each call in turn, each
    under ``timeout`` (``ask``), the interrupt denying the calls not yet answered.
    """
    requests = turn.requests
    if not requests:
        return []
    batch = getattr(approver, "approve_turn", None)
    if not callable(batch):
        return [await ask(approver, request, timeout, interrupt) for request in requests]

    def every(decision: Decision, by: DecidedBy) -> list[tuple[Decision, DecidedBy]]:
        return [(decision, by)] * len(requests)

    if interrupt is not None and interrupt.is_set():
        return every(Decision.deny(INTERRUPTED), "interrupt")
    try:
        async with asyncio.timeout(timeout):
            if interrupt is None:
                answer = await batch(turn)
            else:
                answered = await _unless_interrupted(batch(turn), interrupt)
                if answered is None and interrupt.is_set():
                    return every(Decision.deny(INTERRUPTED), "interrupt")
                answer = answered
    except TimeoutError:
        return every(Decision.deny(f"the approver did not answer within {timeout:g}s (every "
                                   f"call of the turn is denied)"), "timeout")
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return every(Decision.deny(f"the approver failed ({type(e).__name__}: {e}); every "
                                   f"call of the turn is denied"), "error")
    if not isinstance(answer, list | tuple):
        return every(Decision.deny(f"the approver answered a {type(answer).__name__}, not a "
                                   f"list of decisions; every call of the turn is denied"),
                     "error")
    if len(answer) != len(requests):
        return every(Decision.deny(f"the approver answered {len(answer)} decision(s) for "
                                   f"{len(requests)} call(s), so none can be placed; every "
                                   f"call of the turn is denied"), "error")
    decided: list[tuple[Decision, DecidedBy]] = []
    for request, decision in zip(requests, answer, strict=True):
        if not isinstance(decision, Decision):
            decided.append((Decision.deny(f"the approver answered a "
                                          f"{type(decision).__name__} for this call, not a "
                                          f"Decision"), "error"))
            continue
        if decision.verdict == "session" and not request.can_cache:
            decision = Decision.allow()
        decided.append((decision, "approver"))
    return decided


_T = TypeVar("_T")


async def _unless_interrupted(asking: Awaitable[_T], interrupt: asyncio.Event) -> _T | None:
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
