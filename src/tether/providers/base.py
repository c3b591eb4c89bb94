"""What every provider adapter speaks to the agent loop, whatever its wire protocol.

A provider turns a ``ModelRequest`` into a stream of ``StreamChunk``s that ends with one
``Completed`` carrying the whole assistant message. Non-streaming requests yield the same
``Completed`` (and nothing before it), so the loop has one code path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from tether.errors import (
    BadRequestError,
    MalformedResponseError,
    ModelOutputParseError,
    OverloadedError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
)
from tether.messages import Message, StopReason, Usage
from tether.tools.spec import ToolSpec


@dataclass(frozen=True, slots=True)
class NamedToolChoice:
    """Ask the model to call this one tool."""

    name: str


ToolChoice: TypeAlias = Literal["auto", "none", "required"] | NamedToolChoice


@dataclass(frozen=True, slots=True)
class ModelRequest:
    messages: Sequence[Message]
    system: str | None = None
    tools: Sequence[ToolSpec] = ()
    tool_choice: ToolChoice = "auto"
    max_output_tokens: int | None = None
    temperature: float | None = None
    stream: bool = False
    # Sampling's seed, sent where the wire takes one (a provider's ``takes_seed``).
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class ModelResponse:
    message: Message
    stop_reason: StopReason
    usage: Usage
    model: str = ""
    id: str | None = None
    raw_stop_reason: str | None = None


@dataclass(frozen=True, slots=True)
class TextChunk:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningChunk:
    text: str
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    """A piece of a streamed tool call: the first carries id and name, later ones append
    argument text."""

    index: int
    id: str | None
    name: str | None
    arguments_delta: str
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class Retrying:
    """The adapter is waiting before retrying a failed request.

    ``usage`` is what the failed attempt spent, as far as anyone knows (``attempt_usage``):
    nothing when the server refused it before any work, the tokens the server reported
    before it failed, or else one request whose tokens are unknown."""

    attempt: int
    wait_secs: float
    error: str
    kind: Literal["retrying"] = "retrying"
    usage: Usage = field(default_factory=Usage)
    # The provider the request goes to instead (``providers.fallback``), None: the same.
    fallback: str | None = None
    # Why, in a few words of tether's own ("HTTP 503", "unparsable model output"): a line
    # saying a request is sent again says why without quoting the server twice.
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Completed:
    response: ModelResponse
    kind: Literal["completed"] = "completed"


StreamChunk: TypeAlias = TextChunk | ReasoningChunk | ToolCallChunk | Retrying | Completed


@runtime_checkable
class Provider(Protocol):
    """A model behind one wire protocol.

    ``name`` identifies the wire (``openai-chat``, ``anthropic``...): provider-specific
    message parts (reasoning, signatures) are replayed only to a provider of the same name.
    """

    name: str
    model: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SwitchesModel(Protocol):
    """A provider that can make a copy of itself on another model, sharing its transport
    (``with_model``): a sub-agent profile's ``model`` needs one."""

    def with_model(self, model: str) -> Provider: ...


def attempt_usage(error: ProviderError) -> Usage:
    """What the failed attempt that raised ``error`` spent, as far as anyone knows.

    The tokens the server reported before it failed (``error.usage``); nothing when the
    server refused it before any work (a 4xx status, 429 included; an overload, 503 or 529)
    or no connection was made; otherwise one request whose tokens are unknown: a timeout,
    a broken or cut stream, a server error, a model output the server could not read all
    came after the server may have read the prompt and written tokens it never reported.
    """
    if error.usage is not None:
        return error.usage
    if isinstance(error, OverloadedError | BadRequestError) or (
            error.status is not None and 400 <= error.status < 500):
        # A BadRequestError without a status was refused here, before it was sent (an
        # image for a server that takes none): no request, nothing spent.
        return Usage()
    return Usage.unreported()


def retry_reason(error: ProviderError) -> str:
    """Why a request is sent again, in a few words of tether's own (the server's message is
    the run's error, shown once if it fails)."""
    if isinstance(error, ModelOutputParseError):
        return "the server could not parse the model's output"
    if isinstance(error, ProviderConnectionError):
        return "no connection"
    if isinstance(error, ProviderTimeout):
        return "no answer in time"
    if isinstance(error, MalformedResponseError):
        return "an answer tether could not read"
    if error.status is not None:
        return f"HTTP {error.status}"
    return type(error).__name__


async def complete(provider: Provider, request: ModelRequest) -> ModelResponse:
    """Run one request to the end and return the response (for callers that want no deltas)."""
    chunks = provider.stream(request)
    try:
        async for chunk in chunks:
            if isinstance(chunk, Completed):
                return chunk.response
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:  # now, not when a finalizer finds it: it holds a connection
            await close()
    raise MalformedResponseError(
        f"{provider.name}: the response ended without completing", provider=provider.name
    )
