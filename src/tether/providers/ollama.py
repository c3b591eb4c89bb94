"""Ollama's own API (``POST {base_url}/api/chat``): the wire that can set the window.

Ollama's OpenAI-compatible endpoint ignores the context size, so every run there is held to
the model's default window (2,048 or 4,096 tokens) whatever was configured, and a longer
prompt is cut from its start without a word. Its own API takes ``options.num_ctx``: this
wire sends the window tether fits the conversation into with every request, so the
conversation the fitter kept is the one the model reads.

- The window: ``num_ctx`` as configured (``context_window``), else the model's trained
  length from ``POST /api/show`` (``model_info``'s ``<architecture>.context_length``) at
  most ``DEFAULT_NUM_CTX`` (a larger window costs memory on every load); asked once, before
  the first request, so the model is loaded once, with the window it keeps.
- ``/api/show`` also says what the model can take (``capabilities``: ``vision``,
  ``tools``, ``thinking``): an image for a model without ``vision`` is refused before any
  request. A model that is not pulled is a ``NotFoundError`` naming ``ollama pull MODEL``.
- Streams are newline-delimited JSON (``application/x-ndjson``), one object per line, the
  last with ``done: true``, ``done_reason`` and the counts (``prompt_eval_count``,
  ``eval_count``); an error mid-stream is a line ``{"error": "..."}``. A tool call comes
  whole in one line, its ``arguments`` an object.
- Thinking (``think``) arrives as ``message.thinking`` and is sent back to this wire only.
- Ollama has no ``tool_choice``: ``"none"`` offers no tools, a named tool is offered alone,
  ``"required"`` offers them all (the model may still answer in words).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, cast

import httpx

from tether.errors import (
    BadRequestError,
    ConfigError,
    MalformedResponseError,
    NotFoundError,
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
    loads_bounded,
)
from tether.providers.base import (
    ModelRequest,
    ModelResponse,
    NamedToolChoice,
    ReasoningChunk,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
)
from tether.providers.failures import classify_status, error_message
from tether.providers.http.bodies import decode_json, read_body
from tether.providers.http.errors import count, cut_short, wrong_type
from tether.providers.http.retry import RetryPolicy, Sleep
from tether.providers.http.transport import Timeouts
from tether.providers.shell import HTTPModel, WireCodec
from tether.tools.spec import ToolSpec

NAME = "ollama"

DEFAULT_BASE_URL = "http://127.0.0.1:11434"

DEFAULT_NUM_CTX = 8192
"""The window sent when none is configured and the model's trained length is larger: a
model loads with a key-value cache the size of ``num_ctx``, so 128K by default would cost
gigabytes on a laptop. Set ``context_window`` for more (or less)."""

# How long a question to /api/show or /api/tags may take, and the most read of its answer
# (a model's tensor list can be long).
ASK_TIMEOUT_SECS = 30.0
ASK_MAX_BYTES = 8 * 1024 * 1024

_STOP_REASONS: dict[str, StopReason] = {"stop": "end_turn", "length": "max_tokens"}

# "model 'llama3' not found", "model \"llama3\" not found, try pulling it first".
# A server at its limit: "server busy, please try again.  maximum pending requests
# exceeded" (its 503), an overloaded proxy.
_BUSY = re.compile(r"server busy|overloaded|maximum pending requests", re.IGNORECASE)
_NOT_FOUND = re.compile(r"model ['\"]?([^'\"]+?)['\"]? not found", re.IGNORECASE)


def pull_advice(model: str) -> str:
    return f"the model {model!r} is not pulled on this Ollama server: run `ollama pull {model}`"


@dataclass(slots=True)
class _OllamaCodec(WireCodec):
    """The ``/api/chat`` wire. ``num_ctx`` is the window every request carries (None until
    it is known); ``vision`` whether the model takes images (None: not known)."""

    name: ClassVar[str] = NAME
    model: str = ""
    num_ctx: int | None = None
    keep_alive: str | None = None
    think: bool | str | None = None
    vision: bool | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def model_name(self, model: str, base_url: str) -> str:
        if not model:
            raise ConfigError(f"{NAME}: model is required (a model pulled on the server at "
                              f"{base_url}: `ollama list` shows them)")
        return model

    def headers(self) -> dict[str, str]:
        return {"accept": "application/json, application/x-ndjson"}

    def auth(self, key: str) -> dict[str, str]:
        # Ollama itself takes no key; a proxy in front of it (or ollama.com) a bearer token.
        return {"authorization": f"Bearer {key}"}

    def endpoint(self, model: str, stream: bool) -> tuple[str, Mapping[str, str] | None]:
        return "/api/chat", None

    def request_body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        # An image to a model known to take none is refused as the messages are encoded
        # (no second pass over the conversation per request).
        refused = "" if self.vision is not False else (
            f"{NAME}: the model {model!r} does not take images (its capabilities in "
            f"/api/show do not include vision); use a vision model (llava, qwen2.5vl, "
            f"gemma3...) or leave the image out")
        body: dict[str, Any] = {"model": model, "stream": request.stream,
                                "messages": wire_messages(request.messages, request.system,
                                                          images_refused=refused)}
        tools = _offered(request)
        if tools:
            body["tools"] = [_wire_tool(t) for t in tools]
        options = dict(self.options)
        if self.num_ctx is not None:
            options["num_ctx"] = self.num_ctx
        if request.max_output_tokens is not None:
            options["num_predict"] = request.max_output_tokens
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.seed is not None:
            options["seed"] = request.seed
        if options:
            body["options"] = options
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        if self.think is not None:
            body["think"] = self.think
        return body

    def completion(self, data: Any, request: ModelRequest, model: str) -> ModelResponse:
        decoder = _OllamaDecoder(len(request.messages), model)
        decoder.feed_object(data)
        if not decoder.done:
            raise MalformedResponseError(f"{NAME}: a whole answer without done: true",
                                         provider=NAME)
        return decoder.finish()

    def decoder(self, request: ModelRequest, model: str) -> _OllamaDecoder:
        return _OllamaDecoder(len(request.messages), model)

    def classify(self, status: int, headers: Mapping[str, str], body: str) -> ProviderError:
        return classify_error(status, headers, body, self.model)

    def settings(self) -> dict[str, Any]:
        return {"num_ctx": self.num_ctx}


class Ollama(HTTPModel[_OllamaCodec]):
    """A model on an Ollama server, through its own API.

    ::

        model = Ollama(model="qwen2.5:7b")                       # http://127.0.0.1:11434
        model = Ollama("http://gpu-box:11434", "llama3.1:8b", num_ctx=16384, keep_alive="30m")

    ``num_ctx`` is the context window sent with every request (unset: the model's own
    length from ``/api/show``, at most ``DEFAULT_NUM_CTX``); ``keep_alive`` how long the
    server keeps the model loaded after a request (``"5m"``, ``"1h"``, ``-1`` forever);
    ``think`` turns a thinking model's thinking on or off (``True``/``False``, or
    ``"low"``/``"medium"``/``"high"`` where the model takes a level); ``options`` any other
    Modelfile parameters (``{"top_k": 20}``). A ``base_url`` ending in ``/v1`` (the
    OpenAI-compatible endpoint's) is taken as the server's root.
    """

    name = NAME

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        model: str = "",
        api_key: str | None = None,
        api_key_env: str | None = None,
        *,
        num_ctx: int | None = None,
        keep_alive: str | int | None = None,
        think: bool | str | None = None,
        options: Mapping[str, Any] | None = None,
        retry: RetryPolicy = RetryPolicy(),
        timeouts: Timeouts = Timeouts(),
        headers: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if num_ctx is not None and num_ctx < 256:
            raise ConfigError(f"{NAME}: num_ctx must be at least 256 tokens, not {num_ctx}")
        codec = _OllamaCodec(model, num_ctx, None if keep_alive is None else str(keep_alive),
                             think, None, dict(options or {}))
        super().__init__(codec, server_root(base_url), model, api_key, api_key_env,
                         retry=retry, timeouts=timeouts, headers=headers, sleep=sleep)
        self._configured = num_ctx
        self._shown: dict[str, Any] | None = None

    # A request's ``seed`` is sent as ``options.seed``.
    takes_seed = True

    @property
    def num_ctx(self) -> int | None:
        """The window every request carries (None until ``/api/show`` was asked, when not
        configured)."""
        return self._codec.num_ctx

    def with_model(self, model: str) -> Self:
        """The same server, key and settings on another model: its own window and what it
        can take are asked of the server again (a configured ``num_ctx`` is kept)."""
        clone = super().with_model(model)
        clone._codec = copy.copy(self._codec)
        clone._codec.model = clone.model
        clone._codec.num_ctx = self._configured
        clone._codec.vision = None
        clone._shown = None
        return clone

    async def show(self) -> dict[str, Any]:
        """What ``POST /api/show`` says of the model (kept once it answered). A model the
        server does not have is a ``NotFoundError`` naming ``ollama pull``; a server that
        cannot be asked answers ``{}`` (the request itself will say what is wrong)."""
        if self._shown is None:
            shown = await self._ask_show()
            if shown is None:
                return {}
            self._shown = shown
        return self._shown

    async def _ask_show(self) -> dict[str, Any] | None:
        client = self._transport.client
        try:
            request = client.build_request("POST", f"{self.base_url}/api/show",
                                           json={"model": self.model},
                                           timeout=ASK_TIMEOUT_SECS)
            response = await client.send(request, stream=True)
            status = response.status_code
            raw = await read_body(response, ASK_MAX_BYTES)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError):
            return None
        if status == 404:
            raise NotFoundError(f"{NAME}: {pull_advice(self.model)}", provider=NAME,
                                status=404, body=raw.decode("utf-8", "replace")[:2000])
        if status != 200:
            return None
        try:
            data = decode_json(raw)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    async def context_window(self) -> int | None:
        """The window requests carry: ``num_ctx`` as configured, else the model's trained
        length (``/api/show``) at most ``DEFAULT_NUM_CTX``, else ``DEFAULT_NUM_CTX``."""
        await self._prepare(need_window=True)
        return self._codec.num_ctx

    async def capabilities(self) -> tuple[str, ...]:
        """What the model can do as ``/api/show`` lists it (``completion``, ``tools``,
        ``vision``, ``thinking``...); () when the server does not say."""
        caps = (await self.show()).get("capabilities")
        return tuple(c for c in caps if isinstance(c, str)) if isinstance(caps, list) else ()

    async def _prepare(self, need_window: bool = True, images: bool = False) -> None:
        """Before a request: the window (unless configured) and, for a request with an
        image, whether the model takes images, asked of ``/api/show`` once. A server that
        cannot be asked leaves them unknown: the request goes without ``num_ctx``."""
        codec = self._codec
        if not ((need_window and codec.num_ctx is None) or (images and codec.vision is None)):
            return
        shown = await self.show()
        if not shown:
            return
        if codec.num_ctx is None:
            trained = trained_length(shown)
            codec.num_ctx = min(trained, DEFAULT_NUM_CTX) if trained else DEFAULT_NUM_CTX
        caps = shown.get("capabilities")
        if codec.vision is None and isinstance(caps, list):
            codec.vision = "vision" in caps

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        # Whether the model takes images is asked once; after /api/show has answered,
        # no request is scanned for images here (the encoder refuses one, as it goes).
        await self._prepare(images=self._shown is None and _has_image(request.messages))
        chunks = cast(AsyncGenerator[StreamChunk, None], super().stream(request))
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()  # now: an abandoned stream hangs up at once


def trained_length(shown: Mapping[str, Any]) -> int | None:
    """The context length ``/api/show`` states in ``model_info`` (``llama.context_length``,
    ``qwen2.context_length``...: the key of the model's architecture first)."""
    info = shown.get("model_info")
    if not isinstance(info, dict):
        return None
    arch = info.get("general.architecture")
    keys = [f"{arch}.context_length"] if isinstance(arch, str) else []
    keys += [k for k in info if isinstance(k, str) and k.endswith(".context_length")]
    for key in keys:
        value = info.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31:
            return value
    return None


def server_root(base_url: str) -> str:
    """Ollama's root: ``base_url`` without a trailing ``/``, ``/v1`` or ``/api``."""
    root = base_url.rstrip("/")
    for suffix in ("/v1", "/api"):
        if root.endswith(suffix):
            root = root[: -len(suffix)]
    return root


async def pulled_models(client: httpx.AsyncClient, base_url: str) -> list[dict[str, Any]]:
    """The models an Ollama server has pulled (``GET /api/tags``), each a dict with at
    least ``name``; raises ``httpx.HTTPError`` when the server cannot be reached and
    ``ValueError`` when it answers something else."""
    response = await client.send(client.build_request(
        "GET", f"{server_root(base_url)}/api/tags", timeout=ASK_TIMEOUT_SECS), stream=True)
    status = response.status_code
    raw = await read_body(response, ASK_MAX_BYTES)
    if status != 200:
        raise ValueError(f"GET /api/tags answered HTTP {status}")
    data = decode_json(raw)
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list):
        raise ValueError("GET /api/tags did not answer a list of models")
    return [m for m in models if isinstance(m, dict) and isinstance(m.get("name"), str)]


# --- the request ------------------------------------------------------------------------


def _has_image(messages: Iterable[Message]) -> bool:
    return any(isinstance(p, Image) for m in messages for p in m.parts)


def _offered(request: ModelRequest) -> Sequence[ToolSpec]:
    choice = request.tool_choice
    if choice == "none":
        return ()
    if isinstance(choice, NamedToolChoice):
        return [t for t in request.tools if t.name == choice.name] or list(request.tools)
    return request.tools


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": spec.name, "description": spec.description, "parameters": spec.schema_json}}


def wire_messages(messages: Iterable[Message], system: str | None = None, *,
                  images_refused: str = "") -> list[dict[str, Any]]:
    """tether's messages as ``/api/chat`` messages: text joined, images as base64 in
    ``images``, each tool result a ``role: "tool"`` message naming its tool, reasoning sent
    back only when it came from this wire. With ``images_refused`` (a message), an image
    raises ``BadRequestError`` with it."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "assistant":
            out.append(_assistant(message))
            continue
        texts: list[str] = []
        images: list[str] = []
        for part in message.parts:
            if isinstance(part, ToolResult):
                out.append({"role": "tool", "content": part.content, "tool_name": part.name})
            elif isinstance(part, Text):
                texts.append(part.text)
            elif isinstance(part, Image):
                if images_refused:
                    raise BadRequestError(images_refused, provider=NAME)
                if part.data is None:
                    raise BadRequestError(f"{NAME}: Ollama takes images as bytes, not a url "
                                          f"({part.url!r}): attach the file", provider=NAME)
                images.append(part.base64())
        if not texts and not images:
            continue
        wire: dict[str, Any] = {"role": "system" if message.role == "system" else "user",
                                "content": "".join(texts)}
        if images:
            wire["images"] = images
        out.append(wire)
    return out


def _assistant(message: Message) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    wire: dict[str, Any] = {"role": "assistant"}
    for part in message.parts:
        if isinstance(part, Text):
            texts.append(part.text)
        elif isinstance(part, ToolCall):
            calls.append({"function": {"name": part.name,
                                       "arguments": _arguments_object(part.arguments)}})
        elif isinstance(part, Reasoning) and part.provider == NAME:
            wire["thinking"] = part.text
    wire["content"] = "".join(texts)
    if calls:
        wire["tool_calls"] = calls
    return wire


def _arguments_object(arguments: str) -> Any:
    """A call's arguments as the object Ollama takes back; text that is no JSON object (a
    model's broken call, already answered with an error) goes back as it was written."""
    try:
        value = loads_bounded(arguments) if arguments.strip() else {}
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


# --- an answer ---------------------------------------------------------------------------


class _OllamaDecoder:
    """An answer, whole or line by line: each object may carry ``message.content``,
    ``message.thinking`` and ``message.tool_calls``; the one with ``done: true`` ends it
    with ``done_reason`` and the counts."""

    __slots__ = ("calls", "done", "done_reason", "model", "seen", "texts", "thoughts",
                 "turn", "usage")

    def __init__(self, turn: int, model: str) -> None:
        self.turn = turn
        self.model = model
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[ToolCall] = []
        self.seen: set[str] = set()
        self.done = False
        self.done_reason: str | None = None
        self.usage: Usage | None = None

    def feed(self, event: str, data: str) -> list[StreamChunk]:
        try:
            item = decode_json(data)
        except ValueError as e:
            raise MalformedResponseError(
                f"{NAME}: a stream line is not JSON ({e}): {data[:200]!r}", provider=NAME
            ) from None
        return self.feed_object(item)

    def feed_object(self, item: Any) -> list[StreamChunk]:
        if not isinstance(item, dict):
            raise MalformedResponseError(
                f"{NAME}: expected a JSON object, got {type(item).__name__}", provider=NAME)
        if item.get("error") is not None:
            raise _stream_error(item, self.model)
        out: list[StreamChunk] = []
        message = item.get("message")
        if message is not None:
            if not isinstance(message, dict):
                raise wrong_type(NAME, "message", message)
            self.message(message, out)
        done = item.get("done")
        if done is True:
            self.done = True
            reason = item.get("done_reason")
            if reason is not None and not isinstance(reason, str):
                raise wrong_type(NAME, "done_reason", reason)
            self.done_reason = reason
            prompt, output = item.get("prompt_eval_count"), item.get("eval_count")
            self.usage = Usage.unreported() if prompt is None and output is None else Usage(
                count(prompt, NAME, "prompt_eval_count"), count(output, NAME, "eval_count"),
                0, 0, 1)
        elif done not in (None, False):
            raise wrong_type(NAME, "done", done)
        return out

    def message(self, message: Mapping[str, Any], out: list[StreamChunk]) -> None:
        thinking = _text(message.get("thinking"), "thinking")
        if thinking:
            self.thoughts.append(thinking)
            out.append(ReasoningChunk(thinking))
        content = _text(message.get("content"), "content")
        if content:
            self.texts.append(content)
            out.append(TextChunk(content))
        raw_calls = message.get("tool_calls")
        if raw_calls is None:
            return
        if not isinstance(raw_calls, list):
            raise wrong_type(NAME, "tool_calls", raw_calls)
        for raw in raw_calls:
            call = self.call(raw)
            out.append(ToolCallChunk(len(self.calls), call.id, call.name, call.arguments))
            self.calls.append(call)

    def call(self, raw: Any) -> ToolCall:
        if not isinstance(raw, dict):
            raise wrong_type(NAME, "a tool call", raw)
        function = raw.get("function")
        if not isinstance(function, dict):
            raise wrong_type(NAME, "a tool call's function", function)
        name = _text(function.get("name"), "a tool call's name")
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(
            {} if arguments is None else arguments, ensure_ascii=False)
        return ToolCall(self.call_id(raw.get("id"), name, text), name, text)

    def call_id(self, raw: Any, name: str, arguments: str) -> str:
        """The server's id when it gives a usable one, else one made from the turn, the
        call's position and its content (the same answer replayed gets the same ids)."""
        call_id = raw.strip() if isinstance(raw, str) else ""
        if not call_id or call_id in self.seen:
            seed = f"{self.turn}|{len(self.calls)}|{name}|{arguments}|{call_id}"
            call_id = "call_" + hashlib.sha1(seed.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        self.seen.add(call_id)
        return call_id

    def reported(self) -> Usage | None:
        return self.usage

    def finish(self) -> ModelResponse:
        if not self.done:
            raise cut_short(NAME, "the stream ended before the model finished (no line with "
                                  "done: true); the answer may be cut off")
        parts: list[Part] = []
        if self.thoughts:
            parts.append(Reasoning("".join(self.thoughts), NAME))
        text = "".join(self.texts)
        if text:
            parts.append(Text(text))
        parts.extend(self.calls)
        return ModelResponse(Message("assistant", tuple(parts)),
                             _stop_reason(self.done_reason, bool(self.calls)),
                             self.usage or Usage.unreported(), model=self.model,
                             raw_stop_reason=self.done_reason)


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise wrong_type(NAME, what, value)
    return value


def _stop_reason(reason: str | None, has_calls: bool) -> StopReason:
    mapped = _STOP_REASONS.get(reason or "stop", "other")
    if mapped == "max_tokens":
        return mapped
    # Ollama says "stop" beside tool calls: the calls decide.
    return "tool_calls" if has_calls else mapped


# --- errors ------------------------------------------------------------------------------


def classify_error(status: int, headers: Mapping[str, str], body: str,
                   model: str = "") -> ProviderError:
    """Ollama's ``{"error": "..."}`` in the shared taxonomy; a model that is not pulled is
    a ``NotFoundError`` that says how to pull it."""
    error = classify_status(status, headers, body, provider=NAME)
    match = _NOT_FOUND.search(error_message(body))
    if status == 404 and match:
        missing = match.group(1) or model
        error = NotFoundError(f"{NAME}: {pull_advice(missing)} (HTTP 404: "
                              f"{error_message(body)})", provider=NAME, status=status,
                              body=body)
    return error


def _stream_error(item: Mapping[str, Any], model: str) -> ProviderError:
    """An ``error`` line inside a 200 answer (it carries no status), as the error its words
    mean: a missing model is a 404's, a busy server a 503's (retried like one before any
    content), anything else a server error."""
    body = json.dumps(item)
    words = error_message(body)
    status = 404 if _NOT_FOUND.search(words) else \
        503 if _BUSY.search(words) else 500
    return classify_error(status, {}, body, model)


__all__ = ["DEFAULT_NUM_CTX", "NAME", "Ollama", "classify_error", "pull_advice",
           "pulled_models", "server_root", "trained_length", "wire_messages"]
