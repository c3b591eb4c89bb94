"""The Anthropic Messages API (``POST /v1/messages``), streamed and not, over httpx.

::

    model = Anthropic(model="claude-sonnet-4-5")          # key from ANTHROPIC_API_KEY
    result = await Agent(model, tools=[add]).run("What is 2+3?")

Wire notes (why the mapping looks the way it does):

- The system prompt is a top-level ``system`` field; ``system``-role messages are joined
  into it, since the wire has no such role.
- Roles must alternate. tether's ``tool`` messages become ``user`` messages of
  ``tool_result`` blocks, and consecutive messages of one wire role are merged.
- A ``tool_use`` block's ``input`` must be a JSON object. A ``ToolCall`` whose arguments are
  not a JSON object (a stream cut off by max_tokens, a conversation carried over from
  another model) is sent with ``input: {}`` and its raw text kept beside it in a text block,
  so the model can still see what it wrote when it reads the error result.
- Thinking is kept as ``Reasoning(provider="anthropic")`` with its ``signature`` (or the
  ``redacted`` data of a ``redacted_thinking`` block) and replayed verbatim, only to this
  wire. Content blocks this adapter does not know (server tools, ...) are kept the same
  way, in ``Reasoning.provider_data["block"]``, and replayed as they came.
- ``Usage.input_tokens`` is every prompt token, as on the other wires: Anthropic's uncached
  ``input_tokens`` plus cache reads and writes, which are also counted in
  ``cache_read_tokens`` / ``cache_write_tokens``.
- ``max_tokens`` is required on this wire: ``ModelRequest.max_output_tokens`` or
  ``max_tokens_default``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tether.errors import (
    ConfigError,
    ContextOverflowError,
    MalformedResponseError,
    OverloadedError,
    ProviderError,
    RateLimitError,
)
from tether.messages import (
    Image,
    Message,
    Part,
    Reasoning,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    Usage,
)
from tether.providers.base import (
    ModelRequest,
    ModelResponse,
    NamedToolChoice,
    ReasoningChunk,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
)
from tether.providers.failures import classify_status, error_message, stated_number
from tether.providers.http.bodies import decode_json, load_json
from tether.providers.http.errors import count, cut_short, parse_retry_after, wrong_type
from tether.providers.http.retry import RetryPolicy, Sleep
from tether.providers.http.transport import Timeouts
from tether.providers.images import images_label
from tether.providers.shell import HTTPModel, WireCodec
from tether.tools.spec import ToolSpec

NAME = "anthropic"
_RETRY = RetryPolicy()
_TIMEOUTS = Timeouts()

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "content_filter",
}

# The HTTP status each documented error type comes with, for ``error`` events inside a
# stream (their HTTP status was already 200).
_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


@dataclass(frozen=True, slots=True)
class _AnthropicCodec(WireCodec):
    """The Messages API: ``POST /v1/messages``, the key in ``x-api-key``."""

    name: ClassVar[str] = NAME
    max_tokens_default: int
    anthropic_version: str

    def model_name(self, model: str, base_url: str) -> str:
        if not model:
            raise ConfigError("provider anthropic: model is required (e.g. claude-sonnet-4-5)")
        return model

    def headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}

    def auth(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def endpoint(self, model: str, stream: bool) -> tuple[str, Mapping[str, str] | None]:
        return "/v1/messages", None

    def request_body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        return request_body(request, model, self.max_tokens_default)

    def completion(self, data: Any, request: ModelRequest, model: str) -> ModelResponse:
        return parse_message(data)

    def decoder(self, request: ModelRequest, model: str) -> _AnthropicDecoder:
        return _AnthropicDecoder()

    def classify(self, status: int, headers: Mapping[str, str], body: str) -> ProviderError:
        return classify_error(status, headers, body)


class Anthropic(HTTPModel[_AnthropicCodec]):
    """A Claude model behind the Anthropic Messages API.

    ``api_key`` wins over ``api_key_env`` (read when the adapter is built; a variable that
    is not set is a ``ConfigError``). ``headers`` are added to every request (a beta
    header, a gateway's key). ``sleep`` is what waits between retries (tests pass a fake).

    A retryable error before any content is retried, as an HTTP status or inside the 200
    (an ``overloaded_error`` event right after ``message_start``, which yields nothing):
    see ``HTTPModel.stream``.
    """

    name = NAME

    def __init__(
        self,
        base_url: str = "https://api.anthropic.com",
        model: str = "",
        api_key: str | None = None,
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        *,
        retry: RetryPolicy = _RETRY,
        timeouts: Timeouts = _TIMEOUTS,
        headers: Mapping[str, str] | None = None,
        max_tokens_default: int = 4096,
        sleep: Sleep = asyncio.sleep,
        anthropic_version: str = "2023-06-01",
    ) -> None:
        if max_tokens_default < 1:
            raise ConfigError(
                f"provider anthropic: max_tokens_default must be at least 1, "
                f"not {max_tokens_default}"
            )
        super().__init__(_AnthropicCodec(max_tokens_default, anthropic_version), base_url,
                         model, api_key, api_key_env, retry=retry, timeouts=timeouts,
                         headers=headers, sleep=sleep)

    @property
    def max_tokens_default(self) -> int:
        """The ``max_tokens`` sent when a request names none (the wire requires one)."""
        return self._codec.max_tokens_default


# --- errors ---------------------------------------------------------------------------------


# What an overflow error says of the prompt and the window, in Anthropic's words ("prompt
# is too long: 210000 tokens > 200000 maximum").
_OVERFLOW_PROMPT = (re.compile(r"too long: (\d+) tokens"),)
_OVERFLOW_WINDOW = (re.compile(r"tokens > (\d+) maximum"),)


def _numbered(error: ProviderError) -> ProviderError:
    """``error``, an overflow with the numbers its words state."""
    if isinstance(error, ContextOverflowError):
        text = f"{error.message} {error.body or ''}"
        error.prompt_tokens = stated_number(_OVERFLOW_PROMPT, text)
        error.window = stated_number(_OVERFLOW_WINDOW, text)
    return error


def classify_error(status: int, headers: Mapping[str, str], body: str) -> ProviderError:
    """Anthropic's error body (``{"type": "error", "error": {"type": ..., "message": ...}}``)
    refines the shared status mapping: its error type names overload and rate limits even
    when a gateway in between changed the status."""
    kind = _error_type(body)
    if kind == "overloaded_error" and status not in (503, 529):
        return OverloadedError(
            f"{NAME}: HTTP {status}: overloaded ({error_message(body)})",
            retry_after=parse_retry_after(headers), provider=NAME, status=status, body=body)
    if kind == "rate_limit_error" and status != 429:
        return RateLimitError(
            f"{NAME}: HTTP {status}: rate limited ({error_message(body)})",
            retry_after=parse_retry_after(headers), provider=NAME, status=status, body=body)
    return _numbered(classify_status(status, headers, body, provider=NAME))


def _answered_error(payload: dict[str, Any], raw: str, where: str) -> ProviderError:
    """The typed error for an error object that came with HTTP 200 (an ``error`` event in a
    stream, or an error body): its type stands for the status it would have had."""
    error = payload.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    if not isinstance(kind, str):
        kind = None
    found = _numbered(classify_status(_ERROR_STATUS.get(kind or "", 500), {}, raw,
                                      provider=NAME))
    # Say where it came from: the HTTP status the shared mapping names was not on the wire.
    found.message = f"{found.message} ({kind or 'untyped error'} {where})"
    found.args = (found.message,)
    return found


def _error_type(body: str) -> str | None:
    try:
        data = decode_json(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


# --- request --------------------------------------------------------------------------------


def request_body(request: ModelRequest, model: str, max_tokens_default: int) -> dict[str, Any]:
    """The JSON body of ``POST /v1/messages`` for ``request``."""
    system = [request.system] if request.system else []
    system.extend(m.text for m in request.messages if m.role == "system" and m.text)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": (request.max_output_tokens if request.max_output_tokens is not None
                       else max_tokens_default),
        "messages": wire_messages(request.messages),
        "stream": request.stream,
    }
    if system:
        body["system"] = "\n\n".join(system)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    # The wire rejects tool_choice without tools; with no tools "none" is what happens anyway.
    if request.tools:
        body["tools"] = [_wire_tool(t) for t in request.tools]
        body["tool_choice"] = _wire_tool_choice(request.tool_choice)
    return body


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.schema_json}


def _wire_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    if isinstance(choice, NamedToolChoice):
        return {"type": "tool", "name": choice.name}
    return {"type": "any" if choice == "required" else choice}


def _image_block(image: Image) -> dict[str, Any]:
    if image.data is not None:
        source = {"type": "base64", "media_type": image.media_type, "data": image.base64()}
    else:
        source = {"type": "url", "url": image.url or ""}
    return {"type": "image", "source": source}


def wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """tether messages as alternating ``user`` / ``assistant`` wire messages."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue  # joined into the top-level ``system`` field
        role = "assistant" if message.role == "assistant" else "user"
        blocks: list[dict[str, Any]] = []
        for part in message.parts:
            _add_blocks(blocks, part)
        if not blocks:
            continue  # the wire rejects empty content (a turn of another model's reasoning)
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _add_blocks(blocks: list[dict[str, Any]], part: Part) -> None:
    if isinstance(part, Text):
        if part.text:  # the wire rejects empty text blocks
            blocks.append({"type": "text", "text": part.text})
    elif isinstance(part, ToolCall):
        try:
            # decode_json: arguments a model nested past the parser's depth are not an
            # object either (and would not encode again in the body).
            arguments = decode_json(part.arguments) if part.arguments.strip() else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            blocks.append({"type": "text", "text": (
                f"[the arguments of tool call {part.id} ({part.name}) were not a JSON object: "
                f"{part.arguments}]")})
            arguments = {}
        blocks.append({"type": "tool_use", "id": part.id, "name": part.name,
                       "input": arguments})
    elif isinstance(part, ToolResult):
        content: Any = part.content
        if part.images:  # a tool result's content may hold image blocks beside its text
            content = [{"type": "text", "text": part.content},
                       {"type": "text", "text": images_label(part)},
                       *(_image_block(image) for image in part.images)]
        blocks.append({"type": "tool_result", "tool_use_id": part.call_id,
                       "content": content, "is_error": part.is_error})
    elif isinstance(part, Image):
        blocks.append(_image_block(part))
    elif part.provider == NAME:  # Reasoning: only this wire's own, verbatim
        if part.provider_data and "block" in part.provider_data:
            blocks.append(part.provider_data["block"])
        elif part.redacted is not None:
            blocks.append({"type": "redacted_thinking", "data": part.redacted})
        else:
            block = {"type": "thinking", "thinking": part.text}
            if part.signature is not None:
                block["signature"] = part.signature
            blocks.append(block)


# --- response -------------------------------------------------------------------------------


def parse_message(data: Any) -> ModelResponse:
    """A whole (non-streamed) Messages API response."""
    if not isinstance(data, dict):
        raise MalformedResponseError(f"{NAME}: expected a JSON object, got {data!r:.200}",
                                     provider=NAME)
    if data.get("type") == "error":
        raise _answered_error(data, json.dumps(data), "in a 200 response")
    content = data.get("content")
    if not isinstance(content, list):
        raise MalformedResponseError(
            f"{NAME}: the response has no content list: {json.dumps(data)[:200]}", provider=NAME)
    parts: list[Part] = []
    for block in content:
        if not isinstance(block, dict):
            raise MalformedResponseError(f"{NAME}: a content block is not an object: "
                                         f"{block!r:.200}", provider=NAME)
        kind = block.get("type")
        if kind == "text":
            parts.append(Text(block.get("text") or ""))
        elif kind == "tool_use":
            parts.append(ToolCall(_field(block, "id"), _field(block, "name"),
                                  json.dumps(_input(block), ensure_ascii=False)))
        elif kind == "thinking":
            parts.append(Reasoning(block.get("thinking") or "", NAME, block.get("signature")))
        elif kind == "redacted_thinking":
            parts.append(Reasoning("", NAME, redacted=block.get("data") or ""))
        else:
            parts.append(Reasoning("", NAME, provider_data={"block": block}))
    return _response(parts, data.get("stop_reason"), data.get("usage") or {},
                     data.get("model") or "", data.get("id"))


def _input(block: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block's ``input``: a JSON object (the wire allows nothing else)."""
    value = block.get("input")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise wrong_type(NAME, "a tool_use block's input", value)
    return value


def _field(block: dict[str, Any], key: str) -> str:
    value = block.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedResponseError(
            f"{NAME}: a {block.get('type')} block has no {key}: {json.dumps(block)[:200]}",
            provider=NAME)
    return value


def _response(parts: list[Part], stop: Any, usage: dict[str, Any], model: str,
              id: str | None) -> ModelResponse:
    if stop is not None and not isinstance(stop, str):
        raise wrong_type(NAME, "stop_reason", stop)
    has_calls = any(isinstance(p, ToolCall) for p in parts)
    reason = _STOP_REASONS.get(stop or "", "tool_calls" if has_calls else "other")
    return ModelResponse(Message("assistant", tuple(parts)), reason, _usage(usage), model, id,
                         stop if isinstance(stop, str) else None)


def _usage(usage: dict[str, Any]) -> Usage:
    def tokens(key: str) -> int:
        return count(usage.get(key), NAME, key)

    cache_read = tokens("cache_read_input_tokens")
    cache_write = tokens("cache_creation_input_tokens")
    return Usage(
        # One meaning across providers: input_tokens counts the whole prompt, cached or not.
        input_tokens=tokens("input_tokens") + cache_read + cache_write,
        output_tokens=tokens("output_tokens"),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        requests=1,
    )


class _AnthropicDecoder:
    """A streamed Messages answer: one method per event type (``message_start``,
    ``content_block_start``, ``content_block_delta`` and one per kind of delta,
    ``message_delta``, ``message_stop``, ``error``); ``ping``, ``content_block_stop`` and
    unknown events carry nothing to keep.

    Blocks are assembled in plain dicts keyed by the wire's block index; tool calls are
    numbered in the order they start (``ToolCallChunk.index``).
    """

    __slots__ = ("blocks", "calls", "done", "model", "msg_id", "stop", "usage")

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.model = ""
        self.msg_id: str | None = None
        self.stop: Any = None
        self.calls = 0
        self.done = False

    def feed(self, event: str, data: str) -> Sequence[StreamChunk]:
        payload = load_json(data, NAME, "stream event")
        if not isinstance(payload, dict):
            raise wrong_type(NAME, "a stream event", payload)
        kind = payload.get("type")
        if not isinstance(kind, str):
            raise wrong_type(NAME, "a stream event's type", kind)
        handler = _EVENTS.get(kind)
        return () if handler is None else handler(self, payload, data)

    def content_block_delta(self, payload: dict[str, Any], raw: str) -> Sequence[StreamChunk]:
        block = self.blocks.get(payload.get("index", -1))
        if block is None:
            raise MalformedResponseError(
                f"{NAME}: a delta for a block that never started: {raw[:200]}", provider=NAME)
        delta = payload.get("delta") or {}
        handler = _DELTAS.get(delta.get("type"))
        # Other deltas (citations) add nothing the provider-neutral message can hold.
        return () if handler is None else handler(block, delta)

    @staticmethod
    def text_delta(block: dict[str, Any], delta: dict[str, Any]) -> Sequence[StreamChunk]:
        text = delta.get("text") or ""
        block["pieces"].append(text)
        return (TextChunk(text),) if text else ()

    @staticmethod
    def input_json_delta(block: dict[str, Any], delta: dict[str, Any]) -> Sequence[StreamChunk]:
        piece = delta.get("partial_json") or ""
        block["pieces"].append(piece)
        if piece and block["type"] == "tool_use":
            return (ToolCallChunk(block["call"], None, None, piece),)
        return ()

    @staticmethod
    def thinking_delta(block: dict[str, Any], delta: dict[str, Any]) -> Sequence[StreamChunk]:
        text = delta.get("thinking") or ""
        block["pieces"].append(text)
        return (ReasoningChunk(text),) if text else ()

    @staticmethod
    def signature_delta(block: dict[str, Any], delta: dict[str, Any]) -> Sequence[StreamChunk]:
        block["signature"] = (block.get("signature") or "") + (delta.get("signature") or "")
        return ()

    def content_block_start(self, payload: dict[str, Any], raw: str) -> Sequence[StreamChunk]:
        start = payload.get("content_block") or {}
        block: dict[str, Any] = {"type": start.get("type"), "start": start, "pieces": []}
        self.blocks[payload.get("index", len(self.blocks))] = block
        if block["type"] == "tool_use":
            _input(start)  # read at the end, if no deltas came: checked now
            block["call"] = self.calls
            self.calls += 1
            return (ToolCallChunk(block["call"], _field(start, "id"), _field(start, "name"), ""),)
        if block["type"] == "text" and start.get("text"):
            block["pieces"].append(start["text"])
            return (TextChunk(start["text"]),)
        if block["type"] == "thinking":
            block["signature"] = start.get("signature") or None
            if start.get("thinking"):
                block["pieces"].append(start["thinking"])
                return (ReasoningChunk(start["thinking"]),)
        return ()

    def message_start(self, payload: dict[str, Any], raw: str) -> Sequence[StreamChunk]:
        message = payload.get("message") or {}
        self.model, self.msg_id = message.get("model") or "", message.get("id")
        self.usage.update(message.get("usage") or {})
        return ()

    def message_delta(self, payload: dict[str, Any], raw: str) -> Sequence[StreamChunk]:
        self.stop = (payload.get("delta") or {}).get("stop_reason") or self.stop
        # Counts here are cumulative: they replace message_start's.
        self.usage.update({k: v for k, v in (payload.get("usage") or {}).items()
                           if v is not None})
        return ()

    def message_stop(self, payload: dict[str, Any], raw: str) -> Sequence[StreamChunk]:
        self.done = True
        return ()

    def error(self, payload: dict[str, Any], raw: str) -> Sequence[StreamChunk]:
        raise _answered_error(payload, raw, "in the stream")

    def reported(self) -> Usage | None:
        """The usage ``message_start`` (and any ``message_delta``) reported before the
        answer failed (None: none did)."""
        return _usage(self.usage) if self.usage else None

    def finish(self) -> ModelResponse:
        if not self.done:
            raise cut_short(NAME, "the stream ended before message_stop (the answer may be "
                                  "cut short)")
        parts = [_assemble(self.blocks[i]) for i in sorted(self.blocks)]
        return _response(parts, self.stop, self.usage, self.model, self.msg_id)


_Handler = Callable[[_AnthropicDecoder, dict[str, Any], str], Sequence[StreamChunk]]
_EVENTS: dict[str, _Handler] = {
    "content_block_delta": _AnthropicDecoder.content_block_delta,
    "content_block_start": _AnthropicDecoder.content_block_start,
    "message_start": _AnthropicDecoder.message_start,
    "message_delta": _AnthropicDecoder.message_delta,
    "message_stop": _AnthropicDecoder.message_stop,
    "error": _AnthropicDecoder.error,
}
_DELTAS: dict[Any, Callable[[dict[str, Any], dict[str, Any]], Sequence[StreamChunk]]] = {
    "text_delta": _AnthropicDecoder.text_delta,
    "input_json_delta": _AnthropicDecoder.input_json_delta,
    "thinking_delta": _AnthropicDecoder.thinking_delta,
    "signature_delta": _AnthropicDecoder.signature_delta,
}


def _assemble(block: dict[str, Any]) -> Part:
    kind, start, text = block["type"], block["start"], "".join(block["pieces"])
    if kind == "text":
        return Text(text)
    if kind == "tool_use":
        if not block["pieces"] and start.get("input"):
            text = json.dumps(_input(start), ensure_ascii=False)
        return ToolCall(start["id"], start["name"], text or "{}")
    if kind == "thinking":
        return Reasoning(text, NAME, block.get("signature"))
    if kind == "redacted_thinking":
        return Reasoning("", NAME, redacted=start.get("data") or "")
    # A block this adapter does not know: keep it whole for replay to this wire.
    kept = dict(start)
    if block["pieces"]:
        try:
            kept["input"] = decode_json(text)
        except ValueError:
            kept["partial_json"] = text
    return Reasoning("", NAME, provider_data={"block": kept})


__all__ = ["Anthropic", "classify_error", "parse_message", "request_body", "wire_messages"]
