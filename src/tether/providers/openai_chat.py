"""Chat Completions (``POST {base_url}/chat/completions``): llama-server, Ollama, vLLM,
LM Studio, OpenRouter, OpenAI.

One adapter for the whole family; a profile (providers/profiles.py) says what each server
honours. The parsing is forgiving where real servers differ (empty ``content`` beside tool
calls, missing or repeated call ids, usage only at the end or never, no ``[DONE]``) and
strict where silence would lose data (a stream that stops before the model finished).

The streaming path runs once per chunk, so it works on plain dicts: no model validation
per chunk, one ``json.loads`` and a few lookups.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import httpx

from tether.errors import (
    ConfigError,
    ContextOverflowError,
    MalformedResponseError,
    ModelOutputParseError,
    ProviderError,
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
    Completed,
    ModelRequest,
    ModelResponse,
    NamedToolChoice,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
)
from tether.providers.boundary import checked
from tether.providers.http import (
    HTTPTransport,
    RetryBudget,
    RetryPolicy,
    Sleep,
    Timeouts,
    classify_status,
    count,
    cut_short,
    decode_json,
    read_stream_errors,
    resolve_api_key,
    retry_before_first_chunk,
    wrong_type,
)
from tether.providers.profiles import OpenAICompatProfile, profile_for
from tether.tools import ToolSpec

NAME = "openai-chat"

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "end_turn": "end_turn",
    "eos": "end_turn",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "max_tokens",
    "max_tokens": "max_tokens",
    "content_filter": "content_filter",
}

# Context overflow as the servers word it, beyond the shared hints in http.py: llama-server
# ("exceeds the available context size", type exceed_context_size_error), OpenAI's code.
_OVERFLOW_MARKERS = ("context_length_exceeded", "exceed_context_size", "context size")

# Where servers put a reasoning model's thinking: llama-server, vLLM and DeepSeek use
# ``reasoning_content``; OpenRouter and Ollama ``reasoning``.
_REASONING_FIELDS = ("reasoning_content", "reasoning")

# How long to wait for the end of a body after ``[DONE]`` (it normally comes in the same read).
_DRAIN_SECS = 1.0

# The lowest temperature the retry after a model-output parse error samples at.
PARSE_RETRY_TEMPERATURE = 0.7

# Code-fence debris: whitespace, runs of backticks, a fence's language word (```json). The
# group is atomic so a long run of backticks cannot make the match backtrack exponentially.
_FENCE_DEBRIS = re.compile(r"(?>\s+|`{3,}[\w.+-]*|`+)*")


class OpenAIChat:
    """A model behind a Chat Completions endpoint.

    ::

        model = OpenAIChat(base_url="http://127.0.0.1:8080/v1", model="qwen")
        model = OpenAIChat("https://api.openai.com/v1", "gpt-4o-mini", api_key_env="OPENAI_API_KEY")

    ``profile`` names the server (``llama-server``, ``ollama``, ``vllm``, ``lmstudio``,
    ``openrouter``, ``openai``, ``generic``) or is an ``OpenAICompatProfile``; without it the
    hosted services are known by ``base_url``'s host, and any other server is assumed
    ``generic`` (``profile_assumed`` is then True). ``sleep`` is what retries wait with
    (tests pass a recorder).
    """

    name = NAME

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080/v1",
        model: str = "",
        api_key: str | None = None,
        api_key_env: str | None = None,
        *,
        profile: str | OpenAICompatProfile | None = None,
        retry: RetryPolicy = RetryPolicy(),
        timeouts: Timeouts = Timeouts(),
        headers: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not model:
            raise ConfigError(
                f"{NAME}: model is required (the name the server at {base_url} serves the "
                f"model under; llama-server accepts any name)"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.profile = (profile if isinstance(profile, OpenAICompatProfile)
                        else profile_for(profile, base_url))
        # Nothing named the server and its host is no known service: ``generic`` is assumed.
        self.profile_assumed = profile is None and self.profile.name == "generic"
        key = resolve_api_key(api_key, api_key_env, NAME)
        all_headers = {"accept": "application/json, text/event-stream"}
        if key:
            all_headers["authorization"] = f"Bearer {key}"
        if headers:
            all_headers.update(headers)
        self._transport = HTTPTransport(
            base_url=self.base_url, headers=all_headers, provider=NAME, classify=_classify,
            retry=retry, timeouts=timeouts, sleep=sleep,
        )

    def __repr__(self) -> str:
        return (f"OpenAIChat(base_url={self.base_url!r}, model={self.model!r}, "
                f"profile={self.profile.name!r})")

    def with_model(self, model: str) -> OpenAIChat:
        """The same endpoint with another model. The copy shares the HTTP client, so a
        sub-agent on another model opens no connection pool of its own."""
        clone = copy.copy(self)
        clone.model = model
        return clone

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Send ``request``; yield text, reasoning and tool-call deltas as they arrive (when
        ``request.stream``), retry notices, and finally ``Completed``.

        A retryable error before any content is retried, whether it came as an HTTP status
        or inside a 200 (llama-server streams its parse error as an ``error`` event). The
        retry after a ``ModelOutputParseError`` samples warmer: it carries
        ``temperature = max(PARSE_RETRY_TEMPERATURE, the request's)``, because a server at
        temperature 0 would produce the same unparseable output again.
        """
        budget = self._transport.budget(self.request_body(request), warmer_after_parse_error)
        async for chunk in retry_before_first_chunk(
                lambda: checked(self._attempt(request, budget), NAME, request.stream), budget,
                self._transport.sleep):
            yield chunk

    async def _attempt(
        self, request: ModelRequest, budget: RetryBudget
    ) -> AsyncGenerator[StreamChunk, None]:
        response: httpx.Response | None = None
        async for item in self._transport.send("/chat/completions", budget.body,
                                               stream=request.stream, budget=budget):
            if isinstance(item, Retrying):
                yield item
            else:
                response = item
        assert response is not None, "the transport yields a response or raises"
        if not request.stream:
            yield Completed(self._completion(_json_body(response.text), request))
            return
        try:
            if "text/event-stream" not in response.headers.get("content-type", ""):
                # Asked to stream, answered whole (some proxies and servers do): same answer.
                await response.aread()
                yield Completed(self._completion(_json_body(response.text), request))
                return
            async for chunk in self._read_stream(response, request):
                yield chunk
        finally:
            await response.aclose()

    # --- the request --------------------------------------------------------------------

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request`` (public for tests and debugging)."""
        profile = self.profile
        body: dict[str, Any] = {"model": self.model,
                                "messages": wire_messages(request.messages, request.system)}
        if request.tools:
            choice, tools = _tool_choice(request.tool_choice, request.tools, profile)
            body["tools"] = [_wire_tool(t) for t in tools]
            body["tool_choice"] = choice
        if request.max_output_tokens is not None:
            body[profile.max_tokens_field] = request.max_output_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stream:
            body["stream"] = True
            if profile.supports_stream_usage:
                body["stream_options"] = {"include_usage": True}
        return body

    # --- a whole answer -------------------------------------------------------------------

    def _completion(self, data: Any, request: ModelRequest) -> ModelResponse:
        if not isinstance(data, dict):
            raise MalformedResponseError(
                f"{NAME}: expected a JSON object, got {type(data).__name__}", provider=NAME)
        choices = data.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise wrong_type(NAME, "choices", choices)
        if not choices:
            if data.get("error"):  # OpenRouter reports upstream failures as HTTP 200
                raise _stream_error(data)
            raise MalformedResponseError(
                f"{NAME}: the response has no choices: {json.dumps(data)[:300]}", provider=NAME)
        choice = choices[0]
        message = choice.get("message") or {}
        response_id = data.get("id")
        seed = f"{response_id}|{len(request.messages)}"
        parts: list[Part] = []
        for field in _REASONING_FIELDS:
            thought = _optional_text(message.get(field), field)
            if thought:
                parts.append(Reasoning(thought, NAME, provider_data={"field": field}))
                break
        raw_calls = list(message.get("tool_calls") or ())
        legacy = message.get("function_call")
        if isinstance(legacy, dict):  # the pre-tools function calling some servers still use
            raw_calls.append({"function": legacy})
        calls: list[ToolCall] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_calls):
            function = raw.get("function") or {}
            calls.append(ToolCall(_call_id(raw.get("id"), seed, index, seen),
                                  _optional_text(function.get("name"), "a tool call's name"),
                                  _arguments_text(function.get("arguments"))))
        text = _content_text(message.get("content"))
        refusal = _optional_text(message.get("refusal"), "refusal")
        if text and not (calls and is_fence_debris(text)):
            parts.append(Text(text))
        elif refusal:
            parts.append(Text(refusal))
        parts.extend(calls)
        finish = choice.get("finish_reason")
        return ModelResponse(
            Message("assistant", tuple(parts)),
            _stop_reason(finish, bool(calls), bool(refusal) and not calls),
            _usage(data.get("usage")),
            model=str(data.get("model") or self.model),
            id=response_id,
            raw_stop_reason=finish,
        )

    # --- a stream -------------------------------------------------------------------------

    async def _read_stream(
        self, response: httpx.Response, request: ModelRequest
    ) -> AsyncIterator[StreamChunk]:
        texts: list[str] = []
        thoughts: list[str] = []
        thought_field = ""
        calls = _CallAssembler(len(request.messages))
        finish: str | None = None
        usage: Any = None
        response_id: str | None = None
        model = ""
        done = False
        refusal: list[str] = []
        events = read_stream_errors(response, NAME)
        async for _event, data in events:
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = decode_json(data)
            except ValueError as e:
                raise MalformedResponseError(
                    f"{NAME}: a stream event is not JSON ({e}): {data[:200]!r}", provider=NAME
                ) from None
            if not isinstance(chunk, dict):
                raise MalformedResponseError(
                    f"{NAME}: a stream event is not a JSON object: {data[:200]!r}", provider=NAME)
            if response_id is None:
                response_id = chunk.get("id")
                model = chunk.get("model") or ""
                calls.response_id = response_id
            if chunk.get("error"):
                raise _stream_error(chunk)
            if chunk.get("usage"):
                usage = chunk["usage"]
            choices = chunk.get("choices")
            if not choices:
                continue
            choice = choices[0]
            index = choice.get("index")
            if index is not None and index != 0:
                if type(index) is not int:
                    raise wrong_type(NAME, "a choice's index", index)
                continue
            # A few servers put the last piece under "message" instead of "delta".
            delta = choice.get("delta") or choice.get("message")
            if delta:
                content = delta.get("content")
                if content:
                    if not isinstance(content, str):
                        content = _content_text(content)
                    texts.append(content)
                    yield TextChunk(content)
                for field in _REASONING_FIELDS:
                    thought = delta.get(field)
                    if thought:
                        if not isinstance(thought, str):
                            raise wrong_type(NAME, field, thought)
                        thoughts.append(thought)
                        thought_field = field
                        yield ReasoningChunk(thought)
                        break
                raw_calls = delta.get("tool_calls")
                if raw_calls:
                    for raw in raw_calls:
                        yield calls.add(raw)
                legacy = delta.get("function_call")
                if legacy:
                    yield calls.add({"index": 0, "function": legacy})
                if delta.get("refusal"):
                    refusal.append(delta["refusal"])
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
        if done:
            await _drain(events)
        if finish is None and not done:
            raise cut_short(NAME, "the stream ended before the model finished (no "
                                  "finish_reason, no [DONE]); the answer may be cut off")
        parts: list[Part] = []
        if thoughts:
            parts.append(Reasoning("".join(thoughts), NAME,
                                   provider_data={"field": thought_field}))
        tool_calls = calls.finish()
        text = "".join(texts)
        if text and not (tool_calls and is_fence_debris(text)):
            parts.append(Text(text))
        elif refusal:
            parts.append(Text("".join(refusal)))
        parts.extend(tool_calls)
        yield Completed(ModelResponse(
            Message("assistant", tuple(parts)),
            _stop_reason(finish, bool(tool_calls), bool(refusal) and not tool_calls),
            _usage(usage),
            model=model or self.model,
            id=response_id,
            raw_stop_reason=finish,
        ))


class _Slot:
    __slots__ = ("arguments", "id", "name", "position", "raw_id")

    def __init__(self, position: int, raw_id: Any, call_id: str, name: str) -> None:
        self.position = position
        self.raw_id = raw_id
        self.id = call_id
        self.name = name
        self.arguments: list[str] = []


class _CallAssembler:
    """Tool calls of one streamed turn, put together from their deltas.

    Deltas are matched by ``index`` (several calls may interleave); a delta without an index
    goes to the call with its id, else to the latest call. An index reused with a new id
    starts a new call (some parsers number every call 0).
    """

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.response_id: str | None = None
        self.slots: list[_Slot] = []
        self.by_index: dict[int, _Slot] = {}
        self.by_raw_id: dict[str, _Slot] = {}
        self.seen: set[str] = set()

    def add(self, raw: Mapping[str, Any]) -> ToolCallChunk:
        index = raw.get("index")
        raw_id = raw.get("id") or None
        slot: _Slot | None
        if isinstance(index, int):
            slot = self.by_index.get(index)
            if slot is not None and raw_id and slot.raw_id and raw_id != slot.raw_id:
                slot = None
        elif raw_id:
            slot = self.by_raw_id.get(raw_id)
        else:
            slot = self.slots[-1] if self.slots else None
        function = raw.get("function") or {}
        name = function.get("name")
        if name is not None and not isinstance(name, str):
            raise wrong_type(NAME, "a tool call's name", name)
        arguments = _arguments_text(function.get("arguments"))
        if slot is None:
            position = len(self.slots)
            call_id = _call_id(raw_id, f"{self.response_id}|{self.turn}", position, self.seen)
            slot = _Slot(position, raw_id, call_id, str(name or ""))
            self.slots.append(slot)
            if isinstance(index, int):
                self.by_index[index] = slot
            if isinstance(raw_id, str):
                self.by_raw_id[raw_id] = slot
            if arguments:
                slot.arguments.append(arguments)
            return ToolCallChunk(position, call_id, slot.name, arguments)
        if name and not slot.name:
            slot.name = str(name)
        else:
            name = None
        if arguments:
            slot.arguments.append(arguments)
        return ToolCallChunk(slot.position, None, name or None, arguments)

    def finish(self) -> list[ToolCall]:
        return [ToolCall(s.id, s.name, "".join(s.arguments)) for s in self.slots]


# --- request pieces ----------------------------------------------------------------------


def wire_messages(messages: Iterable[Message], system: str | None = None) -> list[dict[str, Any]]:
    """tether's messages as Chat Completions messages.

    Tool results become one ``role: "tool"`` message each; reasoning is sent back only when
    it came from this wire, under the field it arrived in.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        role = message.role
        if role == "assistant":
            out.append(_assistant(message))
            continue
        content: list[dict[str, Any]] = []
        only_text = True
        for part in message.parts:
            if isinstance(part, ToolResult):
                out.append({"role": "tool", "tool_call_id": part.call_id,
                            "content": part.content})
            elif isinstance(part, Text):
                content.append({"type": "text", "text": part.text})
            elif isinstance(part, Image):
                only_text = False
                url = part.url or f"data:{part.media_type};base64,{part.base64()}"
                content.append({"type": "image_url", "image_url": {"url": url}})
        if not content:
            continue
        wire_role = "system" if role == "system" else "user"
        if only_text:
            # Plain strings suit every server (some templates cannot read part lists).
            out.append({"role": wire_role, "content": "".join(c["text"] for c in content)})
        else:
            out.append({"role": wire_role, "content": content})
    return out


def _assistant(message: Message) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    wire: dict[str, Any] = {"role": "assistant"}
    for part in message.parts:
        if isinstance(part, Text):
            texts.append(part.text)
        elif isinstance(part, ToolCall):
            calls.append({"id": part.id, "type": "function",
                          "function": {"name": part.name, "arguments": part.arguments}})
        elif isinstance(part, Reasoning) and part.provider == NAME:
            field = (part.provider_data or {}).get("field", "reasoning_content")
            wire[field] = part.text
    text = "".join(texts)
    wire["content"] = text or (None if calls else "")
    if calls:
        wire["tool_calls"] = calls
    return wire


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": spec.name, "description": spec.description, "parameters": spec.schema_json}}


def _tool_choice(
    choice: ToolChoice, tools: Sequence[ToolSpec], profile: OpenAICompatProfile
) -> tuple[Any, Sequence[ToolSpec]]:
    """The wire ``tool_choice`` and the tools to offer, within what the server supports."""
    if isinstance(choice, NamedToolChoice):
        if profile.supports_named_tool_choice:
            return {"type": "function", "function": {"name": choice.name}}, tools
        # Offering only that tool is the nearest request the server can honour.
        only = [t for t in tools if t.name == choice.name] or list(tools)
        return ("required" if profile.supports_tool_choice_required else "auto"), only
    if choice == "required" and not profile.supports_tool_choice_required:
        return "auto", tools
    return choice, tools


# --- response pieces ---------------------------------------------------------------------


def _json_body(content: str) -> Any:
    try:
        return decode_json(content)
    except ValueError as e:
        raise MalformedResponseError(
            f"{NAME}: the response is not JSON ({e}): {content[:200]!r}", provider=NAME) from None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise wrong_type(NAME, "a message's content", content)
    # Content as parts (Mistral-style servers).
    texts = []
    for part in content:
        if not isinstance(part, dict):
            raise wrong_type(NAME, "a content part", part)
        if part.get("type", "text") == "text":
            texts.append(_optional_text(part.get("text"), "a content part's text"))
    return "".join(texts)


def _optional_text(value: Any, what: str) -> str:
    """A string field ("" when absent or null); any other type is a malformed answer."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise wrong_type(NAME, what, value)
    return value


def is_fence_debris(text: str) -> bool:
    """Whether ``text`` is only whitespace and code-fence debris (backticks, a fence's
    language word such as ``json``).

    llama-server asked for ``tool_choice: "required"`` answers ``content: "```json\\n"``
    beside the call: the fence the model opened around it. Beside tool calls such text is
    left out of the message (a stream has already yielded it as a delta); any real text
    is kept.
    """
    return _FENCE_DEBRIS.fullmatch(text) is not None


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    # Some servers send the arguments as a JSON object rather than its text.
    return json.dumps(arguments, ensure_ascii=False)


def _call_id(raw: Any, seed: str, index: int, seen: set[str]) -> str:
    """The server's call id when it is usable, else a generated one.

    Generated ids derive from the response id, the turn and the call's position, so a replay
    of the same answer yields the same ids and two calls of one turn never share one.
    """
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    call_id = raw.strip() if isinstance(raw, str) else ""
    if not call_id or call_id in seen:
        digest = hashlib.sha1(f"{seed}|{index}|{call_id}".encode()).hexdigest()[:24]
        call_id = f"call_{digest}"
    seen.add(call_id)
    return call_id


def _stop_reason(finish: Any, has_calls: bool, refused: bool) -> StopReason:
    if refused:
        return "content_filter"
    reason = _STOP_REASONS.get(finish) if isinstance(finish, str) else None
    if has_calls and reason in (None, "end_turn"):
        # Ollama and older llama-server say "stop" beside tool calls; the calls decide.
        return "tool_calls"
    if reason is None:
        return "tool_calls" if has_calls else ("end_turn" if finish is None else "other")
    return reason


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage(requests=1, unreported_requests=1)  # tokens unknown, not 0
    if not isinstance(raw, dict):
        raise wrong_type(NAME, "usage", raw)
    prompt = count(raw.get("prompt_tokens"), NAME, "prompt_tokens")
    completion = count(raw.get("completion_tokens"), NAME, "completion_tokens")
    cached = 0
    details: dict[str, int] = {}
    prompt_details = raw.get("prompt_tokens_details")
    if isinstance(prompt_details, dict):
        cached = count(prompt_details.get("cached_tokens"), NAME, "cached_tokens")
    completion_details = raw.get("completion_tokens_details")
    if isinstance(completion_details, dict):
        reasoning = count(completion_details.get("reasoning_tokens"), NAME, "reasoning_tokens")
        if reasoning:
            details["reasoning_tokens"] = reasoning
    return Usage(prompt, completion, cached, 0, 1, details)


async def _drain(events: AsyncIterator[Any]) -> None:
    """Read to the end of the body after ``[DONE]``: a connection closed with unread bytes is
    reset, a fully read one goes back to the pool for the next turn."""
    try:
        async with asyncio.timeout(_DRAIN_SECS):
            async for _ in events:
                pass
    except (TimeoutError, ProviderError):
        pass  # the answer is complete; a server that keeps talking only costs its connection


# --- errors ------------------------------------------------------------------------------


def warmer_after_parse_error(error: ProviderError, body: dict[str, Any]) -> dict[str, Any]:
    """The body for the retry after ``error``: after a ``ModelOutputParseError``, with the
    temperature raised to at least ``PARSE_RETRY_TEMPERATURE``; otherwise unchanged.

    llama-server at temperature 0 (tether's local default) is deterministic: the same
    request would get the same unparseable output. A body without a temperature gets one
    too, since the server's own default may be 0 (``--temp 0``).
    """
    if not isinstance(error, ModelOutputParseError):
        return body
    current = body.get("temperature")
    floor = current if isinstance(current, int | float) else 0.0
    return {**body, "temperature": max(PARSE_RETRY_TEMPERATURE, floor)}


def _classify(status: int, headers: Mapping[str, str], body: str) -> ProviderError:
    error = classify_status(status, headers, body, provider=NAME)
    if (not isinstance(error, ContextOverflowError) and status in (400, 413, 422, 500)
            and any(m in body.lower() for m in _OVERFLOW_MARKERS)):
        return ContextOverflowError(error.message, provider=NAME, status=status, body=body)
    return error


def _stream_error(data: Mapping[str, Any]) -> ProviderError:
    """An ``error`` object inside a 200 answer or a stream, as the error its code means."""
    error = data.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and code.isascii() and code.isdigit():
        code = int(code)
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return _classify(status, {}, json.dumps(data))


__all__ = ["NAME", "PARSE_RETRY_TEMPERATURE", "OpenAIChat", "is_fence_debris",
           "warmer_after_parse_error", "wire_messages"]
