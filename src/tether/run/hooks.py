"""Hooks: a host's code at five points of a run, which can only narrow what the run does.

A hook is any object with one or more of these async methods (``Hook``; each optional):

- ``before_model_request(request: RequestView)``: may answer ``AmendRequest`` (add
  instructions, drop tools), never add a tool: the answer has no field for one;
- ``after_model_response(response: ModelResponse)``: may answer ``Flag``;
- ``before_tool_call(call: CallView)``: runs after the gate's verdict (a call the gate
  refused never reaches it) and may answer ``RefuseCall`` or ``AskApproval``: there is no
  answer that allows;
- ``after_tool_result(result: ResultView)``: may answer ``RewriteResult`` (redact or
  annotate the content); the result's trust, labels and the taint it brings are tether's,
  computed from what the tool returned, never from the hook;
- ``on_run_end(result: RunEnd)``: observes.

Any point may answer ``Flag`` (a note, kept as an event) or ``None`` (no change). Anything
else, an exception, or no answer within ``hook_timeout_secs`` is a ``HookError`` that ends
the run (fail closed). Several hooks run in the order given; the methods each has are found
once, when the agent is made (``Hooks.of``), so a run without hooks pays one truth test
per point. What a hook sees is frozen (changing it raises, which ends the run) or its own
copy (a call's view and arguments); a hook that changes a frozen value anyway, in place
(``object.__setattr__``), is caught after it answers (``tether.run.frozen``) and ends the
run too. A hook runs in the host's process: one that patches tether's modules is beyond
what an interface can hold; load only hooks you trust, as a tool file.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from tether import events as ev
from tether.display import inline
from tether.errors import ConfigError, HookError, TetherError
from tether.messages import Message, ToolCall
from tether.outcome import StopCause
from tether.providers.base import ModelResponse
from tether.result import ToolCallRecord
from tether.run.frozen import Fingerprint
from tether.trust import Capabilities, Taint

# --- what a hook sees -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestView:
    """The request about to be sent: the run's ``turn`` (1 is its first request),
    ``prompt`` (the text this run was given; None for a resumed run), the conversation's
    ``messages`` (frozen values), the ``system`` prompt and the names of the ``tools``
    offered."""

    turn: int
    prompt: str | None
    messages: tuple[Message, ...]
    system: str | None
    tools: tuple[str, ...]
    taint: Taint


@dataclass(frozen=True, slots=True)
class CallView:
    """A call the gate would run (``verdict == "run"``) or ask about (``"ask"``): its id,
    tool, validated ``arguments`` (a copy), the tool's capabilities and the taint."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    capabilities: Capabilities
    taint: Taint
    verdict: Literal["run", "ask"]


@dataclass(frozen=True, slots=True)
class ResultView:
    """A call's result before the model reads it: the content its tool returned, whether
    that is an error, and whether it is outside text (``outside``: it will be shown as
    untrusted data and taint the conversation, whatever a hook answers)."""

    call_id: str
    tool: str
    content: str
    is_error: bool
    outside: bool


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a run ended, for ``on_run_end``: its answer, why it stopped, its turns, its calls
    and its error (the ``RunResult`` itself, and its conversation, are not handed out)."""

    text: str
    stop_cause: StopCause
    turns: int
    tool_calls: tuple[ToolCallRecord, ...]
    taint: Taint
    error: TetherError | None
    output: Any


# --- what a hook may answer -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Flag:
    """A note: kept as a ``HookDecided`` event (and a span attribute); nothing changes."""

    reason: str


@dataclass(frozen=True, slots=True)
class AmendRequest:
    """``before_model_request``: ``instructions`` joined to the system prompt of this
    request, the tools named in ``drop_tools`` not offered this turn (a call the model
    makes to one anyway is refused as unknown). Names of tools not offered are ignored."""

    instructions: str = ""
    drop_tools: frozenset[str] = field(default_factory=frozenset)
    reason: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.drop_tools, str):  # one name given bare
            object.__setattr__(self, "drop_tools", frozenset((self.drop_tools,)))
        else:
            object.__setattr__(self, "drop_tools", frozenset(self.drop_tools))


@dataclass(frozen=True, slots=True)
class RefuseCall:
    """``before_tool_call``: the call does not run; the model reads ``reason``."""

    reason: str


@dataclass(frozen=True, slots=True)
class AskApproval:
    """``before_tool_call``: the approver is asked before the call runs (no permission
    mode or session approval answers for it); ``reason`` is shown to it."""

    reason: str


@dataclass(frozen=True, slots=True)
class RewriteResult:
    """``after_tool_result``: the model reads ``content`` instead of what the tool returned
    (redacted, annotated), with the trust the tool's output had."""

    content: str
    reason: str = ""


# --- the protocol -----------------------------------------------------------------------------


@runtime_checkable
class BeforeModelRequest(Protocol):
    async def before_model_request(self, request: RequestView, /) -> AmendRequest | Flag | None:
        ...


@runtime_checkable
class AfterModelResponse(Protocol):
    async def after_model_response(self, response: ModelResponse, /) -> Flag | None: ...


@runtime_checkable
class BeforeToolCall(Protocol):
    async def before_tool_call(self, call: CallView, /) -> RefuseCall | AskApproval | Flag | None:
        ...


@runtime_checkable
class AfterToolResult(Protocol):
    async def after_tool_result(self, result: ResultView, /) -> RewriteResult | Flag | None: ...


@runtime_checkable
class OnRunEnd(Protocol):
    async def on_run_end(self, result: RunEnd, /) -> None: ...


# A hook: an object with any of the five methods.
Hook: TypeAlias = BeforeModelRequest | AfterModelResponse | BeforeToolCall | AfterToolResult \
    | OnRunEnd

POINTS: tuple[str, ...] = ("before_model_request", "after_model_response", "before_tool_call",
                           "after_tool_result", "on_run_end")
# What each point may answer besides None.
_ANSWERS: Mapping[str, tuple[type, ...]] = {
    "before_model_request": (AmendRequest, Flag),
    "after_model_response": (Flag,),
    "before_tool_call": (RefuseCall, AskApproval, Flag),
    "after_tool_result": (RewriteResult, Flag),
    "on_run_end": (),
}
_VERDICTS: Mapping[type, ev.HookVerdict] = {
    AmendRequest: "amend", Flag: "flag", RefuseCall: "refuse", AskApproval: "ask",
    RewriteResult: "rewrite"}

_Method = Callable[[Any], Awaitable[Any]]


def hook_name(hook: object) -> str:
    """A hook's name in events and errors: its ``name`` attribute, else its class's."""
    name = getattr(hook, "name", None)
    return name if isinstance(name, str) and name else type(hook).__name__


@dataclass(frozen=True, slots=True)
class Hooks:
    """An agent's hooks, compiled once: for each point, the (name, method) pairs, in order.
    Empty (``NO_HOOKS``) is false, and so is each point nobody implements."""

    before_model_request: tuple[tuple[str, _Method], ...] = ()
    after_model_response: tuple[tuple[str, _Method], ...] = ()
    before_tool_call: tuple[tuple[str, _Method], ...] = ()
    after_tool_result: tuple[tuple[str, _Method], ...] = ()
    on_run_end: tuple[tuple[str, _Method], ...] = ()
    given: tuple[object, ...] = ()
    # A hook that must judge an answer before anyone sees it (a blocking output guardrail
    # says so with ``holds_text = True``): the loop holds the answer's streamed text back
    # until every after_model_response hook has answered.
    holds_text: bool = False

    @classmethod
    def of(cls, hooks: Iterable[Hook] | Hooks) -> Hooks:
        """The hooks ``hooks`` are, each method checked to be async; an object with none of
        the five methods is a ``ConfigError`` (a typo would otherwise do nothing)."""
        if isinstance(hooks, Hooks):
            return hooks
        given = tuple(hooks)
        if not given:
            return NO_HOOKS
        points: dict[str, list[tuple[str, _Method]]] = {p: [] for p in POINTS}
        for hook in given:
            name = hook_name(hook)
            found = False
            for point in POINTS:
                method = getattr(hook, point, None)
                if method is None:
                    continue
                if not inspect.iscoroutinefunction(method):
                    raise ConfigError(f"hook {name}: {point} must be an async method "
                                      f"(async def {point}(self, ...))")
                points[point].append((name, method))
                found = True
            if not found:
                raise ConfigError(f"hook {name} ({type(hook).__name__}) has none of the hook "
                                  f"methods: {', '.join(POINTS)}")
        holds = any(getattr(h, "holds_text", False) is True for h in given)
        return cls(**{p: tuple(m) for p, m in points.items()}, given=given, holds_text=holds)

    def __bool__(self) -> bool:
        return bool(self.given)


NO_HOOKS = Hooks()


async def _answer(name: str, point: str, method: _Method, argument: Any,
                  timeout: float | None) -> Any:
    """What one hook answered at ``point``, checked; its failure, its silence past
    ``timeout`` or an answer it may not give is a ``HookError``."""
    try:
        async with asyncio.timeout(timeout):
            answer = await method(argument)
    except HookError:
        raise  # a guardrail that tripped, or a hook that says why itself
    except TimeoutError:
        raise HookError(f"hook {inline(name)} did not answer {point} within {timeout:g}s "
                        f"(hook_timeout_secs); the run stops", hook=name, point=point) from None
    except asyncio.CancelledError as e:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the run's own cancellation (an interrupt, a closed stream): not the hook's
        raise HookError(f"hook {inline(name)} failed in {point}: CancelledError: "
                        f"{inline(e)}", hook=name, point=point) from e
    except BaseException as e:
        # Whatever a hook raises ends the run as a HookError with its result: an exception
        # outside Exception must not tear the run down without one (fail closed, typed).
        raise HookError(f"hook {inline(name)} failed in {point}: {type(e).__name__}: "
                        f"{inline(e)}", hook=name, point=point) from e
    allowed = _ANSWERS[point]
    if answer is not None and not isinstance(answer, allowed):
        may = ", ".join(t.__name__ for t in allowed) + (" or " if allowed else "") + "None"
        raise HookError(f"hook {inline(name)} answered {type(answer).__name__} from {point}, "
                        f"which may answer only {may}; the run stops", hook=name, point=point)
    return answer


def _unchanged(seen: Fingerprint, name: str, point: str, what: str) -> None:
    """Fail closed when hook ``name`` changed, in place, what it was shown and may not
    change (``object.__setattr__`` on a frozen value, a write into a shared dict)."""
    if seen.changed():
        seen.restore()  # shared values (a tool's, the taint) never keep a hook's change
        raise HookError(f"hook {inline(name)} changed {what} in place in {point} (what a hook "
                        f"is shown is frozen); the run stops", hook=name, point=point)


async def _judged(name: str, point: str, method: _Method, argument: Any,
                  timeout: float | None, seen: Fingerprint, what: str) -> Any:
    """``_answer``, then the check that the hook changed nothing it was shown, even when it
    failed (its error is the one told; the change is why the run stops either way)."""
    try:
        answer = await _answer(name, point, method, argument, timeout)
    except HookError:
        _unchanged(seen, name, point, what)
        raise
    _unchanged(seen, name, point, what)
    return answer


def _decided(name: str, point: str, answer: Any, call_id: str | None = None,
             reason: str | None = None) -> ev.HookDecided:
    said = reason if reason is not None else getattr(answer, "reason", "")
    return ev.HookDecided(name, point, _VERDICTS[type(answer)], str(said), call_id)


def failed(error: HookError) -> ev.HookDecided:
    """The event a hook's failure is recorded as."""
    return ev.HookDecided(error.hook, error.point, "failed", str(error))


@dataclass(frozen=True, slots=True)
class Amended:
    """What ``before_model_request`` hooks made of a request: instructions to add, tools to
    drop, and the events that say so."""

    instructions: tuple[str, ...] = ()
    dropped: frozenset[str] = frozenset()
    events: tuple[ev.Event, ...] = ()


async def amend_request(hooks: Hooks, view: RequestView, timeout: float | None) -> Amended:
    """Every ``before_model_request`` hook, in order, on ``view``."""
    instructions: list[str] = []
    dropped: set[str] = set()
    events: list[ev.Event] = []
    seen = Fingerprint((view.messages, view.taint))
    for name, method in hooks.before_model_request:
        answer = await _judged(name, "before_model_request", method, view, timeout, seen,
                               "the conversation's messages or taint")
        if answer is None:
            continue
        if isinstance(answer, AmendRequest):
            if answer.instructions:
                instructions.append(answer.instructions)
            dropped |= answer.drop_tools & set(view.tools)
        events.append(_decided(name, "before_model_request", answer))
    return Amended(tuple(instructions), frozenset(dropped), tuple(events))


# The calls of the response being observed that give the run its structured answer (an
# output guardrail checks their arguments: the answer's value). Set only while the
# after_model_response hooks run, in the run's own task.
_ANSWER_CALLS: ContextVar[tuple[ToolCall, ...]] = ContextVar("tether_answer_calls", default=())


def answer_calls() -> tuple[ToolCall, ...]:
    """In an ``after_model_response`` hook: the calls of the response that answer the run
    (a structured-output run's answering tool; none for a text answer)."""
    return _ANSWER_CALLS.get()


async def observe_response(hooks: Hooks, response: ModelResponse, timeout: float | None,
                           answers: tuple[ToolCall, ...] = ()) -> list[ev.Event]:
    """Every ``after_model_response`` hook, in order; the flags they raised. ``answers``:
    the response's calls that give the run its answer (``answer_calls``)."""
    events: list[ev.Event] = []
    token = _ANSWER_CALLS.set(answers)
    try:
        seen = Fingerprint((response,))
        for name, method in hooks.after_model_response:
            answer = await _judged(name, "after_model_response", method, response, timeout,
                                   seen, "the model's response")
            if answer is not None:
                events.append(_decided(name, "after_model_response", answer))
    finally:
        _ANSWER_CALLS.reset(token)
    return events


async def judge_call(hooks: Hooks, view: CallView, timeout: float | None
                     ) -> tuple[RefuseCall | AskApproval | None, list[ev.Event]]:
    """Every ``before_tool_call`` hook, in order, until one refuses: the narrowest answer
    (a refusal over an ask), and the events. What becomes of it is the gate's to say
    (``tether.run.gate.narrowed``): it can only narrow."""
    narrowest: RefuseCall | AskApproval | None = None
    events: list[ev.Event] = []
    # The view and its arguments are each hook's own copy (no hook can change the arguments
    # that run, or what the next sees); the capabilities and the taint are the tool's and
    # the conversation's own, checked after each hook.
    shared = Fingerprint((view.capabilities, view.taint))
    for name, method in hooks.before_tool_call:
        seen = CallView(view.call_id, view.tool, copy.deepcopy(view.arguments),
                        view.capabilities, view.taint, view.verdict)
        answer = await _judged(name, "before_tool_call", method, seen, timeout, shared,
                               "the tool's capabilities or the taint")
        if answer is None:
            continue
        events.append(_decided(name, "before_tool_call", answer, view.call_id))
        if isinstance(answer, RefuseCall):
            return answer, events
        if isinstance(answer, AskApproval) and narrowest is None:
            narrowest = answer
    return narrowest, events


async def rewrite_result(hooks: Hooks, view: ResultView, timeout: float | None
                         ) -> tuple[str | None, list[ev.Event]]:
    """Every ``after_tool_result`` hook, in order, each seeing the content as the one
    before left it: the new content (None: unchanged), and the events."""
    content: str | None = None
    events: list[ev.Event] = []
    for name, method in hooks.after_tool_result:
        answer = await _answer(name, "after_tool_result", method, view, timeout)
        if answer is None:
            continue
        if isinstance(answer, RewriteResult):
            if not isinstance(answer.content, str):
                raise HookError(f"hook {inline(name)} rewrote a result with a "
                                f"{type(answer.content).__name__}, not a str", hook=name,
                                point="after_tool_result")
            content = answer.content
            view = ResultView(view.call_id, view.tool, content, view.is_error, view.outside)
        events.append(_decided(name, "after_tool_result", answer, view.call_id))
    return content, events


async def run_ended(hooks: Hooks, end: RunEnd, timeout: float | None) -> None:
    """Every ``on_run_end`` hook, in order."""
    seen = Fingerprint((end.tool_calls, end.taint, end.output))
    for name, method in hooks.on_run_end:
        await _judged(name, "on_run_end", method, end, timeout, seen,
                      "the run's call records, taint or output")


__all__ = [
    "NO_HOOKS",
    "AfterModelResponse",
    "AfterToolResult",
    "AmendRequest",
    "AskApproval",
    "BeforeModelRequest",
    "BeforeToolCall",
    "CallView",
    "Flag",
    "Hook",
    "Hooks",
    "OnRunEnd",
    "RefuseCall",
    "RequestView",
    "ResultView",
    "RewriteResult",
    "RunEnd",
    "answer_calls",
]
