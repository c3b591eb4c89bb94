"""A deterministic model for tests and examples: it plays back a list of replies.

::

    model = Scripted([call("add", a=2, b=3), "The sum is 5."])
    result = await Agent(model, tools=[add]).run("What is 2+3?")
    model.requests[1].messages  # what the agent sent on the second turn

A reply may also be a function of the request (a *compromised* model that obeys whatever
text it was shown is one such function), or an exception to raise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from tether.errors import TetherError
from tether.messages import Message, Part, StopReason, Text, ToolCall, Usage
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
)


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model turn: text and/or tool calls."""

    text: str = ""
    calls: Sequence[ToolCall] = ()
    usage: Usage | None = None
    stop_reason: StopReason | None = None


ReplyLike: TypeAlias = "str | Reply | Message | BaseException | Callable[[ModelRequest], ReplyLike]"


def call(name: str, arguments: dict[str, Any] | str | None = None, /, *, id: str | None = None,
         text: str = "", **kwargs: Any) -> Reply:
    """A reply that calls one tool. ``arguments`` may be raw text (to script malformed JSON)."""
    return calls((name, arguments if arguments is not None else kwargs, id), text=text)


def calls(*items: tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str | None],
          text: str = "") -> Reply:
    """A reply that calls several tools in one turn: ``calls(("a", {...}), ("b", {...}))``."""
    out = []
    for n, item in enumerate(items):
        name, args = item[0], item[1]
        call_id = item[2] if len(item) > 2 and item[2] else f"call_{n}"
        raw = args if isinstance(args, str) else json.dumps(args)
        out.append(ToolCall(str(call_id), name, raw))
    return Reply(text=text, calls=tuple(out))


class ScriptExhausted(TetherError):
    """The scripted model was asked for more turns than it was given."""


@dataclass
class Scripted:
    """Plays back ``replies`` in order; records every request in ``requests``."""

    replies: Iterable[Any] = ()
    model: str = "scripted"
    name: str = "scripted"
    chunk_size: int = 8
    requests: list[ModelRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: list[Any] = list(self.replies)
        self._served = 0

    def add(self, *replies: Any) -> None:
        self._queue.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self._queue) - self._served

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        if self._served >= len(self._queue):
            raise ScriptExhausted(
                f"scripted model: asked for turn {self._served + 1} but only "
                f"{len(self._queue)} replies were scripted"
            )
        item = self._queue[self._served]
        self._served += 1
        reply = _resolve(item, request)
        message = _message(reply)
        if request.stream:
            text = message.text
            for i in range(0, len(text), self.chunk_size):
                yield TextChunk(text[i:i + self.chunk_size])
            for index, tc in enumerate(message.tool_calls):
                half = len(tc.arguments) // 2
                yield ToolCallChunk(index, tc.id, tc.name, tc.arguments[:half])
                yield ToolCallChunk(index, None, None, tc.arguments[half:])
        stop: StopReason = "tool_calls" if message.tool_calls else "end_turn"
        usage = Usage(_estimate_tokens(request), max(1, len(message.text) // 4), requests=1)
        if isinstance(reply, Reply):
            stop = reply.stop_reason or stop
            usage = reply.usage or usage
        yield Completed(ModelResponse(message, stop, usage, model=self.model))

    async def aclose(self) -> None:
        return None

    # --- assertions ---------------------------------------------------------------------

    def last_request(self) -> ModelRequest:
        assert self.requests, "the scripted model was never called"
        return self.requests[-1]

    def tool_names_offered(self, turn: int = -1) -> list[str]:
        return [t.name for t in self.requests[turn].tools]


def _resolve(item: Any, request: ModelRequest) -> Reply | Message:
    for _ in range(8):  # a function may return another function; do not loop for ever
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, type) and issubclass(item, BaseException):
            raise item()
        if isinstance(item, str):
            return Reply(text=item)
        if isinstance(item, Reply | Message):
            return item
        if callable(item):
            item = item(request)
            continue
        break
    raise TypeError(f"scripted model: cannot play back {item!r}")


def _message(reply: Reply | Message) -> Message:
    if isinstance(reply, Message):
        return reply
    parts: list[Part] = []
    if reply.text:
        parts.append(Text(reply.text))
    parts.extend(reply.calls)
    return Message("assistant", tuple(parts))


def _estimate_tokens(request: ModelRequest) -> int:
    chars = len(request.system or "")
    for message in request.messages:
        for part in message.parts:
            chars += len(getattr(part, "text", "") or getattr(part, "content", "") or "")
    return max(1, chars // 4)
