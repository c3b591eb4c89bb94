"""The typed events a run emits, consumed by the CLI, the session store and hosts.

Every decision of the gate is an event, so a host can log exactly what ran and why.
Events of a sub-agent reach the parent's stream with ``path`` naming the delegating call
ids, outermost first (``()`` for the top-level run). ``RunResult`` and ``ToolCallRecord``
are defined here too (a result holds its events, ``RunFinished`` holds the result); their
home is ``tether.result``.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from tether.approval import ApprovalReason, ApprovalVerdict, DecidedBy
from tether.conversation import Conversation, PendingCall
from tether.errors import TetherError
from tether.messages import Message, StopReason, ToolCall, ToolResult, Usage, usage_to_dict
from tether.outcome import StopCause
from tether.provenance import Trace
from tether.trust import Taint

# What became of a tool call: it ran (ok, or its own error), or the gate answered it.
ToolStatus: TypeAlias = Literal["ok", "error", "denied", "blocked", "unknown_tool", "invalid_args"]


@dataclass(frozen=True, slots=True)
class RunStarted:
    prompt: str
    model: str
    tools: tuple[str, ...]
    taint: Taint
    path: tuple[str, ...] = ()
    kind: Literal["run_started"] = "run_started"


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A model turn begins. ``max_output_tokens`` is what its request allows the model to
    write (the run's output token budget, less what it has spent), ``None`` for no bound."""

    turn: int
    path: tuple[str, ...] = ()
    kind: Literal["turn_started"] = "turn_started"
    max_output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    path: tuple[str, ...] = ()
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    path: tuple[str, ...] = ()
    kind: Literal["reasoning_delta"] = "reasoning_delta"


@dataclass(frozen=True, slots=True)
class ModelResponded:
    """One model turn finished: the assistant message as it will be kept. ``model``,
    ``response_id`` and ``raw_stop_reason`` are what the provider said (the model that
    answered, its id for the response, its own word for why it stopped), when it said it."""

    message: Message
    stop_reason: StopReason
    usage: Usage
    path: tuple[str, ...] = ()
    kind: Literal["model_responded"] = "model_responded"
    model: str = ""
    response_id: str | None = None
    raw_stop_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderRetry:
    """A model request failed and is sent again after ``wait_secs`` (to ``fallback``, the
    next provider of a ``fallback`` list, when set). ``usage`` is what the
    failed attempt spent as far as anyone knows (counted in the run's usage): nothing when
    the server refused it before any work, else its reported tokens or one request whose
    tokens are unknown."""

    attempt: int
    wait_secs: float
    error: str
    path: tuple[str, ...] = ()
    kind: Literal["provider_retry"] = "provider_retry"
    usage: Usage = dataclasses.field(default_factory=Usage)
    # The configured provider the request went to instead (``fallback = [...]``), None:
    # the same one again.
    fallback: str | None = None
    # Why, in a few words of tether's own ("HTTP 503", "unparsable model output").
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallRequested:
    call: ToolCall
    display_name: str
    path: tuple[str, ...] = ()
    kind: Literal["tool_call_requested"] = "tool_call_requested"


@dataclass(frozen=True, slots=True)
class TrifectaBlocked:
    """An armed send was refused by policy (or sent to the approver under ``ask``)."""

    call_id: str
    tool: str
    forecast: Taint
    policy: Literal["block", "ask"]
    reason: str
    path: tuple[str, ...] = ()
    kind: Literal["trifecta_blocked"] = "trifecta_blocked"


ProvenanceVerdict: TypeAlias = Literal["traced", "untraced", "fixed", "unanchored", "closed"]


@dataclass(frozen=True, slots=True)
class ProvenanceChecked:
    """The provenance gate traced a consequential call's values (``security.rule =
    "provenance"``): ``verdict`` is ``traced`` (every value occurs in a trusted text) or
    ``untraced`` (a value traces to no trusted text), ``fixed`` (a send that could leak
    private data declares no destination: where it goes is the tool's choice) or
    ``unanchored`` (no argument names what the call acts on: nothing to trace), or
    ``closed`` (its untraced values are places of the user's own closed directory, chosen
    from lists, and its content is the user's own words: it runs); ``traces`` name each
    value, its argument and the sources it was found in.
    An untraced call is then refused, asked about or waived (``TrifectaBlocked`` or
    ``TrifectaWaived`` follow)."""

    call_id: str
    tool: str
    verdict: ProvenanceVerdict
    traces: tuple[Trace, ...]
    path: tuple[str, ...] = ()
    kind: Literal["provenance_checked"] = "provenance_checked"


@dataclass(frozen=True, slots=True)
class TrifectaWaived:
    """An armed send went ahead because ``security.trifecta = "allow"`` waives the check."""

    call_id: str
    tool: str
    forecast: Taint
    reason: str
    path: tuple[str, ...] = ()
    kind: Literal["trifecta_waived"] = "trifecta_waived"


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    call_id: str
    tool: str
    display_name: str
    arguments: Any
    reason: ApprovalReason
    taint: Taint
    path: tuple[str, ...] = ()
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """A gated call's decision: ``verdict`` (``once``, ``session``, ``deny``, ``defer``)
    and ``by`` whom (see ``tether.approval.DecidedBy``)."""

    call_id: str
    tool: str
    allowed: bool
    verdict: ApprovalVerdict
    by: DecidedBy
    reason: str | None
    path: tuple[str, ...] = ()
    kind: Literal["approval_decided"] = "approval_decided"


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    tool: str
    display_name: str
    arguments: Any
    path: tuple[str, ...] = ()
    kind: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    tool: str
    status: ToolStatus
    result: ToolResult
    duration_secs: float
    path: tuple[str, ...] = ()
    kind: Literal["tool_finished"] = "tool_finished"


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """A running call's progress, as its MCP server reported it: ``progress`` of ``total``
    (``None``: unknown), and the server's ``message``, its own words (shown literally).
    Passed on at most a few times a second, the first and the last always."""

    call_id: str
    tool: str
    progress: float
    total: float | None = None
    message: str | None = None
    path: tuple[str, ...] = ()
    kind: Literal["tool_progress"] = "tool_progress"


@dataclass(frozen=True, slots=True)
class TaintChanged:
    before: Taint
    after: Taint
    cause: str  # the tool whose result changed it, or what else did (tools offered)
    path: tuple[str, ...] = ()
    kind: Literal["taint_changed"] = "taint_changed"


@dataclass(frozen=True, slots=True)
class ToolsRevealed:
    """A search of a run's deferred tools (``search_tools``) found these: they join the
    request's tools from the next turn on (``tether.tools.search``)."""

    names: tuple[str, ...]
    query: str
    path: tuple[str, ...] = ()
    kind: Literal["tools_revealed"] = "tools_revealed"


@dataclass(frozen=True, slots=True)
class SubagentStarted:
    call_id: str
    profile: str
    task: str
    path: tuple[str, ...] = ()
    kind: Literal["subagent_started"] = "subagent_started"


@dataclass(frozen=True, slots=True)
class SubagentFinished:
    """A delegation's child run ended, with ``stop_cause``; ``trusted`` says whether its
    answer reached the parent as trusted, ``reason`` why; ``usage`` is the child's own."""

    call_id: str
    profile: str
    stop_cause: StopCause
    trusted: bool
    reason: str
    usage: Usage
    path: tuple[str, ...] = ()
    kind: Literal["subagent_finished"] = "subagent_finished"


@dataclass(frozen=True, slots=True)
class UsageUpdated:
    delta: Usage
    total: Usage
    path: tuple[str, ...] = ()
    kind: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True)
class Notice:
    """Something a user should know that is not an error of the run (an MCP server that
    failed to start, a configuration warning)."""

    level: Literal["info", "warning", "error"]
    message: str
    source: str = ""
    path: tuple[str, ...] = ()
    kind: Literal["notice"] = "notice"


@dataclass(frozen=True, slots=True)
class ContextFitted:
    """What is sent was fitted into the model's context window (see tether.context).

    The conversation itself stays whole; this says what the request carries instead:
    ``messages_sent`` of the conversation's ``messages_before`` (the note standing for the
    left-out ones is not counted), ``dropped`` left out (``summarized`` of them
    stand in a summary), ``shortened`` tool results cut down, the estimated tokens before
    and after. ``reason``: ``window`` (the view passed the budget), ``overflow`` (the
    server refused the request; fitted tighter and sent again), ``continued`` (an earlier
    fitting still holds: the first request of a run on a fitted conversation). ``usage``
    is what writing the summary cost; ``note`` says what went wrong, if anything."""

    strategy: str
    reason: str
    window: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_sent: int
    dropped: int
    shortened: int
    summarized: int = 0
    usage: Usage = dataclasses.field(default_factory=Usage)
    note: str = ""
    path: tuple[str, ...] = ()
    kind: Literal["context_fitted"] = "context_fitted"


# What a hook answered (tether.run.hooks): the ways it may narrow a run, a note, or a failure.
HookVerdict: TypeAlias = Literal["refuse", "ask", "amend", "rewrite", "flag", "failed"]


@dataclass(frozen=True, slots=True)
class HookDecided:
    """A hook answered something other than "no change" at ``point`` (``before_tool_call``,
    ``after_tool_result``...): ``verdict`` says what, ``reason`` why, in the hook's words
    (``failed``: the error that ends the run). ``call_id`` is the call's, at the tool
    points."""

    hook: str
    point: str
    verdict: HookVerdict
    reason: str = ""
    call_id: str | None = None
    path: tuple[str, ...] = ()
    kind: Literal["hook_decided"] = "hook_decided"


@dataclass(frozen=True, slots=True)
class RunPaused:
    """The run stopped to wait for decisions on these calls (a deferring approver)."""

    pending_call_ids: tuple[str, ...]
    path: tuple[str, ...] = ()
    kind: Literal["run_paused"] = "run_paused"


@dataclass(frozen=True, slots=True)
class RunFinished:
    result: RunResult
    path: tuple[str, ...] = ()
    kind: Literal["run_finished"] = "run_finished"


Event: TypeAlias = (
    RunStarted | TurnStarted | TextDelta | ReasoningDelta | ModelResponded | ProviderRetry
    | ToolCallRequested | TrifectaBlocked | ProvenanceChecked | TrifectaWaived
    | ApprovalRequested
    | ApprovalDecided | ToolStarted | ToolProgress | ToolFinished | TaintChanged | ToolsRevealed
    | SubagentStarted | SubagentFinished | UsageUpdated | Notice | ContextFitted | HookDecided
    | RunPaused | RunFinished
)


# A run's result holds the run's events, and the last of them (RunFinished) holds the
# result: one module, so neither names the other from a floor away. People (and the
# package) import both from ``tether.result``.
@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """What became of one tool call: ``status`` is ok, error, denied, blocked, unknown_tool
    or invalid_args."""

    call_id: str
    name: str
    input: Any
    status: ToolStatus
    output: str

    @property
    def error(self) -> bool:
        return self.status != "ok"

    @property
    def denied(self) -> bool:
        return self.status == "denied"

    @property
    def blocked(self) -> bool:
        return self.status == "blocked"


@dataclass(slots=True)
class RunResult:
    """The outcome of one run.

    - ``text``: the final answer; ``stop_cause``: why the run ended.
    - ``usage``: tokens over every model turn, sub-agents' included; ``turns``: model turns.
    - ``tool_calls``: what became of each call (ran, failed, denied, blocked...).
    - ``blocked_sends``: sends the trifecta interlock refused; ``taint``: what the
      conversation has seen, at the end; ``malformed_tool_args``: calls whose arguments did
      not parse or fit the schema.
    - ``conversation`` (pass it to the next run to continue), ``new_messages`` (this run's),
      ``events`` (every event of the run up to, not including, its own
      ``RunFinished``, which holds this result), ``error`` (when the provider failed),
      ``pending`` (calls awaiting a decision when paused), ``output`` (a structured-output
      run's value), ``cost_usd`` (when prices are known).
    """

    text: str
    stop_cause: StopCause
    usage: Usage
    turns: int
    tool_calls: list[ToolCallRecord]
    blocked_sends: int
    taint: Taint
    malformed_tool_args: int
    conversation: Conversation
    new_messages: list[Message]
    events: list[Event] = field(default_factory=list)
    error: TetherError | None = None
    pending: list[PendingCall] = field(default_factory=list)
    output: Any = None
    cost_usd: float | None = None

    @property
    def messages(self) -> list[Message]:
        return self.conversation.messages

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``tether run --json``); events and the full transcript are left out."""
        return {
            "text": self.text,
            "stop_cause": str(self.stop_cause),
            "usage": usage_to_dict(self.usage),
            "turns": self.turns,
            "tool_calls": [
                {"call_id": r.call_id, "name": r.name, "input": r.input, "status": r.status,
                 "output": r.output, "error": r.error, "denied": r.denied,
                 "blocked": r.blocked}
                for r in self.tool_calls
            ],
            "blocked_sends": self.blocked_sends,
            "taint": self.taint.to_dict(),
            "malformed_tool_args": self.malformed_tool_args,
            "cost_usd": self.cost_usd,
            "error": str(self.error) if self.error else None,
            "pending": [
                {"call_id": p.call_id, "tool": p.tool, "arguments": p.arguments,
                 "reason": p.reason, "explanation": p.explanation, "position": p.position}
                for p in self.pending
            ],
            **({"output": _jsonable_output(self.output)} if self.output is not None else {}),
        }


def _jsonable_output(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if dump is not None else value


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready rendering of an event (for the session store and ``--json`` logs)."""
    out: dict[str, Any] = _jsonable(event)
    return out


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
