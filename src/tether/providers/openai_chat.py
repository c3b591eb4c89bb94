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
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from tether.errors import (
    BadRequestError,
    ConfigError,
    ContextOverflowError,
    MalformedResponseError,
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
    ModelRequest,
    ModelResponse,
    NamedToolChoice,
    ReasoningChunk,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
)
from tether.providers.failures import classify_status, count_field, stated_number
from tether.providers.http.bodies import decode_json
from tether.providers.http.errors import count, cut_short, wrong_type
from tether.providers.http.retry import RetryPolicy, RetryRules, Sleep
from tether.providers.http.transport import Timeouts
from tether.providers.images import images_label, images_note
from tether.providers.parse_retry import after_parse_error, continue_after_parse_error
from tether.providers.profiles import OpenAICompatProfile, profile_for
from tether.providers.shell import HTTPModel, WireCodec
from tether.providers.window import count_tokens, discover_window
from tether.tools.spec import ToolSpec

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
# What an overflow error says of the window and the prompt: llama-server's words ("request
# (5000 tokens) exceeds the available context size (4096 tokens)"; its JSON fields
# n_prompt_tokens and n_ctx say it first), OpenAI's and vLLM's ("maximum context length is
# 4096 tokens. However, your messages resulted in 5000 tokens", or "you requested 5000
# tokens (4000 in the messages, 1000 in the completion)").
_OVERFLOW_WINDOW = (re.compile(r"maximum context length is (\d+)"),
                    re.compile(r"context size \((\d+) tokens\)"))
_OVERFLOW_PROMPT = (re.compile(r"request \((\d+) tokens\)"),
                    re.compile(r"resulted in (\d+) tokens"),
                    re.compile(r"\((\d+) in the messages"))

# Where servers put a reasoning model's thinking: llama-server, vLLM and DeepSeek use
# ``reasoning_content``; OpenRouter and Ollama ``reasoning``.
_REASONING_FIELDS = ("reasoning_content", "reasoning")


# The wire's retry rules. After llama-server could not read its model's output, the retry
# withholds the tools (or samples warmer) and, where the server continues an assistant's
# text, an answer broken off after its text goes on from it (parse_retry.py). A server that
# does not know stream_options (an older or stricter one) may refuse the request for it:
# usage in the stream is worth asking for, not worth failing.
_RULES = RetryRules(optional_fields=("stream_options",), revise=after_parse_error)
_CONTINUING = replace(_RULES, resume=continue_after_parse_error)


# Code-fence debris: whitespace, runs of backticks, a fence's language word (```json). The
# group is atomic so a long run of backticks cannot make the match backtrack exponentially.
_FENCE_DEBRIS = re.compile(r"(?>\s+|`{3,}[\w.+-]*|`+)*")


@dataclass(frozen=True, slots=True)
class _ChatCodec(WireCodec):
    """The Chat Completions wire, shaped to what ``profile`` says the server honours."""

    name: ClassVar[str] = NAME
    profile: OpenAICompatProfile

    def model_name(self, model: str, base_url: str) -> str:
        if not model:
            raise ConfigError(
                f"{NAME}: model is required (the name the server at {base_url} serves the "
                f"model under; llama-server accepts any name)"
            )
        return model

    def headers(self) -> dict[str, str]:
        return {"accept": "application/json, text/event-stream"}

    def auth(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def endpoint(self, model: str, stream: bool) -> tuple[str, Mapping[str, str] | None]:
        return "/chat/completions", None

    def request_body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        return request_body(request, model, self.profile)

    @property
    def retry_rules(self) -> RetryRules:
        return _CONTINUING if self.profile.continues_assistant_text else _RULES

    def completion(self, data: Any, request: ModelRequest, model: str) -> ModelResponse:
        return _completion(data, len(request.messages), model)

    def decoder(self, request: ModelRequest, model: str) -> _ChatDecoder:
        return _ChatDecoder(len(request.messages), model)

    def classify(self, status: int, headers: Mapping[str, str], body: str) -> ProviderError:
        return _classify(status, headers, body)

    def settings(self) -> dict[str, Any]:
        return {"profile": self.profile.name}


class OpenAIChat(HTTPModel[_ChatCodec]):
    """A model behind a Chat Completions endpoint.

    ::

        model = OpenAIChat(base_url="http://127.0.0.1:8080/v1", model="qwen")
        model = OpenAIChat("https://api.openai.com/v1", "gpt-4o-mini", api_key_env="OPENAI_API_KEY")

    ``profile`` names the server (``llama-server``, ``ollama``, ``vllm``, ``lmstudio``,
    ``openrouter``, ``openai``, ``generic``) or is an ``OpenAICompatProfile``; without it the
    hosted services are known by ``base_url``'s host, and any other server is assumed
    ``generic`` (``profile_assumed`` is then True). ``sleep`` is what retries wait with
    (tests pass a recorder).

    A retryable error before any content is retried (see ``HTTPModel.stream``). The retry
    after a ``ModelOutputParseError`` is not the same request, which a server at temperature
    0 would fail the same way: it withholds the tools when the model was free to answer in
    words, else it samples warmer (``after_parse_error``).
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
        chosen = (profile if isinstance(profile, OpenAICompatProfile)
                  else profile_for(profile, base_url))
        super().__init__(_ChatCodec(chosen), base_url, model, api_key, api_key_env,
                         retry=retry, timeouts=timeouts, headers=headers, sleep=sleep)
        # Nothing named the server and its host is no known service: ``generic`` is assumed.
        self.profile_assumed = profile is None and chosen.name == "generic"

    @property
    def profile(self) -> OpenAICompatProfile:
        """What the server honours (``tool_choice`` modes, usage in streams, ...)."""
        return self._codec.profile

    @property
    def takes_seed(self) -> bool:
        """A request's ``seed`` is sent (the profile's server takes one)."""
        return self._codec.profile.supports_seed

    async def context_window(self) -> int | None:
        """The context window the server reports for this model (llama-server, Ollama,
        vLLM, LM Studio), else the profile's default, else None (providers/window.py)."""
        return await discover_window(self._transport.client, self.base_url, self.model,
                                     self.profile.name)

    async def count_tokens(self, text: str) -> int | None:
        """The tokens ``text`` makes with the server's tokenizer, where the server has an
        endpoint for it (llama-server's ``/tokenize``); None otherwise."""
        if self.profile.name != "llama-server":
            return None
        return await count_tokens(self._transport.client, self.base_url, text)


# --- the request ------------------------------------------------------------------------


def request_body(request: ModelRequest, model: str,
                 profile: OpenAICompatProfile) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for ``request``, within what ``profile``
    says the server honours."""
    # A tool result's images only where the server is known to read them (the profile);
    # an attached image to a server known not to is refused, found as the messages are
    # encoded (no second pass over the conversation per request).
    images = profile.accepts_images is True
    refused = "" if profile.accepts_images is not False else (
        f"{NAME}: the server takes no images (profile {profile.name!r}: accepts_images "
        f"is false); use a server and model with vision, or leave the image out")
    body: dict[str, Any] = {"model": model,
                            "messages": wire_messages(request.messages, request.system,
                                                      accepts_images=images,
                                                      images_refused=refused)}
    if request.tools:
        choice, tools = _tool_choice(request.tool_choice, request.tools, profile)
        body["tools"] = [_wire_tool(t) for t in tools]
        body["tool_choice"] = choice
    if request.max_output_tokens is not None:
        body[profile.max_tokens_field] = request.max_output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.seed is not None and profile.supports_seed:
        body["seed"] = request.seed
    if request.stream:
        body["stream"] = True
        if profile.supports_stream_usage:
            body["stream_options"] = {"include_usage": True}
    return body


# --- a whole answer -----------------------------------------------------------------------


def _completion(data: Any, turn: int, model: str) -> ModelResponse:
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
    seed = f"{response_id}|{turn}"
    parts: list[Part] = []
    for field_name in _REASONING_FIELDS:
        thought = _optional_text(message.get(field_name), field_name)
        if thought:
            parts.append(Reasoning(thought, NAME, provider_data={"field": field_name}))
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
        _stop_reason(finish, bool(calls), bool(refusal)),
        _usage(data.get("usage")),
        model=str(data.get("model") or model),
        id=response_id,
        raw_stop_reason=finish,
    )


# --- a stream -----------------------------------------------------------------------------


class _ChatDecoder:
    """A streamed Chat Completions answer.

    Every event is a ``chat.completion.chunk`` (or ``[DONE]``, which ends the stream; so
    does the body's end after a ``finish_reason``: servers differ in which they send). A
    chunk may carry an ``error`` object, ``usage``, and a first choice whose delta holds
    any of text, reasoning, tool calls (or the legacy ``function_call``) and a refusal,
    then a ``finish_reason``: each has a method of its own, called in that order.
    """

    __slots__ = ("calls", "done", "finish_reason", "model", "refusals", "response_id",
                 "texts", "thought_field", "thoughts", "usage")

    def __init__(self, turn: int, model: str) -> None:
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.thought_field = ""
        self.refusals: list[str] = []
        self.calls = _CallAssembler(turn)
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.response_id: str | None = None
        self.model = model
        self.done = False

    def feed(self, event: str, data: str) -> list[StreamChunk]:
        if data == "[DONE]":
            self.done = True
            return []
        chunk = _event_object(data)
        if self.response_id is None:
            self.first(chunk)
        if chunk.get("error"):
            raise _stream_error(chunk)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not choices:
            return []
        choice = choices[0]
        index = choice.get("index")
        if index is not None and index != 0:
            if type(index) is not int:
                raise wrong_type(NAME, "a choice's index", index)
            return []  # only the first choice is read (tether asks for one)
        out: list[StreamChunk] = []
        # A few servers put the last piece under "message" instead of "delta".
        delta = choice.get("delta") or choice.get("message")
        if delta:
            self.delta(delta, out)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        return out

    def first(self, chunk: Mapping[str, Any]) -> None:
        """The first chunk names the response and the model that answers."""
        self.response_id = chunk.get("id")
        self.model = chunk.get("model") or self.model
        self.calls.response_id = self.response_id

    def delta(self, delta: Mapping[str, Any], out: list[StreamChunk]) -> None:
        content = delta.get("content")
        if content:
            self.content(content, out)
        for field_name in _REASONING_FIELDS:
            thought = delta.get(field_name)
            if thought:
                self.reasoning(field_name, thought, out)
                break
        raw_calls = delta.get("tool_calls")
        if raw_calls:
            self.tool_calls(raw_calls, out)
        legacy = delta.get("function_call")
        if legacy:
            self.function_call(legacy, out)
        refusal = delta.get("refusal")
        if refusal:
            self.refusal(refusal)

    def content(self, content: Any, out: list[StreamChunk]) -> None:
        if not isinstance(content, str):
            content = _content_text(content)
        self.texts.append(content)
        out.append(TextChunk(content))

    def reasoning(self, field_name: str, thought: Any, out: list[StreamChunk]) -> None:
        if not isinstance(thought, str):
            raise wrong_type(NAME, field_name, thought)
        self.thoughts.append(thought)
        self.thought_field = field_name
        out.append(ReasoningChunk(thought))

    def tool_calls(self, raw_calls: Any, out: list[StreamChunk]) -> None:
        if not isinstance(raw_calls, list):
            raise wrong_type(NAME, "a delta's tool_calls", raw_calls)
        for raw in raw_calls:
            if not isinstance(raw, dict):
                raise wrong_type(NAME, "a tool call delta", raw)
            out.append(self.calls.add(raw))

    def function_call(self, legacy: Any, out: list[StreamChunk]) -> None:
        """The pre-tools function calling some servers still stream: one call, index 0."""
        out.append(self.calls.add({"index": 0, "function": legacy}))

    def refusal(self, refusal: Any) -> None:
        self.refusals.append(_optional_text(refusal, "refusal"))

    def reported(self) -> Usage | None:
        """The usage a chunk reported before the answer failed (None: none did)."""
        return None if self.usage is None else _usage(self.usage)

    def finish(self) -> ModelResponse:
        finish = self.finish_reason
        if finish is None and not self.done:
            raise cut_short(NAME, "the stream ended before the model finished (no "
                                  "finish_reason, no [DONE]); the answer may be cut off")
        parts: list[Part] = []
        if self.thoughts:
            parts.append(Reasoning("".join(self.thoughts), NAME,
                                   provider_data={"field": self.thought_field}))
        tool_calls = self.calls.finish()
        text = "".join(self.texts)
        if text and not (tool_calls and is_fence_debris(text)):
            parts.append(Text(text))
        elif self.refusals:
            parts.append(Text("".join(self.refusals)))
        parts.extend(tool_calls)
        return ModelResponse(
            Message("assistant", tuple(parts)),
            _stop_reason(finish, bool(tool_calls), bool(self.refusals)),
            _usage(self.usage),
            model=self.model,
            id=self.response_id,
            raw_stop_reason=finish,
        )


def _event_object(data: str) -> dict[str, Any]:
    try:
        chunk = decode_json(data)
    except ValueError as e:
        raise MalformedResponseError(
            f"{NAME}: a stream event is not JSON ({e}): {data[:200]!r}", provider=NAME
        ) from None
    if not isinstance(chunk, dict):
        raise MalformedResponseError(
            f"{NAME}: a stream event is not a JSON object: {data[:200]!r}", provider=NAME)
    return chunk


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


def wire_messages(messages: Iterable[Message], system: str | None = None, *,
                  accepts_images: bool = True,
                  images_refused: str = "") -> list[dict[str, Any]]:
    """tether's messages as Chat Completions messages.

    Tool results become one ``role: "tool"`` message each; reasoning is sent back only when
    it came from this wire, under the field it arrived in. A ``tool`` message holds text
    only, so the images the results carry follow them in one user message (each result's
    images after a line naming its call, and saying they are outside data when they are);
    to a server that does not accept images (``accepts_images``, the profile's) each
    result says its images were left out instead. With ``images_refused`` (a message), an
    attached image raises ``BadRequestError`` with it.
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
        pictures: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, ToolResult):
                text = part.content
                if part.images and not accepts_images:
                    text = f"{text}\n{images_note(part)}"
                elif part.images:
                    pictures.append({"type": "text", "text": images_label(part)})
                    pictures.extend(_image_part(image) for image in part.images)
                out.append({"role": "tool", "tool_call_id": part.call_id, "content": text})
            elif isinstance(part, Text):
                content.append({"type": "text", "text": part.text})
            elif isinstance(part, Image):
                if images_refused:
                    raise BadRequestError(images_refused, provider=NAME)
                only_text = False
                content.append(_image_part(part))
        if pictures:  # after every tool message of the turn: they must follow the call
            out.append({"role": "user", "content": pictures})
        if not content:
            continue
        wire_role = "system" if role == "system" else "user"
        if only_text:
            # Plain strings suit every server (some templates cannot read part lists).
            out.append({"role": wire_role, "content": "".join(c["text"] for c in content)})
        else:
            out.append({"role": wire_role, "content": content})
    return out


def _image_part(image: Image) -> dict[str, Any]:
    url = image.url or f"data:{image.media_type};base64,{image.base64()}"
    return {"type": "image_url", "image_url": {"url": url}}


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
    # A refusal is the answer, with calls beside it or not: the model declined, and calls it
    # made while declining are not run (the loop's content_filter ending closes them unrun).
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
        return Usage.unreported()  # tokens unknown, not 0
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


# --- errors ------------------------------------------------------------------------------


def _classify(status: int, headers: Mapping[str, str], body: str) -> ProviderError:
    error = classify_status(status, headers, body, provider=NAME)
    if (not isinstance(error, ContextOverflowError) and status in (400, 413, 422, 500)
            and any(m in body.lower() for m in _OVERFLOW_MARKERS)):
        error = ContextOverflowError(error.message, provider=NAME, status=status, body=body)
    if isinstance(error, ContextOverflowError):
        error.prompt_tokens, error.window = _overflow_numbers(error.message, body)
    return error


def _overflow_numbers(message: str, body: str) -> tuple[int | None, int | None]:
    """``(prompt_tokens, window)`` as an overflow error states them (each None where it
    does not): llama-server's JSON fields first, then the servers' words."""
    try:
        data = json.loads(body) if body.lstrip().startswith("{") else None
    except ValueError:
        data = None
    fields = data.get("error") if isinstance(data, dict) else None
    if not isinstance(fields, dict):
        fields = {}
    text = f"{message} {body}"
    prompt = count_field(fields.get("n_prompt_tokens"))
    window = count_field(fields.get("n_ctx"))
    return (prompt if prompt is not None else stated_number(_OVERFLOW_PROMPT, text),
            window if window is not None else stated_number(_OVERFLOW_WINDOW, text))


def _stream_error(data: Mapping[str, Any]) -> ProviderError:
    """An ``error`` object inside a 200 answer or a stream, as the error its code means."""
    error = data.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and code.isascii() and code.isdigit():
        code = int(code)
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return _classify(status, {}, json.dumps(data))


__all__ = ["NAME", "OpenAIChat", "is_fence_debris", "wire_messages"]
