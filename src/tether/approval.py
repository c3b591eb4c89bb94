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
import datetime
import math
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from tether.trust import Capabilities, Taint

_T = TypeVar("_T")

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
    one line. ``position`` is the call's place in its turn (the model's first call is 0),
    which is what a decision binds to: ``call_id`` is whatever the model wrote, and may
    repeat.
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


# --- elicitation: a server asks the person for input ----------------------------------------

# The kinds of a form's field: a string, a whole number, a number, yes or no, one choice of
# ``choices``, or several of them.
FieldKind: TypeAlias = Literal["string", "integer", "number", "boolean", "choice", "choices"]
ElicitAction: TypeAlias = Literal["accept", "decline", "cancel"]
FORMATS: tuple[str, ...] = ("email", "uri", "date", "date-time")


@dataclass(frozen=True, slots=True)
class FormField:
    """One field of a server's form, typed from the schema it sent. ``name`` is the key
    the answer carries; ``title`` and ``description`` are the server's words for it.
    ``choices`` are a choice's values (``choice_titles`` their labels, when the server
    gave them); ``minimum``/``maximum`` bound a number, ``min_length``/``max_length`` a
    string, ``min_items``/``max_items`` a set of choices; ``format`` is one of
    ``FORMATS``."""

    name: str
    kind: FieldKind
    title: str | None = None
    description: str | None = None
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    choice_titles: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    format: str | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` does not fit this field, in words for the person; None when it
        does."""
        kind = self.kind
        if kind == "boolean":
            return None if isinstance(value, bool) else "not yes or no"
        if kind in ("integer", "number"):
            if isinstance(value, bool) or not isinstance(value, int | float) or \
                    (kind == "integer" and not isinstance(value, int)) or \
                    (isinstance(value, float) and not math.isfinite(value)):
                return "not a whole number" if kind == "integer" else "not a number"
            if self.minimum is not None and value < self.minimum:
                return f"less than {self.minimum:g}"
            if self.maximum is not None and value > self.maximum:
                return f"more than {self.maximum:g}"
            return None
        if kind == "choices":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return "not a list of choices"
            if any(v not in self.choices for v in value) or len(set(value)) != len(value):
                return "not distinct choices of the list"
            if self.min_items is not None and len(value) < self.min_items:
                return f"fewer than {self.min_items} choices"
            if self.max_items is not None and len(value) > self.max_items:
                return f"more than {self.max_items} choices"
            return None
        if not isinstance(value, str):
            return "not text"
        if kind == "choice":
            return None if value in self.choices else "not one of the choices"
        if self.min_length is not None and len(value) < self.min_length:
            return f"shorter than {self.min_length} characters"
        if self.max_length is not None and len(value) > self.max_length:
            return f"longer than {self.max_length} characters"
        return _format_problem(self.format, value)


def _format_problem(form: str | None, value: str) -> str | None:
    if form == "email":
        local, at, domain = value.partition("@")
        return None if at and local and "." in domain and " " not in value \
            else "not an email address"
    if form == "uri":
        scheme, colon, rest = value.partition(":")
        return None if colon and scheme.isascii() and scheme[:1].isalpha() and rest \
            else "not a URI (scheme:...)"
    try:
        if form == "date":
            datetime.date.fromisoformat(value)
        elif form == "date-time":
            datetime.datetime.fromisoformat(value)
    except ValueError:
        return f"not a {'date (YYYY-MM-DD)' if form == 'date' else 'date and time (ISO 8601)'}"
    return None


def form_problem(fields: tuple[FormField, ...], values: Mapping[str, Any]) -> str | None:
    """Why ``values`` do not answer the form ``fields``: a key it does not ask for, a
    required field left out, a value that does not fit; None when they answer it."""
    names = {f.name for f in fields}
    for key in values:
        if key not in names:
            return f"{key!r} is not a field of the form"
    for f in fields:
        if f.name not in values:
            if f.required:
                return f"the required field {f.name!r} has no value"
            continue
        why = f.problem(values[f.name])
        if why is not None:
            return f"{f.name!r}: {why}"
    return None


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """An MCP server asks the person for input, while one of its tools runs.

    ``server`` and ``trusted`` say who asks; ``message`` is the server's own text (to be
    shown literally, never as tether's words). A form (``mode == "form"``) has ``fields``;
    a URL request has ``url``, which is shown in full and never opened by tether.
    ``warning`` is tether's own word of caution, when there is one (the server asks for
    what looks like a secret; the answer would go to an untrusted server while the
    conversation holds private data); ``taint`` is the conversation's."""

    server: str
    trusted: bool
    message: str
    fields: tuple[FormField, ...] = ()
    url: str | None = None
    warning: str | None = None
    taint: Taint = field(default_factory=Taint)

    @property
    def mode(self) -> Literal["form", "url"]:
        return "url" if self.url is not None else "form"


@dataclass(frozen=True, slots=True)
class ElicitationAnswer:
    """The person's answer: ``accept`` (with the form's ``values``; for a URL, consent to
    open it), ``decline`` (an explicit no) or ``cancel`` (dismissed). ``reason`` says why,
    when tether declined on the person's behalf."""

    action: ElicitAction
    values: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None

    @classmethod
    def accept(cls, values: Mapping[str, Any] | None = None) -> ElicitationAnswer:
        return cls("accept", dict(values or {}))

    @classmethod
    def decline(cls, reason: str = "") -> ElicitationAnswer:
        return cls("decline", {}, reason or None)

    @classmethod
    def cancel(cls, reason: str = "") -> ElicitationAnswer:
        return cls("cancel", {}, reason or None)


@runtime_checkable
class Elicitor(Protocol):
    """An approver that can also answer a server's request for input (the optional part
    of the protocol: ``ConsoleApprover`` asks at the terminal)."""

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer: ...


async def elicit(
    approver: object, request: ElicitationRequest, timeout: float | None,
    interrupt: asyncio.Event | None = None,
) -> ElicitationAnswer:
    """Ask ``approver`` for the person's answer. Never raises, and fails closed: an
    approver that does not answer for a person (no ``elicit``: batch, durable runs,
    ``--yes``), an error, the timeout, the run's interrupt or an answer that does not fit
    the form is a decline (an interrupt: a cancel), with its reason."""
    if not isinstance(approver, Elicitor):
        return ElicitationAnswer.decline("no person to ask (the approver does not answer "
                                         "for one)")
    if interrupt is not None and interrupt.is_set():
        return ElicitationAnswer.cancel(INTERRUPTED)
    try:
        async with asyncio.timeout(timeout):
            asking = approver.elicit(request)
            if interrupt is None:
                answer: object = await asking
            else:
                answered = await _unless_interrupted(asking, interrupt)
                if answered is None:
                    return ElicitationAnswer.cancel(INTERRUPTED)
                answer = answered
    except TimeoutError:
        return ElicitationAnswer.decline(f"nobody answered within {timeout:g}s")
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return ElicitationAnswer.decline(f"the approver failed ({type(e).__name__}: {e})")
    if not isinstance(answer, ElicitationAnswer) or \
            answer.action not in ("accept", "decline", "cancel"):
        return ElicitationAnswer.decline("the approver's answer is not an ElicitationAnswer")
    if answer.action != "accept":
        return answer
    if request.mode == "url":
        return ElicitationAnswer.accept()
    why = form_problem(request.fields, answer.values)
    if why is not None:
        return ElicitationAnswer.decline(f"the answer does not fit the form: {why}")
    return answer
