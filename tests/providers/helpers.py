"""Helpers every provider test needs: a sleep that records instead of waiting, a one-line
request, the chunks of a stream (their text, the ``Completed`` they end with), and an
address nobody listens on."""

from __future__ import annotations

import socket
from collections.abc import Sequence

from tether.messages import Message
from tether.providers.base import Completed, ModelRequest, Provider, StreamChunk, TextChunk


class FakeSleep:
    """Records the waits the retry policy asked for; never waits (retries are decided by
    the policy, not by the clock)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def ask(text: str = "Hi", *, stream: bool = False, **kw: object) -> ModelRequest:
    """A one-message request."""
    return ModelRequest(messages=(Message.user(text),), stream=stream, **kw)  # type: ignore[arg-type]


async def collect(provider: Provider, request: ModelRequest) -> list[StreamChunk]:
    """Every chunk of one request, ``Completed`` last."""
    return [chunk async for chunk in provider.stream(request)]


def final(chunks: Sequence[StreamChunk]) -> Completed:
    """The ``Completed`` a stream ends with."""
    last = chunks[-1]
    assert isinstance(last, Completed), chunks
    return last


def texts(chunks: Sequence[StreamChunk]) -> str:
    """The text deltas of a stream, joined."""
    return "".join(c.text for c in chunks if isinstance(c, TextChunk))


def unreachable_url() -> str:
    """``http://127.0.0.1:PORT`` for a port nobody listens on (bound, then closed)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{free.getsockname()[1]}"
