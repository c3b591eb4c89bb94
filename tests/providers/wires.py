"""The provider wires described alike, for the tests that run every adapter through
the same behaviours (tests/test_provider_contract.py, tests/faults/test_provider_*): an
adapter aimed at a server, a whole answer, a streamed answer as a list of events (text, a
tool call, reasoning where the wire has it) and an error body, each well formed, for the
tests to break; and each wire's way of saying the output token limit cut an answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.providers.helpers import FakeSleep
from tether.messages import Message
from tether.providers import (
    Anthropic,
    Gemini,
    Ollama,
    OpenAIChat,
    OpenAIResponses,
    anthropic,
    gemini,
    openai_responses,
)
from tether.providers.base import ModelRequest, Provider
from tether.providers.http.retry import RetryPolicy
from tether.providers.http.transport import Timeouts

# Retries are tested in tests/test_http.py; here a fault is met once, and a retry that does
# happen waits no time.
NO_RETRY = RetryPolicy(max_retries=0)


@dataclass(frozen=True)
class Wire:
    name: str
    # The adapter for a ``base_url`` (the API's, prefix included) and keyword arguments
    # (model "m" and key "k" unless given).
    make: Callable[..., Provider]
    # A whole (non-streamed) answer saying ``text``.
    body: Callable[[str], dict[str, Any]]
    # A streamed answer: text deltas, then (with ``call``) one tool call in argument pieces.
    events: Callable[[Sequence[str], Sequence[str] | None], list[Any]]
    # Events are ``(name, payload)`` pairs written with an ``event:`` line.
    named: bool = False
    # The body of the next request, for a conversation holding ``message``.
    replay: Callable[[ModelRequest], Any] = lambda _request: None
    # Whether an event is the one that ends the stream (what a cut stream lacks).
    terminal: Callable[[Any], bool] = lambda _event: False
    # The stream ends with ``data: [DONE]``.
    done: bool = False
    # Where the API lives under a server's root (``base_url`` is the root plus this), and
    # the path a whole and a streamed request go to.
    prefix: str = ""
    path: str = ""
    stream_path: str = ""
    # The body of an HTTP error of ``status`` saying ``message``, as the wire writes it.
    error: Callable[[int, str], dict[str, Any]] = lambda status, message: {
        "error": {"message": message, "code": status}}
    # A whole answer, or the event that ends a stream, made to say the output token limit
    # cut the answer (each wire's own signal).
    limit: Callable[[Any], Any] = lambda item: item
    # The stream is newline-delimited JSON (one object a line), not server-sent events.
    ndjson: bool = False

    @property
    def stream_type(self) -> str:
        """The content type a streamed answer comes with."""
        return "application/x-ndjson" if self.ndjson else "text/event-stream"

    @property
    def keepalive(self) -> bytes:
        """Six bytes a stream may carry between events that say nothing (an SSE comment
        line, a blank JSON line)."""
        return b"     \n" if self.ndjson else b": pad\n"

    def provider(self, root: str, retry: RetryPolicy = NO_RETRY, **kw: Any) -> Provider:
        """The adapter aimed at the server at ``root`` (the API under its ``prefix``). A
        retry waits no time unless ``sleep`` is given."""
        return self.make(root + self.prefix, retry=retry, sleep=kw.pop("sleep", FakeSleep()),
                         timeouts=kw.pop("timeouts", Timeouts(read=30)), **kw)

    def next_body(self, answer: Message) -> bytes:
        """The next request's body after ``answer``, encoded as it goes on the wire (strict
        UTF-8: nothing is repaired on the way)."""
        request = ModelRequest((Message.user("hi"), answer, Message.user("go on")))
        return json.dumps(self.replay(request), ensure_ascii=False).encode("utf-8")

    def sse(self, deltas: Sequence[str], call: Sequence[str] | None = None) -> list[bytes]:
        """The stream as the wire frames it (SSE, or JSON lines), one bytes object per
        event."""
        return self.frames(self.events(deltas, call), done=self.done)

    def limited_body(self, text: str) -> dict[str, Any]:
        """A whole answer saying ``text``, cut there by the output token limit."""
        body: dict[str, Any] = self.limit(self.body(text))
        return body

    def limited_sse(self, deltas: Sequence[str], call: Sequence[str] | None = None
                    ) -> list[bytes]:
        """The stream, its end saying the output token limit cut the answer (in the
        middle of ``call`` when there is one)."""
        events = self.events(deltas, call)
        end = next(i for i, e in enumerate(events) if self.terminal(e))
        events[end] = self.limit(events[end])
        return self.frames(events, done=self.done)

    def cut(self, deltas: Sequence[str], call: Sequence[str] | None = None) -> list[bytes]:
        """The stream up to (not including) the event that ends it: a stream cut short
        after its content."""
        events = self.events(deltas, call)
        end = next(i for i, e in enumerate(events) if self.terminal(e))
        return self.frames(events[:end], done=False)

    def frames(self, events: Sequence[Any], done: bool = False) -> list[bytes]:
        out = []
        for item in events:
            if self.ndjson:
                out.append(f"{json.dumps(item)}\n".encode())
            elif self.named:
                name, payload = item
                out.append(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
            else:
                out.append(f"data: {json.dumps(item)}\n\n".encode())
        if done:
            out.append(b"data: [DONE]\n\n")
        return out


# --- Chat Completions ---------------------------------------------------------------------------

def _chat_body(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def _chat_events(deltas: Sequence[str], call: Sequence[str] | None) -> list[Any]:
    def ev(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [ev({"role": "assistant", "content": ""})]
    out += [ev({"content": d}) for d in deltas]
    if call is not None:
        out.append(ev({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                       "function": {"name": "add", "arguments": ""}}]}))
        out += [ev({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in call]
    out.append(ev({}, "tool_calls" if call is not None else "stop"))
    out.append({"id": "chatcmpl-1", "choices": [],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    return out


def _chat_limit(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "choices": [{**c, "finish_reason": "length"} for c in item["choices"]]}


# --- Responses ----------------------------------------------------------------------------------

def _responses_body(text: str) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "model": "m",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 3, "output_tokens": 2}}


def _responses_events(deltas: Sequence[str], call: Sequence[str] | None) -> list[Any]:
    def ev(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, **fields}

    out = [ev("response.created", response={"id": "resp_1", "status": "in_progress",
                                            "output": []}),
           ev("response.output_item.added", output_index=0,
              item={"type": "reasoning", "id": "rs_1", "summary": []}),
           ev("response.reasoning_summary_text.delta", output_index=0, item_id="rs_1",
              delta="thinking"),
           ev("response.output_item.added", output_index=1,
              item={"type": "message", "id": "msg_1", "role": "assistant", "content": []})]
    out += [ev("response.output_text.delta", output_index=1, item_id="msg_1", delta=d)
            for d in deltas]
    if call is not None:
        out.append(ev("response.output_item.added", output_index=2,
                      item={"type": "function_call", "id": "fc_1", "call_id": "call_1",
                            "name": "add", "arguments": ""}))
        out += [ev("response.function_call_arguments.delta", output_index=2, item_id="fc_1",
                   delta=a) for a in call]
    out.append(ev("response.completed", response={
        "id": "resp_1", "status": "completed", "model": "m", "output": [],
        "usage": {"input_tokens": 3, "output_tokens": 2}}))
    return out


def _responses_limit(item: Any) -> Any:
    def incomplete(response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"}}

    if isinstance(item, tuple):  # response.completed -> response.incomplete
        return "response.incomplete", {"type": "response.incomplete",
                                       "response": incomplete(item[1]["response"])}
    return incomplete(item)


# --- Anthropic ----------------------------------------------------------------------------------

def _anthropic_body(text: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 2}}


def _anthropic_events(deltas: Sequence[str], call: Sequence[str] | None) -> list[Any]:
    def ev(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, **fields}

    out = [ev("message_start", message={"id": "msg_1", "type": "message", "role": "assistant",
                                        "model": "m", "content": [],
                                        "usage": {"input_tokens": 3, "output_tokens": 1}}),
           ev("content_block_start", index=0,
              content_block={"type": "thinking", "thinking": "", "signature": ""}),
           ev("content_block_delta", index=0, delta={"type": "thinking_delta",
                                                     "thinking": "thinking"}),
           ev("content_block_delta", index=0, delta={"type": "signature_delta",
                                                     "signature": "sig"}),
           ev("content_block_stop", index=0),
           ev("content_block_start", index=1, content_block={"type": "text", "text": ""})]
    out += [ev("content_block_delta", index=1, delta={"type": "text_delta", "text": d})
            for d in deltas]
    out.append(ev("content_block_stop", index=1))
    if call is not None:
        out.append(ev("content_block_start", index=2, content_block={
            "type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}))
        out += [ev("content_block_delta", index=2, delta={"type": "input_json_delta",
                                                          "partial_json": a}) for a in call]
        out.append(ev("content_block_stop", index=2))
    out.append(ev("message_delta", delta={"stop_reason": "tool_use" if call else "end_turn"},
                  usage={"output_tokens": 2}))
    out.append(ev("message_stop"))
    return out


def _anthropic_limit(item: Any) -> Any:
    if isinstance(item, tuple):  # message_delta
        name, payload = item
        return name, {**payload, "delta": {**payload["delta"], "stop_reason": "max_tokens"}}
    return {**item, "stop_reason": "max_tokens"}


# --- Gemini -------------------------------------------------------------------------------------

def _gemini_chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "m", "responseId": "r1",
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}


def _gemini_body(text: str) -> dict[str, Any]:
    return _gemini_chunk([{"text": text}], "STOP")


def _gemini_events(deltas: Sequence[str], call: Sequence[str] | None) -> list[Any]:
    out = [_gemini_chunk([{"text": "thinking", "thought": True}])]
    out += [_gemini_chunk([{"text": d}]) for d in deltas]
    last: list[dict[str, Any]] = []
    if call is not None:
        # Gemini sends a call whole, its arguments an object: the pieces joined.
        joined = "".join(call)
        try:
            args = json.loads(joined)
        except ValueError:
            args = {"text": joined}
        last = [{"functionCall": {"name": "add", "args": args}, "thoughtSignature": "sig"}]
    out.append(_gemini_chunk(last, "STOP"))
    return out


def _gemini_limit(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "candidates": [{**c, "finishReason": "MAX_TOKENS"}
                                   for c in item["candidates"]]}


# --- Ollama -------------------------------------------------------------------------------------

def _ollama_line(message: dict[str, Any] | None = None, done: bool = False) -> dict[str, Any]:
    line: dict[str, Any] = {"model": "m", "created_at": "2026-01-01T00:00:00Z",
                            "message": {"role": "assistant", "content": "", **(message or {})},
                            "done": done}
    if done:
        line.update(done_reason="stop", prompt_eval_count=3, eval_count=2)
    return line


def _ollama_body(text: str) -> dict[str, Any]:
    return _ollama_line({"content": text}, done=True)


def _ollama_events(deltas: Sequence[str], call: Sequence[str] | None) -> list[Any]:
    out = [_ollama_line({"thinking": "thinking"})]
    out += [_ollama_line({"content": d}) for d in deltas]
    if call is not None:
        # Ollama sends a call whole, its arguments an object: the pieces joined.
        joined = "".join(call)
        try:
            args = json.loads(joined)
        except ValueError:
            args = {"text": joined}
        out.append(_ollama_line({"tool_calls": [{"function": {"name": "add",
                                                              "arguments": args}}]}))
    out.append(_ollama_line(done=True))
    return out


def _ollama_limit(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "done_reason": "length"}


_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error",
                     403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
                     500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}
_OPENAI_CODES = {400: "invalid_value", 429: "rate_limit_exceeded", 500: "server_error",
                 503: "server_is_overloaded", 529: "server_is_overloaded"}
_GEMINI_STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                    404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
                    500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 529: "UNAVAILABLE"}

WIRES: dict[str, Wire] = {
    "openai-chat": Wire(
        "openai-chat",
        lambda url, **kw: OpenAIChat(url, **{"model": "m", "api_key": "k", "profile": "openai",
                                             **kw}),
        _chat_body, _chat_events,
        replay=lambda r: OpenAIChat("http://127.0.0.1:1/v1", "m").request_body(r),
        terminal=lambda e: any(c.get("finish_reason") for c in e["choices"]), done=True,
        limit=_chat_limit,
        prefix="/v1", path="/v1/chat/completions", stream_path="/v1/chat/completions"),
    "openai-responses": Wire(
        "openai-responses",
        lambda url, **kw: OpenAIResponses(url, **{"model": "m", "api_key": "k", **kw}),
        _responses_body, _responses_events, named=True,
        replay=lambda r: openai_responses.build_body(r, model="m"),
        terminal=lambda e: e[0] == "response.completed", limit=_responses_limit,
        prefix="/v1", path="/v1/responses", stream_path="/v1/responses",
        error=lambda status, message: {"error": {
            "message": message,
            "type": "invalid_request_error" if status < 500 else "server_error",
            "code": _OPENAI_CODES.get(status)}}),
    "anthropic": Wire(
        "anthropic", lambda url, **kw: Anthropic(url, **{"model": "m", "api_key": "k", **kw}),
        _anthropic_body, _anthropic_events, named=True,
        replay=lambda r: anthropic.request_body(r, "m", 100),
        terminal=lambda e: e[0] == "message_delta", limit=_anthropic_limit,
        path="/v1/messages", stream_path="/v1/messages",
        error=lambda status, message: {"type": "error", "error": {
            "type": _ANTHROPIC_ERRORS.get(status, "api_error"), "message": message}}),
    "gemini": Wire(
        "gemini", lambda url, **kw: Gemini(url, **{"model": "m", "api_key": "k", **kw}),
        _gemini_body, _gemini_events, replay=gemini.request_body,
        terminal=lambda e: "finishReason" in e["candidates"][0], limit=_gemini_limit,
        prefix="/v1beta", path="/v1beta/models/m:generateContent",
        stream_path="/v1beta/models/m:streamGenerateContent?alt=sse",
        error=lambda status, message: {"error": {
            "code": status, "message": message,
            "status": _GEMINI_STATUSES.get(status, "UNKNOWN")}}),
    "ollama": Wire(
        "ollama",
        # A window given: no /api/show is asked before the request (tests/test_ollama.py).
        lambda url, **kw: Ollama(url, **{"model": "m", "api_key": "k", "num_ctx": 4096,
                                         **kw}),
        _ollama_body, _ollama_events, ndjson=True,
        replay=lambda r: Ollama("http://127.0.0.1:1", "m", num_ctx=4096).request_body(r),
        terminal=lambda e: e.get("done") is True, limit=_ollama_limit,
        path="/api/chat", stream_path="/api/chat",
        error=lambda status, message: {"error": message}),
}
