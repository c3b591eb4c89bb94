"""The Gemini API (``generateContent`` / ``streamGenerateContent?alt=sse``) over httpx.

::

    model = Gemini(model="gemini-2.5-flash")              # key from GEMINI_API_KEY
    result = await Agent(model, tools=[add]).run("What is 2+3?")

Wire notes (why the mapping looks the way it does):

- The system prompt goes to ``systemInstruction``; ``system``-role messages are joined into
  it. Roles are ``user`` and ``model``; tether's ``tool`` messages become ``user`` contents of
  ``functionResponse`` parts (``{"output": ...}`` or ``{"error": ...}``, the keys Google
  documents), and consecutive contents of one wire role are merged.
- Gemini's function calls carry no id (newer models may send one). Calls without one get a
  generated id; only an id Gemini sent is ever sent back (some Gemini front ends reject
  unknown ``id`` fields), and a ``functionResponse`` is matched to its call by name and order.
- Thought signatures are opaque and must go back on the part they came with, verbatim:
  on a ``functionCall`` part they live in ``ToolCall.provider_data`` (``{"provider":
  "gemini", "thoughtSignature": ...}``); on a text part they become a
  ``Reasoning(provider="gemini")`` marker just before the ``Text`` they sign; ``thought``
  parts become ``Reasoning(provider="gemini")`` with the summary as text. Parts this adapter
  does not know are kept whole in ``Reasoning.provider_data["part"]``. Other providers
  skip all of these. A call that did not come from Gemini is sent with Google's documented
  ``skip_thought_signature_validator`` sentinel, so Gemini 3 accepts a conversation carried
  over from another model.
- ``Usage.input_tokens`` is the whole prompt, ``promptTokenCount`` (as on every wire; the
  cached part is also in ``cache_read_tokens``); ``output_tokens`` counts the answer and
  the thinking (``thoughtsTokenCount``, also in ``details["reasoning_tokens"]``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tether.errors import (
    AuthError,
    ConfigError,
    ContextOverflowError,
    MalformedResponseError,
    NotFoundError,
    OverloadedError,
    ProviderError,
    ProviderTimeout,
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
from tether.providers.failures import classify_status, stated_number
from tether.providers.http.bodies import decode_json, load_json
from tether.providers.http.errors import count, cut_short, parse_retry_after, wrong_type
from tether.providers.http.retry import RetryPolicy, Sleep
from tether.providers.http.transport import Timeouts
from tether.providers.images import images_label
from tether.providers.shell import HTTPModel, WireCodec
from tether.tools.spec import ToolSpec

NAME = "gemini"
_RETRY = RetryPolicy()
_TIMEOUTS = Timeouts()

# Google's documented value for a function call that has no signature of Gemini's own
# (https://ai.google.dev/gemini-api/docs/thought-signatures).
SKIP_SIGNATURE = "skip_thought_signature_validator"

_STOP_REASONS: dict[str, StopReason] = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "BLOCKLIST": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}

# Schema keys Gemini's ``parametersJsonSchema`` does not take and the model does not need.
_DROPPED_SCHEMA_KEYS = frozenset({"$schema", "$id"})

# The raw stop reason of a prompt Gemini refused to answer (no candidate at all).
_PROMPT_BLOCKED = "promptFeedback.blockReason="

# A Reasoning marker's ``provider_data["on"]``: the signature belongs to the next Text part.
_ON_NEXT_TEXT = "next_text"


@dataclass(frozen=True, slots=True)
class _GeminiCodec(WireCodec):
    """The Gemini API: ``models/{model}:generateContent`` (``:streamGenerateContent?alt=sse``
    streamed), the key in ``x-goog-api-key``."""

    name: ClassVar[str] = NAME

    def model_name(self, model: str, base_url: str) -> str:
        model = model.removeprefix("models/")
        if not model:
            raise ConfigError("provider gemini: model is required (e.g. gemini-2.5-flash)")
        return model

    def auth(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def endpoint(self, model: str, stream: bool) -> tuple[str, Mapping[str, str] | None]:
        if stream:
            return f"/models/{model}:streamGenerateContent", {"alt": "sse"}
        return f"/models/{model}:generateContent", None

    def request_body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        return request_body(request)

    def completion(self, data: Any, request: ModelRequest, model: str) -> ModelResponse:
        return parse_response(data, model)

    def decoder(self, request: ModelRequest, model: str) -> _GeminiDecoder:
        return _GeminiDecoder(model)

    def classify(self, status: int, headers: Mapping[str, str], body: str) -> ProviderError:
        return classify_error(status, headers, body)


class Gemini(HTTPModel[_GeminiCodec]):
    """A Gemini model behind the Gemini API (Google AI Studio's REST endpoint).

    ``api_key`` wins over ``api_key_env`` (read when the adapter is built; a variable that
    is not set is a ``ConfigError``); the key goes in the ``x-goog-api-key`` header.
    ``headers`` are added to every request. ``sleep`` waits between retries (tests pass a
    fake). A model may be named with its ``models/`` prefix.

    A retryable error before any content is retried, as an HTTP status or inside the 200
    (an error object before the first candidate): see ``HTTPModel.stream``.
    """

    name = NAME

    def __init__(
        self,
        base_url: str = "https://generativelanguage.googleapis.com/v1beta",
        model: str = "",
        api_key: str | None = None,
        api_key_env: str | None = "GEMINI_API_KEY",
        *,
        retry: RetryPolicy = _RETRY,
        timeouts: Timeouts = _TIMEOUTS,
        headers: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(_GeminiCodec(), base_url, model, api_key, api_key_env, retry=retry,
                         timeouts=timeouts, headers=headers, sleep=sleep)


# --- errors ---------------------------------------------------------------------------------

_OVERFLOW = re.compile(
    r"input token count|exceeds the maximum number of tokens|token count .* exceeds|"
    r"context (length|window)", re.IGNORECASE)
_KEY_INVALID = re.compile(r"api key not valid|api_key_invalid|api key expired", re.IGNORECASE)
# What an overflow error says of the prompt and the window, in Gemini's words ("The input
# token count (1200000) exceeds the maximum number of tokens allowed (1048576).").
_OVERFLOW_PROMPT = (re.compile(r"input token count \((\d+)\)", re.IGNORECASE),)
_OVERFLOW_WINDOW = (re.compile(r"number of tokens allowed \((\d+)\)", re.IGNORECASE),)


def classify_error(status: int, headers: Mapping[str, str], body: str) -> ProviderError:
    """Gemini's error body (``{"error": {"code", "message", "status", "details"}}``) refines
    the shared status mapping: an invalid key is a 400 there, token overflow is a 400 with
    its own wording, and a 429/503 may name its wait in a ``RetryInfo`` detail."""
    error = _error_object(body)
    code = str(error.get("status") or "")
    message = str(error.get("message") or "")
    base = classify_status(status, headers, body, provider=NAME)
    if not error:
        return base  # not Gemini's error shape (a proxy's page): the shared mapping says it
    text = f"{NAME}: HTTP {status}{' ' + code if code else ''}: {message}"
    kw: dict[str, Any] = {"provider": NAME, "status": status, "body": body}
    retry_after = parse_retry_after(headers)
    if retry_after is None:
        retry_after = _retry_delay(error)
    if status == 429 or code == "RESOURCE_EXHAUSTED":
        return RateLimitError(text, retry_after=retry_after, **kw)
    if status in (503, 529) or code == "UNAVAILABLE":
        return OverloadedError(text, retry_after=retry_after, **kw)
    if status == 504 or code == "DEADLINE_EXCEEDED":
        return ProviderTimeout(f"{text} (the model did not answer in time)", **kw)
    if status == 401 or code == "UNAUTHENTICATED" or _KEY_INVALID.search(body):
        return AuthError(f"{text} (check the API key or api_key_env)", **kw)
    if status == 400 and _OVERFLOW.search(message):
        return ContextOverflowError(f"{text} (the conversation no longer fits the model)",
                                    prompt_tokens=stated_number(_OVERFLOW_PROMPT, message),
                                    window=stated_number(_OVERFLOW_WINDOW, message), **kw)
    if isinstance(base, NotFoundError):
        return NotFoundError(f"{text} (check base_url and model)", **kw)
    return type(base)(text, **kw)


def _error_object(body: str) -> dict[str, Any]:
    try:
        data = decode_json(body)
    except ValueError:
        return {}
    if isinstance(data, list) and data:
        data = data[0]  # the non-SSE streaming endpoint wraps everything in a JSON array
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _retry_delay(error: Mapping[str, Any]) -> float | None:
    """``google.rpc.RetryInfo.retryDelay`` (``"37s"``, ``"1.5s"``) from an error's details."""
    details = error.get("details")
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            delay = str(detail.get("retryDelay", ""))
            try:
                return max(0.0, float(delay.removesuffix("s")))
            except ValueError:
                return None
    return None


# --- request --------------------------------------------------------------------------------


def request_body(request: ModelRequest) -> dict[str, Any]:
    """The ``GenerateContentRequest`` JSON for ``request`` (the model goes in the URL)."""
    system = [request.system] if request.system else []
    contents: list[dict[str, Any]] = []
    wire_ids: dict[str, str] = {}  # tether call id -> the id Gemini gave that call
    for message in request.messages:
        if message.role == "system":
            system.append(message.text)
            continue
        role = "model" if message.role == "assistant" else "user"
        parts = (_model_parts(message.parts, wire_ids) if role == "model"
                 else _user_parts(message.parts, wire_ids))
        if not parts:
            continue  # Gemini rejects a content without parts
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
        body["toolConfig"] = {"functionCallingConfig": _calling_config(request.tool_choice)}
    config: dict[str, Any] = {}
    if request.max_output_tokens is not None:
        config["maxOutputTokens"] = request.max_output_tokens
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if config:
        body["generationConfig"] = config
    return body


def _user_parts(parts: Sequence[Part], wire_ids: Mapping[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pictures: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, Text):
            if part.text:
                out.append({"text": part.text})
        elif isinstance(part, Image):
            out.append(_image(part))
        elif isinstance(part, ToolResult):
            response: dict[str, Any] = {"name": part.name, "response": {
                "error" if part.is_error else "output": part.content}}
            wire_id = wire_ids.get(part.call_id)
            if wire_id is not None:
                response["id"] = wire_id
            out.append({"functionResponse": response})
            pictures.extend([{"text": images_label(part)}, *map(_image, part.images)]
                            if part.images else ())
        # A ToolCall or Reasoning in a user message is nothing a user turn can carry.
    # A result's images follow the function responses in the same turn, as inline data.
    return out + pictures


def _model_parts(parts: Sequence[Part], wire_ids: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: str | None = None  # a text signature waiting for the Text it signs
    for part in parts:
        if isinstance(part, Reasoning):
            if part.provider != NAME:
                continue  # another wire's thinking means nothing here
            if pending is not None:
                out.append({"text": "", "thoughtSignature": pending})
                pending = None
            if (part.provider_data or {}).get("on") == _ON_NEXT_TEXT:
                pending = part.signature
            else:
                out.extend(_reasoning_parts(part))
            continue
        if isinstance(part, Text):
            wire: dict[str, Any] = {"text": part.text}
            if pending is not None:
                wire["thoughtSignature"] = pending
                pending = None
            elif not part.text:
                continue
            out.append(wire)
            continue
        if pending is not None:
            out.append({"text": "", "thoughtSignature": pending})
            pending = None
        if isinstance(part, ToolCall):
            out.extend(_function_call(part, wire_ids))
        elif isinstance(part, Image):
            out.append(_image(part))
    if pending is not None:
        out.append({"text": "", "thoughtSignature": pending})
    return out


def _reasoning_parts(part: Reasoning) -> list[dict[str, Any]]:
    data = part.provider_data or {}
    raw = data.get("part")
    if isinstance(raw, dict):
        return [raw]  # a part this adapter does not model, replayed as it came
    wire: dict[str, Any] = {"text": part.text, "thought": True}
    if part.signature:
        wire["thoughtSignature"] = part.signature
    return [wire]


def _function_call(call: ToolCall, wire_ids: dict[str, str]) -> list[dict[str, Any]]:
    data = call.provider_data if (call.provider_data or {}).get("provider") == NAME else None
    call_json: dict[str, Any] = {"name": call.name}
    out: list[dict[str, Any]] = []
    try:
        # decode_json: arguments nested past the parser's depth are not an object either.
        args = decode_json(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        args = None
    if isinstance(args, dict):
        call_json["args"] = args
    else:
        # Not a JSON object (a stream cut short, a call carried over from another model):
        # Gemini needs an object, so send none and show the model what it wrote.
        call_json["args"] = {}
        out.append({"text": f"(arguments of {call.name} as written: {call.arguments})"})
    wire: dict[str, Any] = {"functionCall": call_json}
    if data is None:
        wire["thoughtSignature"] = SKIP_SIGNATURE
    else:
        if data.get("id"):
            call_json["id"] = data["id"]
            wire_ids[call.id] = data["id"]
        if data.get("thoughtSignature"):
            wire["thoughtSignature"] = data["thoughtSignature"]
    out.insert(0, wire)
    return out


def _image(image: Image) -> dict[str, Any]:
    if image.data is not None:
        return {"inlineData": {"mimeType": image.media_type, "data": image.base64()}}
    url = image.url or ""
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        media_type = header[5:].split(";")[0] or image.media_type
        if ";base64" not in header:
            payload = base64.b64encode(payload.encode()).decode("ascii")
        return {"inlineData": {"mimeType": media_type, "data": payload}}
    if not url:
        raise ConfigError("gemini: an Image needs data or a url")
    return {"fileData": {"mimeType": image.media_type, "fileUri": url}}


def _declaration(tool: ToolSpec) -> dict[str, Any]:
    schema = _clean_schema(tool.schema_json) if tool.schema_json else {}
    if not schema:
        schema = {"type": "object", "properties": {}}
    declaration: dict[str, Any] = {"name": tool.name, "parametersJsonSchema": schema}
    if tool.description:
        declaration["description"] = tool.description
    return declaration


def _clean_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in _DROPPED_SCHEMA_KEYS}


def _calling_config(choice: ToolChoice) -> dict[str, Any]:
    if isinstance(choice, NamedToolChoice):
        return {"mode": "ANY", "allowedFunctionNames": [choice.name]}
    return {"mode": {"auto": "AUTO", "none": "NONE", "required": "ANY"}[choice]}


# --- response -------------------------------------------------------------------------------


def _new_call_id() -> str:
    return f"gemini_{uuid.uuid4().hex[:24]}"


def _tool_call(part: Mapping[str, Any]) -> ToolCall:
    call = part["functionCall"]
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise MalformedResponseError(f"{NAME}: a functionCall without a name: {call!r}",
                                     provider=NAME)
    data: dict[str, Any] = {"provider": NAME}
    wire_id = call.get("id")
    if wire_id is not None and not isinstance(wire_id, str):
        raise wrong_type(NAME, "a functionCall's id", wire_id)
    if wire_id:
        data["id"] = wire_id
    if part.get("thoughtSignature"):
        data["thoughtSignature"] = part["thoughtSignature"]
    args = call.get("args")
    if args is not None and not isinstance(args, dict):
        raise wrong_type(NAME, "a functionCall's args", args)
    arguments = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return ToolCall(wire_id or _new_call_id(), call["name"], arguments, data)


def _parts(wire_parts: Sequence[Any]) -> list[Part]:
    """tether parts for Gemini parts (already-made ToolCalls pass through)."""
    out: list[Part] = []
    for part in wire_parts:
        if isinstance(part, ToolCall):
            out.append(part)
        elif not isinstance(part, dict):
            raise MalformedResponseError(f"{NAME}: a part is not an object: {part!r}",
                                         provider=NAME)
        elif "functionCall" in part:
            out.append(_tool_call(part))
        elif "text" in part:
            text, signature = part["text"] or "", part.get("thoughtSignature")
            if part.get("thought"):
                out.append(Reasoning(text, NAME, signature=signature))
                continue
            if signature and not text:
                # A signature alone (often the last streamed chunk): no empty Text, which
                # other wires reject; kept whole for Gemini.
                out.append(Reasoning("", NAME, signature=signature,
                                     provider_data={"part": dict(part)}))
                continue
            if signature:
                out.append(Reasoning("", NAME, signature=signature,
                                     provider_data={"on": _ON_NEXT_TEXT}))
            if text:
                out.append(Text(text))
        elif "inlineData" in part and not part.get("thoughtSignature"):  # signed: kept whole
            blob = part["inlineData"]
            out.append(Image(blob.get("mimeType", "image/png"),
                             base64.b64decode(blob.get("data", ""))))
        else:
            # executableCode, codeExecutionResult, ...: kept whole for Gemini, hidden elsewhere.
            out.append(Reasoning("", NAME, provider_data={"part": dict(part)}))
    return out


def _usage(meta: Mapping[str, Any] | None) -> Usage:
    if meta is not None and not isinstance(meta, dict):
        raise wrong_type(NAME, "usageMetadata", meta)
    if not meta:
        return Usage.unreported()  # tokens unknown, not 0
    def tokens(key: str) -> int:
        return count(meta.get(key), NAME, key)

    prompt = tokens("promptTokenCount") + tokens("toolUsePromptTokenCount")
    cached = tokens("cachedContentTokenCount")
    thoughts = tokens("thoughtsTokenCount")
    details = {"reasoning_tokens": thoughts} if thoughts else {}
    return Usage(
        input_tokens=prompt,
        output_tokens=tokens("candidatesTokenCount") + thoughts,
        cache_read_tokens=cached,
        requests=1,
        details=details,
    )


def _stop_reason(raw: str | None, has_calls: bool) -> StopReason:
    if raw in (None, "STOP") and has_calls:
        return "tool_calls"
    if raw is not None and raw.startswith(_PROMPT_BLOCKED):
        return "content_filter"
    if raw is None:
        return "end_turn"  # a stream that ended without a finishReason still answered
    return _STOP_REASONS.get(raw, "other")


def _response(parts: list[Part], raw_stop: str | None, meta: Mapping[str, Any] | None,
              model: str, response_id: str | None) -> ModelResponse:
    message = Message("assistant", tuple(parts))
    stop = _stop_reason(raw_stop, any(isinstance(p, ToolCall) for p in parts))
    return ModelResponse(message, stop, _usage(meta), model=model, id=response_id,
                         raw_stop_reason=raw_stop)


def parse_response(data: Any, model: str) -> ModelResponse:
    """A whole ``GenerateContentResponse`` (or a JSON array of streamed chunks) as a
    ``ModelResponse``."""
    if isinstance(data, list):
        return _merge_chunks(data, model)
    if not isinstance(data, dict):
        raise MalformedResponseError(f"{NAME}: the response is not an object: {data!r:.200}",
                                     provider=NAME)
    if "error" in data:
        raise _stream_error(data)
    candidate, raw_stop = _candidate(data)
    parts = _parts(((candidate or {}).get("content") or {}).get("parts") or ())
    return _response(parts, raw_stop, data.get("usageMetadata"),
                     data.get("modelVersion") or model, data.get("responseId"))


def _candidate(data: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The first candidate and its finish reason; a blocked prompt has no candidate."""
    candidates = data.get("candidates")
    feedback = data.get("promptFeedback") or {}
    if not isinstance(feedback, dict):
        raise wrong_type(NAME, "promptFeedback", feedback)
    if candidates:
        if not isinstance(candidates, list):
            raise wrong_type(NAME, "candidates", candidates)
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            raise MalformedResponseError(f"{NAME}: a candidate is not an object", provider=NAME)
        finish = candidate.get("finishReason")
        if not isinstance(finish, str | None):
            raise wrong_type(NAME, "finishReason", finish)
        return candidate, finish
    if feedback.get("blockReason"):
        return None, f"{_PROMPT_BLOCKED}{feedback['blockReason']}"
    return None, None


def _stream_error(data: Mapping[str, Any]) -> ProviderError:
    error = data.get("error") or {}
    status = error.get("code") if isinstance(error, dict) else None
    return classify_error(status if isinstance(status, int) else 500, {}, json.dumps(data))


class _Accumulator:
    """Builds one answer from streamed chunks: text deltas of one kind are merged into one
    part (Gemini concatenates them too); a thought signature stays on the part it came on."""

    def __init__(self, model: str) -> None:
        self.parts: list[dict[str, Any] | ToolCall] = []
        self.raw_stop: str | None = None
        self.meta: Mapping[str, Any] | None = None
        self.model = model
        self.response_id: str | None = None
        self.calls = 0
        self.chunks = 0

    def add(self, data: Mapping[str, Any]) -> list[StreamChunk]:
        if "error" in data:
            raise _stream_error(data)
        self.chunks += 1
        # A later chunk's values replace these: each is checked as it comes.
        meta, model, response_id = (data.get("usageMetadata"), data.get("modelVersion"),
                                    data.get("responseId"))
        if meta is not None:
            _usage(meta)
        if not isinstance(model, str | None) or not isinstance(response_id, str | None):
            raise wrong_type(NAME, "modelVersion or responseId", [model, response_id])
        self.meta = meta or self.meta
        self.model = model or self.model
        self.response_id = response_id or self.response_id
        candidate, raw_stop = _candidate(data)
        self.raw_stop = raw_stop or self.raw_stop
        out: list[StreamChunk] = []
        for part in ((candidate or {}).get("content") or {}).get("parts") or ():
            if not isinstance(part, dict):
                raise MalformedResponseError(f"{NAME}: a part is not an object: {part!r}",
                                             provider=NAME)
            if "functionCall" in part:
                call = _tool_call(part)
                self.parts.append(call)
                out.append(ToolCallChunk(self.calls, call.id, call.name, call.arguments))
                self.calls += 1
            elif "text" in part:
                text = part["text"] or ""
                if text:
                    out.append(ReasoningChunk(text) if part.get("thought") else TextChunk(text))
                self._add_text(part, text)
            else:
                self.parts.append(dict(part))
        return out

    def _add_text(self, part: Mapping[str, Any], text: str) -> None:
        last = self.parts[-1] if self.parts else None
        signature = part.get("thoughtSignature")
        if (isinstance(last, dict) and "text" in last
                and bool(last.get("thought")) == bool(part.get("thought"))
                and not (signature and last.get("thoughtSignature"))):
            last["text"] += text
            if signature:
                last["thoughtSignature"] = signature
            return
        self.parts.append(dict(part, text=text))

    def response(self) -> ModelResponse:
        if not self.chunks:
            raise cut_short(NAME, "the stream ended before its first chunk")
        return _response(_parts(self.parts), self.raw_stop, self.meta, self.model,
                         self.response_id)


def _merge_chunks(chunks: Sequence[Any], model: str) -> ModelResponse:
    acc = _Accumulator(model)
    for chunk in chunks:
        if not isinstance(chunk, dict):
            raise MalformedResponseError(f"{NAME}: a chunk is not an object: {chunk!r:.200}",
                                         provider=NAME)
        acc.add(chunk)
    return acc.response()


class _GeminiDecoder:
    """A streamed answer: each event is a whole ``GenerateContentResponse`` chunk.

    Gemini's stream has no terminal event of its own: its last chunk carries the
    candidate's ``finishReason`` (or, for a refused prompt, ``promptFeedback.blockReason``).
    A stream that ends before any chunk said so was cut short (a gateway's ``[DONE]``
    counts as an end too).
    """

    __slots__ = ("acc", "done")

    def __init__(self, model: str) -> None:
        self.acc = _Accumulator(model)
        self.done = False

    def feed(self, event: str, data: str) -> list[StreamChunk]:
        if data == "[DONE]":
            self.done = True
            return []
        chunk = load_json(data, NAME, "stream chunk")
        if not isinstance(chunk, dict):
            raise MalformedResponseError(f"{NAME}: a stream chunk is not an object: {data[:200]!r}",
                                         provider=NAME)
        return self.acc.add(chunk)

    def finish(self) -> ModelResponse:
        acc = self.acc
        if acc.chunks and acc.raw_stop is None and not self.done:
            raise cut_short(NAME, "the stream ended before a chunk with a finishReason (the "
                                  "answer may be cut short)")
        return acc.response()
