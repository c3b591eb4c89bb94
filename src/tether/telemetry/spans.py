"""A run's events as OpenTelemetry spans and metrics.

One ``RunTelemetry`` reads one run's events as the loop yields them (a sub-agent's run has
its own, in the delegating call's task, so its spans nest under that call's):

- ``invoke_agent {agent}``: RunStarted to RunFinished, a child of the span current where
  the run starts (the host's, or the delegating call's);
- ``chat {model}``: TurnStarted to ModelResponded (or the error that ended the turn); the
  model call is read in a task that runs in it (``model_context``), so the provider's
  HTTP request (the host's httpx instrumentation) nests under it;
- ``execute_tool {tool}``: ToolCallRequested to ToolFinished, with the gate's verdict on
  it; the tool's task runs in it (``tool_context``), so what the tool does (a
  sub-agent's whole run) nests under it.

No span is made current in the reader's own context: a reader may stop reading at any
event, or drop the stream unclosed, and nothing of the run's must stay attached there.
Only the run's own events are read (their ``path``); a sub-agent's are its own recorder's.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from tether import events as ev
from tether.messages import Message, ToolCall
from tether.run.host import RunHost
from tether.run.interrupts import abandon
from tether.telemetry.genai import (
    DURATION_BUCKETS,
    FINISH_REASONS,
    RUN_FINISH_REASONS,
    TOKEN_BUCKETS,
    messages_json,
    provider_name,
    server_of,
    system_json,
    usage_attributes,
)
from tether.trust import Capabilities, Taint

if TYPE_CHECKING:
    from tether.conversation import Conversation

# What the gate did with a call, by the status its ToolFinished carries.
_VERDICTS = {"ok": "allowed", "error": "allowed", "blocked": "blocked", "denied": "denied",
             "unknown_tool": "unknown_tool", "invalid_args": "invalid_args"}
# A span's name holds the tool's name as the model wrote it: bounded, so a model cannot
# make it any length (the attribute keeps the whole name).
_MAX_NAME = 128


@dataclass(slots=True)
class _Chat:
    span: Span
    started: float
    response_model: str = ""


@dataclass(slots=True)
class _Call:
    span: Span
    claimed: bool = False  # its task was started in its span (the call runs)
    started: bool = False


class TraceSettings(Protocol):
    """What a run's recorder reads of how it is traced: ``tether.telemetry.Instrumentation``
    is one (it imports this module when a run is observed, so this one names it by this)."""

    @property
    def include_content(self) -> bool: ...
    @property
    def agent_name(self) -> str: ...
    @property
    def tracer_provider(self) -> Any: ...
    @property
    def meter_provider(self) -> Any: ...


class RunTelemetry:
    """Spans and metrics for one run: ``record(events)`` passes the events on unchanged."""

    def __init__(self, settings: TraceSettings, agent: RunHost, conversation: Conversation,
                 path: tuple[str, ...], stream_requests: bool) -> None:
        self.settings = settings
        self.content = settings.include_content
        self.agent = agent
        self.conversation = conversation
        self.path = path
        self.stream_requests = stream_requests
        self.tracer, self.token_usage, self.duration = _instruments(
            settings.tracer_provider, settings.meter_provider)
        model = agent.model
        self.model = model.model
        self.common: dict[str, Any] = {"gen_ai.provider.name": provider_name(model),
                                       "gen_ai.request.model": model.model, **server_of(model)}
        self.run_span: Span | None = None
        self.run_context: otel_context.Context | None = None
        self.chat: _Chat | None = None
        # A call is known by its id here (events carry no position); calls that share an id
        # are told apart by their order (see _gated and _running).
        self.calls: dict[str, list[_Call]] = {}
        self.taint = Taint()

    async def record(self, events: AsyncIterator[ev.Event]) -> AsyncGenerator[ev.Event, None]:
        try:
            try:
                async for event in events:
                    if event.path == self.path:
                        handler = _HANDLERS.get(event.kind)
                        if handler is not None:
                            handler(self, event)
                    yield event
            except BaseException:
                await abandon(events)
                raise
        except BaseException as error:
            # The reader stopped early (GeneratorExit), the run was cancelled, or the loop
            # raised: every span still open ends here, none is left dangling.
            self._close(None if isinstance(error, GeneratorExit) else error)
            raise
        self._close(None)

    def model_context(self) -> contextvars.Context | None:
        """The context the task reading this turn's model call runs in: its chat span."""
        return None if self.chat is None else _within(self.chat.span)

    def tool_context(self, call: ToolCall) -> contextvars.Context | None:
        """The context the task running ``call`` runs in: this call's span current."""
        for entry in self.calls.get(call.id, ()):
            if not entry.claimed:
                entry.claimed = True
                return _within(entry.span)
        return None

    # --- the run ------------------------------------------------------------------------

    def _run_started(self, event: ev.RunStarted) -> None:
        agent, name = self.agent, self.settings.agent_name
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                      **self.common, "tether.tools": list(event.tools),
                      "tether.security.trifecta": agent.settings.security.trifecta,
                      "tether.permission_mode": agent.settings.permission_mode,
                      **_taint("tether.taint.before", event.taint)}
        span = self.tracer.start_span(f"invoke_agent {name}", kind=SpanKind.INTERNAL,
                                      attributes=attributes)
        if self.content:
            if event.prompt:
                span.set_attribute("gen_ai.input.messages",
                                   messages_json([Message.user(event.prompt)]))
            system = agent.settings.system_prompt
            if system:
                span.set_attribute("gen_ai.system_instructions", system_json(system))
        self.run_span = span
        self.run_context = trace.set_span_in_context(span)
        self.taint = event.taint

    def _run_finished(self, event: ev.RunFinished) -> None:
        result = event.result
        self._end_chat(result.error)
        self._end_calls("not_run")
        span = self.run_span
        if span is None:
            return
        attributes: dict[str, Any] = {
            "tether.stop_cause": str(result.stop_cause), "tether.turns": result.turns,
            "tether.tool_calls": len(result.tool_calls),
            "tether.blocked_sends": result.blocked_sends, **usage_attributes(result.usage),
            **_taint("tether.taint.after", result.taint)}
        if result.cost_usd is not None:
            attributes["tether.cost_usd"] = result.cost_usd
        span.set_attributes(attributes)
        if result.error is not None:
            _failed(span, type(result.error).__name__, str(result.error))
        if self.content and result.text:
            span.set_attribute("gen_ai.output.messages",
                               messages_json([Message.assistant(result.text)],
                                             RUN_FINISH_REASONS.get(str(result.stop_cause),
                                                                    str(result.stop_cause))))
        self._end_run()

    def _taint_changed(self, event: ev.TaintChanged) -> None:
        self.taint = event.after
        if self.run_span is not None:
            self.run_span.add_event("tether.taint.changed", {
                **_taint("tether.taint.before", event.before),
                **_taint("tether.taint.after", event.after), "tether.taint.cause": event.cause})

    def _notice(self, event: ev.Notice) -> None:
        if self.run_span is not None:
            self.run_span.add_event("tether.notice", {
                "tether.notice.level": event.level, "tether.notice.source": event.source,
                "tether.notice.message": event.message})

    def _run_paused(self, event: ev.RunPaused) -> None:
        if self.run_span is not None:
            self.run_span.add_event("tether.run.paused", {
                "tether.pending_call_ids": list(event.pending_call_ids)})
        self._end_calls("paused")  # the turn resumes whole: none of its calls ran

    # --- model turns ----------------------------------------------------------------------

    def _turn_started(self, event: ev.TurnStarted) -> None:
        self._end_chat(None)
        agent = self.agent
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", **self.common,
                                      "tether.turn": event.turn}
        if self.stream_requests:
            attributes["gen_ai.request.stream"] = True
        if agent.settings.temperature is not None:
            attributes["gen_ai.request.temperature"] = agent.settings.temperature
        if event.max_output_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = event.max_output_tokens
        span = self.tracer.start_span(f"chat {self.model}", context=self.run_context,
                                      kind=SpanKind.CLIENT, attributes=attributes)
        if self.content:
            span.set_attribute("gen_ai.input.messages",
                               messages_json(self.conversation.messages))
            system = agent.settings.system_prompt
            if system:
                span.set_attribute("gen_ai.system_instructions", system_json(system))
        self.chat = _Chat(span, time.perf_counter())

    def _provider_retry(self, event: ev.ProviderRetry) -> None:
        if self.chat is not None:
            self.chat.span.add_event("tether.provider.retry", {
                "tether.retry.attempt": event.attempt, "tether.retry.wait_secs": event.wait_secs,
                "tether.retry.error": event.error})

    def _model_responded(self, event: ev.ModelResponded) -> None:
        chat = self.chat
        if chat is None:
            return
        span = chat.span
        attributes: dict[str, Any] = {
            **usage_attributes(event.usage),
            "gen_ai.response.finish_reasons": [event.raw_stop_reason or event.stop_reason],
            "tether.stop_reason": event.stop_reason}
        if event.model:
            attributes["gen_ai.response.model"] = chat.response_model = event.model
        if event.response_id:
            attributes["gen_ai.response.id"] = event.response_id
        span.set_attributes(attributes)
        if self.content:
            span.set_attribute("gen_ai.output.messages", messages_json(
                [event.message], FINISH_REASONS.get(event.stop_reason, event.stop_reason)))
        usage = event.usage
        if usage.input_tokens is not None and usage.output_tokens is not None:
            # A provider that reported none: no measurement (unknown is not 0).
            measured = self._metric_attributes(chat)
            self.token_usage.record(usage.input_tokens,
                                    {**measured, "gen_ai.token.type": "input"})
            self.token_usage.record(usage.output_tokens,
                                    {**measured, "gen_ai.token.type": "output"})
        self._end_chat(None)

    def _end_chat(self, error: BaseException | None) -> None:
        chat, self.chat = self.chat, None
        if chat is None:
            return
        measured = self._metric_attributes(chat)
        if error is not None:
            measured["error.type"] = type(error).__name__
            _failed(chat.span, measured["error.type"], str(error))
        self.duration.record(time.perf_counter() - chat.started, measured)
        chat.span.end()

    def _metric_attributes(self, chat: _Chat) -> dict[str, Any]:
        out = {"gen_ai.operation.name": "chat", **self.common}
        if chat.response_model:
            out["gen_ai.response.model"] = chat.response_model
        return out

    # --- tool calls: the gate and the run ---------------------------------------------------

    def _tool_call_requested(self, event: ev.ToolCallRequested) -> None:
        call = event.call
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function",
            **_taint("tether.taint.before", self.taint)}
        tool = self.agent.tools.get(call.name)
        if tool is not None:
            attributes["tether.tool.capabilities"] = _capabilities(tool.capabilities)
            attributes["tether.tool.needs_approval"] = tool.needs_approval
            if tool.spec.description:
                attributes["gen_ai.tool.description"] = tool.spec.description
        span = self.tracer.start_span(f"execute_tool {call.name[:_MAX_NAME]}",
                                      context=self.run_context, kind=SpanKind.INTERNAL,
                                      attributes=attributes)
        if self.content:
            span.set_attribute("gen_ai.tool.call.arguments", call.arguments)
        self.calls.setdefault(call.id, []).append(_Call(span))

    def _trifecta_blocked(self, event: ev.TrifectaBlocked) -> None:
        call = self._gated(event.call_id)
        if call is not None:
            call.span.set_attribute("tether.gate.interlock",
                                    "blocked" if event.policy == "block" else "asked")
            call.span.add_event("tether.trifecta.blocked", {
                "tether.trifecta.policy": event.policy, "tether.trifecta.reason": event.reason,
                **_taint("tether.trifecta.forecast", event.forecast)})

    def _trifecta_waived(self, event: ev.TrifectaWaived) -> None:
        call = self._gated(event.call_id)
        if call is not None:
            call.span.set_attribute("tether.gate.interlock", "waived")
            call.span.add_event("tether.trifecta.waived", {
                "tether.trifecta.reason": event.reason,
                **_taint("tether.trifecta.forecast", event.forecast)})

    def _approval_requested(self, event: ev.ApprovalRequested) -> None:
        call = self._gated(event.call_id)
        if call is not None:
            call.span.set_attributes({"tether.gate.asked": True,
                                      "tether.gate.ask_reason": event.reason})
            call.span.add_event("tether.approval.requested",
                                {"tether.approval.reason": event.reason})

    def _approval_decided(self, event: ev.ApprovalDecided) -> None:
        call = self._gated(event.call_id)
        if call is None:
            return
        call.span.set_attributes({"tether.gate.decided_by": event.by,
                                  "tether.gate.scope": event.verdict})
        decided: dict[str, Any] = {"tether.approval.allowed": event.allowed,
                                   "tether.approval.scope": event.verdict,
                                   "tether.approval.by": event.by}
        if self.content and event.reason:  # a person's words, or the policy's
            decided["tether.approval.reason"] = event.reason
        call.span.add_event("tether.approval.decided", decided)

    def _tool_started(self, event: ev.ToolStarted) -> None:
        call = self._running(event.call_id, started=False)
        if call is not None:
            call.started = True
            call.span.add_event("tether.tool.started")

    def _subagent_started(self, event: ev.SubagentStarted) -> None:
        call = self._running(event.call_id)
        if call is not None:
            call.span.set_attribute("tether.subagent.profile", event.profile)
            call.span.add_event("tether.subagent.started",
                                {"tether.subagent.profile": event.profile})

    def _subagent_finished(self, event: ev.SubagentFinished) -> None:
        call = self._running(event.call_id)
        if call is not None:
            call.span.set_attribute("tether.subagent.trusted", event.trusted)
            call.span.add_event("tether.subagent.finished", {
                "tether.subagent.profile": event.profile,
                "tether.subagent.stop_cause": str(event.stop_cause),
                "tether.subagent.trusted": event.trusted,
                "tether.subagent.reason": event.reason})

    def _tool_finished(self, event: ev.ToolFinished) -> None:
        call = self._running(event.call_id)
        if call is None:
            call = self._gated(event.call_id)  # answered by the gate: it never ran
        if call is None:
            return
        self.calls[event.call_id].remove(call)
        span = call.span
        attributes: dict[str, Any] = {
            "tether.tool.status": event.status, "tether.gate.verdict": _VERDICTS[event.status],
            "tether.tool.result_trust": event.result.trust,
            **_taint("tether.taint.after", self.taint)}
        if call.started:
            attributes["tether.tool.duration_secs"] = event.duration_secs
        span.set_attributes(attributes)
        if event.status in ("error", "unknown_tool", "invalid_args"):
            _failed(span, "tool_error" if event.status == "error" else event.status, None)
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", event.result.content)
        span.end()

    def _hook_decided(self, event: ev.HookDecided) -> None:
        """A hook's answer: ``tether.hook.<point>`` on the call's span (the tool points) or
        the run's, and a ``tether.hook.decided`` event there. Its reason is the hook's words,
        which may quote what it checked: recorded with the content only."""
        call = None
        if event.call_id is not None:
            call = self._running(event.call_id) or self._gated(event.call_id)
        span = call.span if call is not None else self.run_span
        if span is None:
            return
        span.set_attribute(f"tether.hook.{event.point}", event.verdict)
        decided = {"tether.hook.name": event.hook, "tether.hook.point": event.point,
                   "tether.hook.verdict": event.verdict}
        if self.content and event.reason:
            decided["tether.hook.reason"] = event.reason
        span.add_event("tether.hook.decided", decided)

    def _gated(self, call_id: str) -> _Call | None:
        """The call the gate is deciding: the last one requested with this id (the gate
        decides calls one by one, in the order they were requested)."""
        calls = self.calls.get(call_id)
        return calls[-1] if calls else None

    def _running(self, call_id: str, *, started: bool | None = None) -> _Call | None:
        """A call with this id whose task runs (the first, when several share the id)."""
        for call in self.calls.get(call_id, ()):
            if call.claimed and (started is None or call.started == started):
                return call
        return None

    def _end_calls(self, verdict: str) -> None:
        for calls in self.calls.values():
            for call in calls:
                call.span.set_attribute("tether.gate.verdict", verdict)
                call.span.end()
        self.calls.clear()

    # --- the end ----------------------------------------------------------------------------

    def _end_run(self) -> None:
        span, self.run_span = self.run_span, None
        if span is not None:
            span.end()

    def _close(self, error: BaseException | None) -> None:
        """End what is still open (the run stopped without RunFinished)."""
        if self.run_span is None and self.chat is None and not self.calls:
            return
        self._end_chat(error)
        self._end_calls("not_run")
        if self.run_span is not None:
            if error is not None:
                _failed(self.run_span, type(error).__name__, str(error))
            else:
                self.run_span.set_attribute("tether.stop_cause", "abandoned")
        self._end_run()


_HANDLERS: dict[str, Callable[[RunTelemetry, Any], None]] = {
    "run_started": RunTelemetry._run_started,
    "run_finished": RunTelemetry._run_finished,
    "taint_changed": RunTelemetry._taint_changed,
    "notice": RunTelemetry._notice,
    "run_paused": RunTelemetry._run_paused,
    "turn_started": RunTelemetry._turn_started,
    "provider_retry": RunTelemetry._provider_retry,
    "model_responded": RunTelemetry._model_responded,
    "tool_call_requested": RunTelemetry._tool_call_requested,
    "trifecta_blocked": RunTelemetry._trifecta_blocked,
    "trifecta_waived": RunTelemetry._trifecta_waived,
    "approval_requested": RunTelemetry._approval_requested,
    "approval_decided": RunTelemetry._approval_decided,
    "tool_started": RunTelemetry._tool_started,
    "subagent_started": RunTelemetry._subagent_started,
    "subagent_finished": RunTelemetry._subagent_finished,
    "tool_finished": RunTelemetry._tool_finished,
    "hook_decided": RunTelemetry._hook_decided,
}


@functools.lru_cache(maxsize=16)
def _instruments(tracer_provider: Any, meter_provider: Any) -> tuple[Any, Any, Any]:
    """The tracer and the two histograms, made once per pair of providers (``None``: the
    global ones, which a host may set after this: the API's proxies follow)."""
    version = _version()
    tracer = trace.get_tracer("tether", version, tracer_provider)
    meter = metrics.get_meter("tether", version, meter_provider)
    usage = meter.create_histogram(
        "gen_ai.client.token.usage", unit="{token}",
        description="Number of input and output tokens used.",
        explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
    duration = meter.create_histogram(
        "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration.",
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
    return tracer, usage, duration


def _version() -> str:
    try:
        return version("tether")
    except PackageNotFoundError:
        return ""


def _taint(prefix: str, taint: Taint) -> dict[str, bool]:
    return {f"{prefix}.private": taint.private, f"{prefix}.untrusted": taint.untrusted}


def _capabilities(caps: Capabilities) -> list[str]:
    return [name for name in ("private_data", "untrusted_input", "external_send", "destructive")
            if getattr(caps, name)]


def _failed(span: Span, error_type: str, description: str | None) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))


def _within(span: Span) -> contextvars.Context:
    """A copy of the current context with ``span`` current in it (for a task to run in);
    the reader's own context is left as it is."""
    context = contextvars.copy_context()
    context.run(otel_context.attach, trace.set_span_in_context(span))
    return context
