"""A provider that hands a request to the next one when it cannot answer.

``fallback = ["name", ...]`` on a provider in tether.toml builds one: the provider first,
then each named one in order. A request goes to the next only when the one before failed
in a way another server may not (``falls_back``): it could not be reached, it was
overloaded, it timed out, or it answered a server error, each after its own retries, and
before any of its answer went out (a retry would repeat what was shown). Everything else
(a bad key, a bad request, a context overflow, a rate limit) is the request's or the
account's and is raised as it is.

Each hand-over is a ``Retrying`` chunk naming the provider that answers next
(``fallback``): the run shows it as a ``ProviderRetry`` event, counts what the failed
attempt spent, and the command line says which provider answered in its usage line.

Only the providers the list names are tried, never theirs in turn: a hosted provider is
reached from a local one only when the local one's own list names it (``tether doctor``
warns about such a list; docs/providers.md).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any, cast

from tether.errors import (
    ModelOutputParseError,
    OverloadedError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    ServerError,
)
from tether.providers.base import Provider, Retrying, StreamChunk, SwitchesModel, attempt_usage


def falls_back(error: ProviderError) -> bool:
    """Whether another provider may answer where this one failed with ``error``: no
    connection, an overload, a timeout, a server error (not the model's unreadable
    output, which another server of the same model would write too)."""
    if isinstance(error, ModelOutputParseError):
        return False
    return isinstance(error, ProviderConnectionError | OverloadedError | ProviderTimeout
                      | ServerError)


class Fallback:
    """``chain``'s first provider, then the others in order when it cannot answer.

    ``chain`` is ``(name, provider)`` pairs, the names as configured (what the events and
    the usage line say). ``name`` and ``model`` are the first provider's: the wire its
    conversation's reasoning is replayed to, the model the run names. The window
    (``context_window``) and the tokenizer (``count_tokens``) are the first provider's
    too: a fallback with a smaller window may refuse what the first one took (its overflow
    is then the run's error).
    """

    def __init__(self, chain: Sequence[tuple[str, Provider]]) -> None:
        if len(chain) < 2:
            raise ValueError("a fallback chain needs a provider and at least one fallback")
        self.chain = tuple(chain)
        first = chain[0][1]
        self.name = first.name
        self.model = first.model

    def __repr__(self) -> str:
        return f"Fallback({', '.join(f'{n}={p!r}' for n, p in self.chain)})"

    def with_model(self, model: str) -> Fallback:
        """The first provider on another model (a sub-agent's ``model``), the fallbacks as
        they are."""
        first_name, first = self.chain[0]
        if not isinstance(first, SwitchesModel):
            raise TypeError(f"provider {first_name!r} cannot switch models")
        return Fallback(((first_name, first.with_model(model)), *self.chain[1:]))

    async def context_window(self) -> int | None:
        ask = getattr(self.chain[0][1], "context_window", None)
        window = await ask() if callable(ask) else None
        return window if isinstance(window, int) else None

    async def count_tokens(self, text: str) -> int | None:
        count = getattr(self.chain[0][1], "count_tokens", None)
        counted = await count(text) if callable(count) else None
        return counted if isinstance(counted, int) else None

    async def stream(self, request: Any) -> AsyncIterator[StreamChunk]:
        last = len(self.chain) - 1
        for index, (name, provider) in enumerate(self.chain):
            chunks = cast(AsyncGenerator[StreamChunk, None], provider.stream(request))
            content = False
            try:
                async for chunk in chunks:
                    content = content or not isinstance(chunk, Retrying)
                    yield chunk
                return
            except ProviderError as error:
                if content or index == last or not falls_back(error):
                    raise
                following = self.chain[index + 1][0]
                notice = Retrying(0, 0.0, f"provider {name!r} failed ({error}); "
                                          f"{following!r} answers instead",
                                  usage=attempt_usage(error), fallback=following)
            finally:
                await chunks.aclose()  # now: an abandoned request hangs up at once
            yield notice

    async def aclose(self) -> None:
        for _, provider in self.chain:
            await provider.aclose()


__all__ = ["Fallback", "falls_back"]
