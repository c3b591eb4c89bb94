"""Where a provider's answer becomes tether's data. Every HTTP adapter's chunks pass here.

Everything a server sends is hostile input, so at this boundary:

- An exception that bad input can cause while it is decoded (a field of the wrong JSON
  type: ``TypeError``, ``KeyError``, ``AttributeError``, ``IndexError``; a value out of
  range: ``ValueError``, ``OverflowError``; nesting: ``RecursionError``) becomes a
  ``MalformedResponseError`` naming the provider and what it was reading; an httpx error
  (reading a body the adapter asked for whole) becomes the transport's typed error.
- Text is repaired: a surrogate pair split across two deltas is joined, a lone surrogate
  becomes U+FFFD, so nothing that enters a ``Message`` fails to encode later (the next
  request, the session store, a terminal).
- What comes out has the types tether's data says: each chunk's fields, and the finished
  ``ModelResponse`` (message parts, usage counts, stop reason). A field that slipped past an
  adapter with the wrong type is an error here, not a ``TypeError`` somewhere later.

The explicit checks in the adapters name the field; this is the net under them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import fields, replace
from typing import Any, get_args

import httpx

from tether.errors import MalformedResponseError
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
    ModelResponse,
    ReasoningChunk,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
)
from tether.providers.http.errors import transport_error, wrong_type
from tether.textrepair import SurrogateJoiner, repair, repair_json

# What bad input can raise from plain-dict decoding code. Not a broad ``Exception``: a bug
# of another kind (and a ProviderError the adapter raised on purpose) passes as it is.
DECODING_ERRORS = (TypeError, LookupError, AttributeError, ValueError, ArithmeticError,
                   RecursionError)

_STOP_REASONS = frozenset(get_args(StopReason))
_USAGE_COUNTS = tuple(f.name for f in fields(Usage) if f.name != "details")
# The counts that are None (unknown) in the usage of an answer that reported none.
_UNKNOWABLE = ("input_tokens", "output_tokens")


async def checked(
    chunks: AsyncGenerator[StreamChunk, None], provider: str, streamed: bool
) -> AsyncGenerator[StreamChunk, None]:
    """``chunks`` of one attempt, with decoding failures typed, text repaired and types
    checked (see the module docstring). ``streamed`` says whether a stream was asked for
    (it names what was being read in an error)."""
    joiner = SurrogateJoiner()
    try:
        async for chunk in chunks:
            if isinstance(chunk, TextChunk | ReasoningChunk):
                text = chunk.text
                if type(text) is not str:
                    raise wrong_type(provider, f"a streamed {chunk.kind} delta", text)
                if joiner.held or not text.isascii():
                    text = joiner.feed(chunk.kind, text)
                    if not text:
                        continue  # half a character, held for the next delta
                    chunk = replace(chunk, text=text)
            elif isinstance(chunk, ToolCallChunk):
                call = _tool_call_chunk(chunk, provider, joiner)
                if call is None:
                    continue
                chunk = call
            elif isinstance(chunk, Completed):
                for key, tail in joiner.flush():
                    yield _tail_chunk(key, tail)
                chunk = Completed(checked_response(chunk.response, provider))
            yield chunk
    except DECODING_ERRORS as e:
        what = "the streamed answer" if streamed else "the answer"
        raise _malformed(provider, what, e) from None
    except httpx.HTTPError as e:
        raise transport_error(e, provider, "while reading the answer") from None
    finally:
        await chunks.aclose()


def checked_whole(read: Callable[[], ModelResponse], provider: str) -> Completed:
    """A whole answer (not streamed: its body read already), as ``checked`` gives a
    stream's ``Completed``: ``read()`` decodes it, its decoding failures typed, its fields
    checked and its strings repaired (``checked_response``). No generator around it: a
    layer that passed the one chunk on would cost every wait of the exchange a step."""
    try:
        return Completed(checked_response(read(), provider))
    except DECODING_ERRORS as e:
        raise _malformed(provider, "the answer", e) from None


def _malformed(provider: str, what: str, error: BaseException) -> MalformedResponseError:
    return MalformedResponseError(
        f"{provider}: {what} does not follow the wire format ({type(error).__name__}: "
        f"{str(error)[:200]})", provider=provider)


def _tool_call_chunk(
    chunk: ToolCallChunk, provider: str, joiner: SurrogateJoiner
) -> ToolCallChunk | None:
    if type(chunk.index) is not int:
        raise wrong_type(provider, "a tool call's index", chunk.index)
    for field in ("id", "name"):
        value = getattr(chunk, field)
        if value is not None and type(value) is not str:
            raise wrong_type(provider, f"a tool call's {field}", value)
    delta = chunk.arguments_delta
    if type(delta) is not str:
        raise wrong_type(provider, "a tool call's arguments", delta)
    key = ("tool_call", chunk.index)
    if joiner.held or not delta.isascii():
        delta = joiner.feed(key, delta)
    call_id = None if chunk.id is None else repair(chunk.id)
    name = None if chunk.name is None else repair(chunk.name)
    if (call_id, name, delta) == (chunk.id, chunk.name, chunk.arguments_delta):
        return chunk
    if not delta and call_id is None and name is None:
        return None  # only half a character, held
    return ToolCallChunk(chunk.index, call_id, name, delta)


def _tail_chunk(key: Any, tail: str) -> StreamChunk:
    if key == "text":
        return TextChunk(tail)
    if key == "reasoning":
        return ReasoningChunk(tail)
    return ToolCallChunk(key[1], None, None, tail)


def checked_response(response: ModelResponse, provider: str) -> ModelResponse:
    """``response`` with every field of the type tether's data says (else a
    ``MalformedResponseError``) and every string repaired; ``response`` itself when it
    needed nothing."""
    message = response.message
    parts = tuple(_checked_part(p, provider) for p in message.parts)
    usage = response.usage
    for name in _USAGE_COUNTS:
        count = getattr(usage, name)
        if (type(count) is not int or count < 0) and not (
                count is None and name in _UNKNOWABLE and usage.unreported_requests):
            raise wrong_type(provider, f"the usage's {name}", count)
    if not isinstance(usage.details, dict) or not all(
            type(v) is int and v >= 0 for v in usage.details.values()):
        raise wrong_type(provider, "the usage details", usage.details)
    if response.stop_reason not in _STOP_REASONS:
        raise wrong_type(provider, "the stop reason", response.stop_reason)
    model = _text(response.model, provider, "the model name")
    response_id = _optional(response.id, provider, "the response id")
    raw_stop = _optional(response.raw_stop_reason, provider, "the stop reason")
    if (all(a is b for a, b in zip(parts, message.parts, strict=True))
            and (model, response_id, raw_stop)
            == (response.model, response.id, response.raw_stop_reason)):
        return response
    return replace(response, message=Message(message.role, parts), model=model,
                   id=response_id, raw_stop_reason=raw_stop)


def _text(value: Any, provider: str, what: str) -> str:
    if type(value) is not str:
        raise wrong_type(provider, what, value)
    return repair(value)


def _optional(value: Any, provider: str, what: str) -> str | None:
    return None if value is None else _text(value, provider, what)


def _data(value: Any, provider: str, what: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise wrong_type(provider, what, value)
    fixed: dict[str, Any] = repair_json(value)
    return fixed


def _checked_part(part: Part, provider: str) -> Part:
    checked: Part
    if isinstance(part, Text):
        text = _text(part.text, provider, "a text part")
        return part if text is part.text else Text(text)
    if isinstance(part, ToolCall):
        call_id = _text(part.id, provider, "a tool call's id")
        name = _text(part.name, provider, "a tool call's name")
        arguments = _text(part.arguments, provider, "a tool call's arguments")
        data = _data(part.provider_data, provider, "a tool call's provider data")
        if (call_id is part.id and name is part.name and arguments is part.arguments
                and data is part.provider_data):
            return part  # the common case, decided without a new part
        checked = ToolCall(call_id, name, arguments, data)
    elif isinstance(part, Reasoning):
        checked = Reasoning(_text(part.text, provider, "a reasoning part"), part.provider,
                            _optional(part.signature, provider, "a reasoning signature"),
                            _optional(part.redacted, provider, "redacted reasoning"),
                            _data(part.provider_data, provider, "reasoning provider data"))
    elif isinstance(part, Image):
        if part.data is not None and not isinstance(part.data, bytes):
            raise wrong_type(provider, "an image's data", part.data)
        checked = Image(_text(part.media_type, provider, "an image's media type"), part.data,
                        _optional(part.url, provider, "an image's url"))
    elif isinstance(part, ToolResult):
        raise MalformedResponseError(f"{provider}: the answer carries a tool result",
                                     provider=provider)
    else:
        raise MalformedResponseError(f"{provider}: the answer carries an unknown part "
                                     f"{type(part).__name__}", provider=provider)
    # The same objects throughout: nothing was repaired, keep the part the adapter made.
    same = all(getattr(checked, f.name) is getattr(part, f.name) for f in fields(part))
    return part if same else checked
