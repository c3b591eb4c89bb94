"""The OpenAI Responses API (``POST /responses``), streamed and not.

Wire mapping, in short: the system prompt becomes ``instructions``; the conversation becomes
``input`` items (user messages, assistant ``message`` items, ``function_call`` and
``function_call_output`` items, and this provider's own ``reasoning`` items); the answer's
``output`` items become a tether ``Message``. A tool call's id is the wire's ``call_id``
(what ``function_call_output`` refers to); the item id (``fc_...``) rides in
``provider_data``.

Reasoning is replayed only to this provider, and only when the server can use it: with its
``encrypted_content`` (a stateless request, ``store=False``) or when responses are stored.
A replayed reasoning item must travel with the items that followed it, ids included (the
API rejects a reasoning item "without its required following item" and a function call
"without its required reasoning item"), so ids are sent exactly when the reasoning is.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tether.errors import (
    BadRequestError,
    ContextOverflowError,
    MalformedResponseError,
    OverloadedError,
    ProviderError,
    RateLimitError,
    ServerError,
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
from tether.providers.failures import classify_status, stated_number
from tether.providers.http.bodies import decode_json, load_json
from tether.providers.http.errors import count, cut_short, wrong_type
from tether.providers.http.retry import RetryPolicy, Sleep
from tether.providers.http.transport import Timeouts
from tether.providers.images import images_label
from tether.providers.shell import HTTPModel, WireCodec
from tether.tools.spec import ToolSpec

NAME = "openai-responses"

# Model families that reason and accept ``include: ["reasoning.encrypted_content"]``; other
# models (gpt-4o, gpt-4.1) reject it with a 400, so it is only asked for these by default.
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5", "codex")


@dataclass(frozen=True, slots=True)
class _ResponsesCodec(WireCodec):
    """The Responses API: ``POST /responses``, the key as a bearer token."""

    name: ClassVar[str] = NAME
    store: bool
    encrypted_reasoning: bool | None
    reasoning: Mapping[str, Any] | None

    def headers(self) -> dict[str, str]:
        return {"accept": "application/json, text/event-stream"}

    def auth(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def endpoint(self, model: str, stream: bool) -> tuple[str, Mapping[str, str] | None]:
        return "/responses", None

    def request_body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        return build_body(request, model=model, store=self.store,
                          include_encrypted=self.include_encrypted(model),
                          reasoning=self.reasoning)

    def include_encrypted(self, model: str) -> bool:
        if self.encrypted_reasoning is not None:
            return self.encrypted_reasoning
        name = model.rsplit("/", 1)[-1].lower()
        return name.startswith(_REASONING_PREFIXES)

    def completion(self, data: Any, request: ModelRequest, model: str) -> ModelResponse:
        return parse_response(data, model)

    def decoder(self, request: ModelRequest, model: str) -> _ResponsesDecoder:
        return _ResponsesDecoder(model)

    def classify(self, status: int, headers: Mapping[str, str], body: str) -> ProviderError:
        return _classify(status, headers, body)


class OpenAIResponses(HTTPModel[_ResponsesCodec]):
    """A model behind the OpenAI Responses API (OpenAI, or a server that speaks it).

    ::

        model = OpenAIResponses(model="gpt-5-mini")  # key from $OPENAI_API_KEY
        local = OpenAIResponses("http://127.0.0.1:8000/v1", model="gpt-oss-20b",
                                api_key_env=None)

    ``store=False`` (the default) keeps the exchange off the provider's servers; reasoning is
    then carried forward as encrypted content. ``encrypted_reasoning`` asks for that content
    (``None``: only for reasoning model families, o1/o3/o4/gpt-5/codex). ``reasoning`` is
    sent as the request's ``reasoning`` object, e.g. ``{"effort": "low", "summary": "auto"}``
    (summaries are what streams as reasoning text).

    A retryable error before any content is retried, as an HTTP status or inside the 200
    (an ``error`` event before the first delta): see ``HTTPModel.stream``.
    """

    name = NAME

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        model: str = "",
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        *,
        retry: RetryPolicy = RetryPolicy(),
        timeouts: Timeouts = Timeouts(),
        headers: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
        store: bool = False,
        encrypted_reasoning: bool | None = None,
        reasoning: Mapping[str, Any] | None = None,
    ) -> None:
        codec = _ResponsesCodec(store, encrypted_reasoning, dict(reasoning) if reasoning else None)
        super().__init__(codec, base_url, model, api_key, api_key_env, retry=retry,
                         timeouts=timeouts, headers=headers, sleep=sleep)

    @property
    def store(self) -> bool:
        """Whether the provider keeps the exchange (``store`` on the wire)."""
        return self._codec.store

    @property
    def encrypted_reasoning(self) -> bool | None:
        """Whether encrypted reasoning is asked for (None: for reasoning model families)."""
        return self._codec.encrypted_reasoning

    @property
    def reasoning(self) -> dict[str, Any] | None:
        """The request's ``reasoning`` object, as given."""
        reasoning = self._codec.reasoning
        return None if reasoning is None else dict(reasoning)


# --- request ---------------------------------------------------------------------------------


def build_body(
    request: ModelRequest,
    *,
    model: str,
    store: bool = False,
    include_encrypted: bool = False,
    reasoning: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /responses`` for ``request``."""
    body: dict[str, Any] = {"model": model}
    if request.system is not None:
        body["instructions"] = request.system
    body["input"] = input_items(request.messages, store=store)
    if request.tools:
        body["tools"] = [tool_param(t) for t in request.tools]
        body["tool_choice"] = tool_choice_param(request.tool_choice)
    if request.max_output_tokens is not None:
        body["max_output_tokens"] = request.max_output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if reasoning:
        body["reasoning"] = dict(reasoning)
    if include_encrypted:
        body["include"] = ["reasoning.encrypted_content"]
    body["store"] = store
    body["stream"] = request.stream
    return body


def tool_param(spec: ToolSpec) -> dict[str, Any]:
    # strict=False: the Responses API treats function tools as strict by default, and strict
    # mode rejects ordinary schemas (optional properties, no additionalProperties=false).
    return {"type": "function", "name": spec.name, "description": spec.description,
            "parameters": spec.schema_json, "strict": False}


def tool_choice_param(choice: ToolChoice) -> str | dict[str, str]:
    if isinstance(choice, NamedToolChoice):
        return {"type": "function", "name": choice.name}
    return choice


def input_items(messages: Sequence[Message], *, store: bool = False) -> list[dict[str, Any]]:
    """Conversation messages as Responses ``input`` items, in order."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            items.extend(_assistant_items(message.parts, store))
            continue
        content: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, Text):
                content.append({"type": "input_text", "text": part.text})
            elif isinstance(part, Image):
                content.append({"type": "input_image", "image_url": _image_url(part)})
            elif isinstance(part, ToolResult):
                if content:  # keep the order of what the user said around the results
                    items.append(_role_item(message.role, content))
                    content = []
                output: Any = part.content
                if part.images:  # an output may be a list of input items: text, images
                    output = [{"type": "input_text", "text": part.content},
                              {"type": "input_text", "text": images_label(part)},
                              *({"type": "input_image", "image_url": _image_url(image)}
                                for image in part.images)]
                items.append({"type": "function_call_output", "call_id": part.call_id,
                              "output": output})
            # Reasoning and ToolCall parts outside an assistant message have no wire form.
        if content:
            items.append(_role_item(message.role, content))
    return items


def _role_item(role: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    # A "tool" message that carried text is the user speaking alongside the results.
    return {"role": "user" if role == "tool" else role, "content": content}


def _image_url(image: Image) -> str:
    if image.url:
        return image.url
    if image.data is None:
        raise BadRequestError(f"{NAME}: an image has neither data nor url", provider=NAME)
    return f"data:{image.media_type};base64,{image.base64()}"


def _assistant_items(parts: Sequence[Part], store: bool) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    linked = False  # a reasoning item of this message was replayed: its followers carry ids
    message_ids: list[str] = []
    for index, part in enumerate(parts):
        if isinstance(part, Reasoning):
            reasoning = _reasoning_item(part, store, parts[index + 1:])
            if reasoning is not None:
                items.append(reasoning)
                linked = True
                message_ids = list((part.provider_data or {}).get("message_ids") or ())
        elif isinstance(part, Text):
            if not part.text:
                continue
            text_item: dict[str, Any] = {"role": "assistant", "content": [
                {"type": "output_text", "text": part.text}]}
            if linked and message_ids:
                text_item = {"type": "message", "role": "assistant", "id": message_ids.pop(0),
                             "status": "completed", "content": [
                                 {"type": "output_text", "text": part.text, "annotations": []}]}
            items.append(text_item)
        elif isinstance(part, ToolCall):
            call: dict[str, Any] = {"type": "function_call", "call_id": part.id,
                                    "name": part.name, "arguments": part.arguments}
            item_id = (part.provider_data or {}).get("id")
            if linked and item_id:
                call["id"] = item_id
            items.append(call)
    return items


def _reasoning_item(
    part: Reasoning, store: bool, following: Sequence[Part]
) -> dict[str, Any] | None:
    """The wire item replaying ``part``, or None when the server could not use it."""
    if part.provider != NAME or not part.provider_data:
        return None
    data = part.provider_data
    encrypted = data.get("encrypted_content")
    if not data.get("id") or not (encrypted or store):
        return None  # stateless and nothing to carry: the server could not resolve the id
    if not any(isinstance(p, ToolCall) or (isinstance(p, Text) and p.text) for p in following):
        return None  # the API refuses a reasoning item without the item that followed it
    item: dict[str, Any] = {"type": "reasoning", "id": data["id"],
                            "summary": list(data.get("summary") or [])}
    if encrypted:
        item["encrypted_content"] = encrypted
    return item


# --- response --------------------------------------------------------------------------------


def parse_response(data: Any, model: str = "") -> ModelResponse:
    """A non-streamed Responses object (or the final one of a stream) as a ``ModelResponse``."""
    if not isinstance(data, dict):
        raise MalformedResponseError(f"{NAME}: expected a response object, got {data!r:.200}",
                                     provider=NAME)
    if data.get("status") == "failed" or ("output" not in data and data.get("error")):
        raise error_from_payload(data.get("error"), "the response failed")
    output = data.get("output")
    if not isinstance(output, list):
        raise MalformedResponseError(
            f"{NAME}: the response has no output list: {json.dumps(data)[:200]}", provider=NAME)
    message, refused = _message(output)
    stop, raw = _stop_reason(data, bool(message.tool_calls), refused)
    return ModelResponse(message, stop, _usage(data.get("usage")),
                         model=str(data.get("model") or model), id=data.get("id"),
                         raw_stop_reason=raw)


def _message(output: Sequence[Any]) -> tuple[Message, bool]:
    parts: list[Part] = []
    refused = False
    last_reasoning: dict[str, Any] | None = None
    for item in output:
        if not isinstance(item, dict):
            raise wrong_type(NAME, "an output item", item)
        kind = item.get("type")
        if kind == "message":
            texts: list[str] = []
            for content in _array(item.get("content"), "a message's content"):
                if not isinstance(content, dict):
                    raise wrong_type(NAME, "a message's content part", content)
                if content.get("type") == "output_text":
                    texts.append(content.get("text") or "")
                elif content.get("type") == "refusal":
                    refused = True
                    texts.append(content.get("refusal") or "")
            text = "".join(texts)
            if text:
                parts.append(Text(text))
                if last_reasoning is not None and item.get("id"):
                    last_reasoning.setdefault("message_ids", []).append(item["id"])
        elif kind == "function_call":
            call_id = item.get("call_id") or item.get("id") or f"call_{len(parts)}"
            provider_data = {"id": item["id"]} if item.get("id") else None
            name = item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str | None):
                raise wrong_type(NAME, "a function call's call_id or name", [call_id, name])
            parts.append(ToolCall(call_id, name or "", item.get("arguments") or "",
                                  provider_data))
        elif kind == "reasoning":
            last_reasoning = {"id": item.get("id"), "summary": item.get("summary") or [],
                              "encrypted_content": item.get("encrypted_content")}
            parts.append(Reasoning(_reasoning_text(item), NAME, provider_data=last_reasoning))
        # Built-in tool items (web search, file search...) are never requested by tether.
    return Message("assistant", tuple(parts)), refused


def _reasoning_text(item: Mapping[str, Any]) -> str:
    summary = [s.get("text") or "" for s in _array(item.get("summary"), "a reasoning summary")
               if isinstance(s, dict)]
    if summary:
        return "\n\n".join(summary)
    # Open-weight servers (gpt-oss on vLLM, Ollama) send the raw reasoning as content.
    return "".join(c.get("text") or "" for c in _array(item.get("content"), "reasoning content")
                   if isinstance(c, dict))


def _array(value: Any, what: str) -> Sequence[Any]:
    """A JSON array field (empty when absent or null); any other type is malformed."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise wrong_type(NAME, what, value)
    return value


def _stop_reason(data: Mapping[str, Any], has_calls: bool,
                 refused: bool) -> tuple[StopReason, str | None]:
    status = data.get("status")
    details = data.get("incomplete_details")
    if details is not None and not isinstance(details, dict):
        raise wrong_type(NAME, "incomplete_details", details)
    if status == "incomplete":
        reason = (details or {}).get("reason")
        if reason == "max_output_tokens":
            return "max_tokens", reason
        if reason == "content_filter":
            return "content_filter", reason
        return "other", reason or status
    if refused:
        return "content_filter", "refusal"
    if has_calls:
        return "tool_calls", status
    if status in ("completed", None):
        return "end_turn", status
    return "other", status


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage.unreported()  # tokens unknown, not 0
    if not isinstance(usage, dict):
        raise wrong_type(NAME, "usage", usage)
    cached = count((usage.get("input_tokens_details") or {}).get("cached_tokens"), NAME,
                   "cached_tokens")
    reasoning = count((usage.get("output_tokens_details") or {}).get("reasoning_tokens"), NAME,
                      "reasoning_tokens")
    return Usage(count(usage.get("input_tokens"), NAME, "input_tokens"),
                 count(usage.get("output_tokens"), NAME, "output_tokens"),
                 cache_read_tokens=cached, requests=1,
                 details={"reasoning_tokens": reasoning} if reasoning else {})


# --- streaming -------------------------------------------------------------------------------


class _ResponsesDecoder:
    """A streamed Responses answer: one method per event type; ``finish`` prefers the
    final response object and rebuilds the output from the items when it has none.
    ``response.created``, ``in_progress``, ``content_part.*`` and the ``*.done`` text
    events say nothing new; ``[DONE]`` (some servers send it) is skipped."""

    __slots__ = ("call_index", "final", "items", "model")

    done = False  # the stream is read to its end: response.completed comes last

    def __init__(self, model: str) -> None:
        self.model = model
        self.items: dict[int, dict[str, Any]] = {}  # by output_index
        self.call_index: dict[str, int] = {}  # item id -> ToolCallChunk index
        self.final: dict[str, Any] | None = None

    def feed(self, event: str, data: str) -> Sequence[StreamChunk]:
        if data == "[DONE]":
            return ()
        payload = load_json(data, NAME, "stream event")
        if not isinstance(payload, dict):
            raise MalformedResponseError(
                f"{NAME}: a stream event is not an object: {payload!r:.200}", provider=NAME)
        kind = payload.get("type") or event
        if not isinstance(kind, str):
            raise wrong_type(NAME, "a stream event's type", kind)
        handler = _EVENTS.get(kind)
        return () if handler is None else handler(self, payload)

    def output_text_delta(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        delta = data.get("delta") or ""
        self._item(data, "message")["_text"] += delta
        return (TextChunk(delta),) if delta else ()

    def reasoning_delta(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        delta = data.get("delta") or ""
        return (ReasoningChunk(delta),) if delta else ()

    def arguments_delta(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        return self._arguments(data, data.get("delta") or "")

    def arguments_done(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        so_far = self._item(data, "function_call")["arguments"]
        full = data.get("arguments")
        # Only what the deltas did not already carry (some servers send no deltas).
        if isinstance(full, str) and full.startswith(so_far):
            return self._arguments(data, full[len(so_far):])
        return ()

    def item_added(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        item = data.get("item")
        if not isinstance(item, dict):
            raise wrong_type(NAME, "the item of response.output_item.added", item)
        index = int(data.get("output_index", len(self.items)))
        item = {**item, "_text": ""}
        if item.get("type") == "function_call":
            item["arguments"] = ""
            call = len(self.call_index)
            self.call_index[str(item.get("id") or index)] = call
            self.items[index] = item
            call_id = item.get("call_id") or item.get("id") or f"call_{call}"
            first = (ToolCallChunk(call, str(call_id), item.get("name"), ""),)
            initial = data["item"].get("arguments") or ""
            return (*first, *self._arguments(data, initial)) if initial else first
        self.items[index] = item
        return ()

    def item_done(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        item = data.get("item")
        if not isinstance(item, dict):
            raise wrong_type(NAME, "the item of response.output_item.done", item)
        self.items[int(data.get("output_index", len(self.items)))] = item
        return ()

    def completed(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        """``response.completed`` and ``response.incomplete``: the final response object."""
        final = data.get("response")
        if final is not None and not isinstance(final, dict):
            raise wrong_type(NAME, f"the response of {data.get('type')}", final)
        self.final = final or {}
        return ()

    def failed(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        response = data.get("response") or {}
        raise error_from_payload(response.get("error"), "the response failed mid-stream")

    def error(self, data: dict[str, Any]) -> Sequence[StreamChunk]:
        raise error_from_payload(data.get("error") or data, "the stream reported an error")

    def _item(self, data: Mapping[str, Any], kind: str) -> dict[str, Any]:
        index = data.get("output_index")
        if index is None:
            index = next((i for i, it in self.items.items() if it.get("id") == data.get("item_id")),
                         len(self.items))
        item = self.items.get(int(index))
        if item is None:
            item = {"type": kind, "id": data.get("item_id"), "arguments": "", "_text": ""}
            if kind == "function_call":
                self.call_index[str(data.get("item_id") or index)] = len(self.call_index)
            self.items[int(index)] = item
        item.setdefault("arguments", "")
        item.setdefault("_text", "")
        return item

    def _arguments(self, data: Mapping[str, Any], delta: str) -> Sequence[StreamChunk]:
        item = self._item(data, "function_call")
        item["arguments"] += delta
        key = str(item.get("id") or data.get("output_index"))
        call = self.call_index.get(key, 0)
        return (ToolCallChunk(call, None, None, delta),) if delta else ()

    def finish(self) -> ModelResponse:
        if self.final is None:
            raise cut_short(NAME, "the stream ended before response.completed")
        final = dict(self.final)
        if not final.get("output"):
            # Some servers send the final response without its output; rebuild it from the
            # items the stream delivered.
            final["output"] = [_settled(self.items[i]) for i in sorted(self.items)]
        final.setdefault("status", "completed")
        return parse_response(final, self.model)


def _settled(item: dict[str, Any]) -> dict[str, Any]:
    if "_text" not in item:
        return item  # a finished item from response.output_item.done
    if item.get("type") == "message":
        return {"type": "message", "id": item.get("id"),
                "content": [{"type": "output_text", "text": item["_text"]}]}
    return {k: v for k, v in item.items() if k != "_text"}


_EVENTS: dict[str, Callable[[_ResponsesDecoder, dict[str, Any]], Sequence[StreamChunk]]] = {
    "response.output_text.delta": _ResponsesDecoder.output_text_delta,
    "response.reasoning_summary_text.delta": _ResponsesDecoder.reasoning_delta,
    "response.reasoning_text.delta": _ResponsesDecoder.reasoning_delta,
    "response.function_call_arguments.delta": _ResponsesDecoder.arguments_delta,
    "response.function_call_arguments.done": _ResponsesDecoder.arguments_done,
    "response.output_item.added": _ResponsesDecoder.item_added,
    "response.output_item.done": _ResponsesDecoder.item_done,
    "response.completed": _ResponsesDecoder.completed,
    "response.incomplete": _ResponsesDecoder.completed,
    "response.failed": _ResponsesDecoder.failed,
    "error": _ResponsesDecoder.error,
}


# --- errors ----------------------------------------------------------------------------------

_CODE_ERRORS: dict[str, type[ProviderError]] = {
    "context_length_exceeded": ContextOverflowError,
    "rate_limit_exceeded": RateLimitError,
    "insufficient_quota": RateLimitError,
    "server_error": ServerError,
    "internal_error": ServerError,
    "server_is_overloaded": OverloadedError,
    "overloaded": OverloadedError,
    "service_unavailable": OverloadedError,
    "invalid_request_error": BadRequestError,
    "invalid_prompt": BadRequestError,
}


# What an overflow error says of the window and the prompt, in OpenAI's words ("maximum
# context length is 4096 tokens. However, your messages resulted in 5000 tokens", or "you
# requested 5000 tokens (4000 in the messages, 1000 in the completion)").
_OVERFLOW_WINDOW = (re.compile(r"maximum context length is (\d+)"),)
_OVERFLOW_PROMPT = (re.compile(r"resulted in (\d+) tokens"),
                    re.compile(r"\((\d+) in the messages"))


def _overflow(message: str, body: str, **kw: Any) -> ContextOverflowError:
    """The overflow error, with the numbers its words state."""
    text = f"{message} {body}"
    return ContextOverflowError(message, prompt_tokens=stated_number(_OVERFLOW_PROMPT, text),
                                window=stated_number(_OVERFLOW_WINDOW, text), body=body, **kw)


def error_from_payload(error: Any, what: str) -> ProviderError:
    """The typed error for an ``error`` object of a failed response or an ``error`` event."""
    if not isinstance(error, dict):
        return ServerError(f"{NAME}: {what} (no error details)", provider=NAME)
    code = str(error.get("code") or "")
    kind = str(error.get("type") or "")
    message = str(error.get("message") or "no message")
    text = f"{NAME}: {what}: {message}" + (f" ({code})" if code else "")
    body = json.dumps(error)
    if code == "context_length_exceeded" or "context window" in message.lower() \
            or "context length" in message.lower():
        return _overflow(text, body, provider=NAME)
    cls = _CODE_ERRORS.get(code) or _CODE_ERRORS.get(kind)
    if cls is None and code.startswith("invalid_"):
        cls = BadRequestError
    result = (cls or ServerError)(text, provider=NAME, body=body)
    if code == "insufficient_quota":
        result.retryable = False  # waiting does not refill a quota
    return result


def _classify(status: int, headers: Mapping[str, str], body: str) -> ProviderError:
    error = classify_status(status, headers, body, provider=NAME)
    code = _error_code(body)
    if code == "context_length_exceeded" or isinstance(error, ContextOverflowError):
        return _overflow(error.message, body, provider=NAME, status=status)
    if code == "insufficient_quota":
        error.retryable = False  # a 429 that waiting does not cure
        error.message = f"{error.message} (the quota is spent: check the plan and billing)"
        error.args = (error.message,)
    return error


def _error_code(body: str) -> str | None:
    try:
        data = decode_json(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None
