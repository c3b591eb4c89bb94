"""The one HTTP model class every wire shares, and what a wire plugs into it.

A wire is a ``WireCodec``: where a request goes, the body it sends, how a whole answer
reads, how an error status is named, and a ``StreamDecoder`` for each streamed answer
(fed one server-sent event at a time, or one line of a newline-delimited JSON stream,
one method per kind of event). ``HTTPModel`` does
everything else once for all of them:

- ``base_url`` without its trailing ``/``; the model name checked by the wire;
- the API key: ``api_key``, else the variable ``api_key_env`` names (a ``ConfigError``
  when it is not set), sent the wire's way; ``headers`` are added last (a gateway's key
  may replace it);
- the transport (``HTTPTransport``: one client per event loop) and one way of retrying:
  ``retry_before_first_chunk`` over ``HTTPTransport.attempt`` (an error status and an error
  inside a 200 retried alike, spending the request's ``RetryBudget``); every attempt's
  chunks pass ``boundary.checked``;
- a stream asked for and answered whole is read as the whole answer; a stream is read up
  to its wire's terminal event, then to the end of the body (so the connection goes back
  to the pool), and closed whatever happens (abandoning a stream hangs up);
- ``with_model`` (a copy sharing the HTTP client), ``aclose``, ``request_body``;
- a ``__repr__`` without the key, and the key taken out of every error and retry notice
  (a server may quote it back).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from tether.errors import ProviderError
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    Retrying,
    StreamChunk,
)
from tether.providers.boundary import checked, checked_whole
from tether.providers.http.bodies import load_json, read_whole
from tether.providers.http.decoders import read_stream_errors, stream_framing
from tether.providers.http.retry import (
    RetryBudget,
    RetryPolicy,
    RetryRules,
    Sleep,
    retry_before_first_chunk,
)
from tether.providers.http.transport import HTTPTransport, Timeouts, resolve_api_key

# How long to wait for the end of a body after the terminal event (it normally comes in
# the same read).
DRAIN_SECS = 1.0

# Shorter strings are not hidden from error messages: a test key like "k" would otherwise
# take letters out of every word.
_MIN_SECRET = 6

# Header names whose values are credentials (a gateway's key passed in ``headers``).
_CREDENTIAL_WORDS = ("authorization", "key", "token", "secret")


class StreamDecoder(Protocol):
    """One streamed answer, read event by event.

    ``feed`` takes one server-sent event (its ``event:`` name, "" when unnamed, and its
    ``data``) and returns the chunks it adds, raising the wire's typed error for an error
    event. ``done`` turns true at the wire's terminal event: nothing after it is read.
    ``finish`` is the whole answer once the events ended (``cut_short`` when they ended
    before the wire says an answer is complete). A decoder may also have ``reported()``:
    the usage the events so far reported (None: none), counted when the answer fails.
    """

    done: bool

    def feed(self, event: str, data: str) -> Iterable[StreamChunk]: ...

    def finish(self) -> ModelResponse: ...


class WireCodec(ABC):
    """What one wire protocol says, without any I/O: ``HTTPModel`` sends and reads.

    ``name`` is the wire's (``Provider.name``). The defaults suit a wire without quirks:
    no headers of its own, any model name, the same body on every attempt (no
    ``retry_rules``).
    """

    name: ClassVar[str]

    def model_name(self, model: str, base_url: str) -> str:
        """``model`` as this wire names it (a ``ConfigError`` when it cannot be used)."""
        return model

    def headers(self) -> dict[str, str]:
        """The headers every request carries."""
        return {}

    @abstractmethod
    def auth(self, key: str) -> dict[str, str]:
        """The headers that carry the API key."""

    @abstractmethod
    def endpoint(self, model: str, stream: bool) -> tuple[str, Mapping[str, str] | None]:
        """The path under ``base_url`` and the query parameters of a request."""

    @abstractmethod
    def request_body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        """The JSON body sent for ``request``."""

    @property
    def retry_rules(self) -> RetryRules:
        """What this wire's requests do beyond the retry policy when an attempt fails: its
        server's quirks, declared as one frozen value (read by ``RetryBudget`` alone)."""
        return _NO_QUIRKS

    @abstractmethod
    def completion(self, data: Any, request: ModelRequest, model: str) -> ModelResponse:
        """A whole answer (its JSON already parsed)."""

    @abstractmethod
    def decoder(self, request: ModelRequest, model: str) -> StreamDecoder:
        """A decoder for one streamed answer."""

    @abstractmethod
    def classify(self, status: int, headers: Mapping[str, str], body: str) -> ProviderError:
        """The typed error for an HTTP error status."""

    def settings(self) -> dict[str, Any]:
        """What ``__repr__`` shows beside ``base_url`` and ``model`` (never a key)."""
        return {}


_NO_QUIRKS = RetryRules()

Codec = TypeVar("Codec", bound=WireCodec)


class HTTPModel(Generic[Codec]):
    """A model behind one wire protocol over HTTP: the shell the four adapters share.

    The adapters (``OpenAIChat``, ``OpenAIResponses``, ``Anthropic``, ``Gemini``, ``Ollama``) are
    subclasses that build their wire's codec; ``sleep`` is what retries wait with (tests
    pass a recorder).
    """

    name: str

    def __init__(
        self,
        codec: Codec,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_env: str | None = None,
        *,
        retry: RetryPolicy = RetryPolicy(),
        timeouts: Timeouts = Timeouts(),
        headers: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._codec = codec
        self.base_url = base_url.rstrip("/")
        self.model = codec.model_name(model, base_url)
        key = resolve_api_key(api_key, api_key_env, codec.name)
        wire_headers = codec.headers()
        if key:
            wire_headers.update(codec.auth(key))
        wire_headers.update(headers or {})
        self._secrets = _secrets(key, headers or {})
        # The optional fields this server refused (``RetryRules.optional_fields``): left out
        # of every later request to it (a copy by ``with_model`` shares them: one server).
        self._refused: set[str] = set()
        self._transport = HTTPTransport(
            base_url=self.base_url, headers=wire_headers, provider=codec.name,
            classify=codec.classify, retry=retry, timeouts=timeouts, sleep=sleep,
        )

    def __repr__(self) -> str:
        fields = {"base_url": self.base_url, "model": self.model, **self._codec.settings()}
        shown = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        return self._hide(f"{type(self).__name__}({shown})")

    def with_model(self, model: str) -> Self:
        """The same endpoint, key and settings with another model. The copy shares the HTTP
        client, so a sub-agent on another model opens no connection pool of its own
        (closing either closes it; the next request opens a new one)."""
        clone = copy.copy(self)
        clone.model = self._codec.model_name(model, self.base_url)
        return clone

    async def aclose(self) -> None:
        await self._transport.aclose()

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request`` (public for tests and debugging)."""
        body = self._codec.request_body(request, self.model)
        for refused in self._refused:
            body.pop(refused, None)
        return body

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Send ``request``; yield text, reasoning and tool-call deltas as they arrive (when
        ``request.stream``), retry notices, and finally ``Completed``.

        A retryable error before any content is retried, whether it came as an HTTP status
        or inside a 200 (an error event before the first delta, an error object in a 200
        body, a stream cut short): see ``retry_before_first_chunk``. An optional field the
        server refused is left out of this adapter's later requests (``RetryBudget``
        adds it to ``_refused`` as it drops it).
        """
        budget = self._transport.budget(self.request_body(request), self._codec.retry_rules,
                                        dropped=self._refused)
        name = self.name
        # A stream's chunks pass ``checked``; a whole answer is checked as it is read.
        attempts = retry_before_first_chunk(
            (lambda: checked(self._attempt(request, budget), name, True)) if request.stream
            else (lambda: self._attempt(request, budget)),
            budget, self._transport.sleep)
        # Without a credential to hide, the attempts are the stream itself: a layer that
        # only passed them on would cost every chunk, and every wait of the exchange, a step.
        return self._hiding(attempts) if self._secrets else attempts

    async def _hiding(self, attempts: AsyncGenerator[StreamChunk, None],
                      ) -> AsyncIterator[StreamChunk]:
        """``attempts`` with this adapter's credentials hidden in retry notices and errors."""
        try:
            async for chunk in attempts:
                if type(chunk) is Retrying:
                    chunk = replace(chunk, error=self._hide(chunk.error))
                yield chunk
        except BaseException as error:
            # Left early (a caller that abandons the stream: a cancelled run): the attempt
            # is closed now, so the connection is hung up now, not when a finalizer finds
            # it, and the server stops generating (a llama-server with one slot would
            # otherwise write the whole answer to nobody).
            await attempts.aclose()
            if isinstance(error, ProviderError):
                _hide_in(error, self._hide)
            raise

    async def _attempt(
        self, request: ModelRequest, budget: RetryBudget
    ) -> AsyncGenerator[StreamChunk, None]:
        codec = self._codec
        path, params = codec.endpoint(self.model, request.stream)
        # One POST: an error status is raised to ``retry_before_first_chunk``, which retries
        # it as it retries an error inside a 200.
        response = await self._transport.attempt(path, budget.body, stream=request.stream,
                                                 params=params, budget=budget)
        if not request.stream:
            # The body as text: UTF-8, invalid bytes replaced, as httpx's ``text`` would
            # give (``_post`` sets that encoding) without its decoder's set-up.
            text = response.content.decode("utf-8", "replace")
            yield checked_whole(
                lambda: codec.completion(load_json(text, codec.name), request, self.model),
                self.name)
            return
        try:
            framing = stream_framing(response.headers.get("content-type", ""))
            if framing is None:
                # Asked to stream, answered whole (some proxies, gateways and servers do).
                whole = await read_whole(response, codec.name)
                yield Completed(codec.completion(load_json(whole.text, codec.name),
                                                 request, self.model))
                return
            decoder = codec.decoder(request, self.model)
            events = read_stream_errors(response, codec.name, self._transport.timeouts.read,
                                        framing)
            try:
                async for event, data in events:
                    for chunk in decoder.feed(event, data):
                        yield chunk
                    if decoder.done:
                        await _drain(events)
                        break
                yield Completed(decoder.finish())
            except ProviderError as error:
                # The tokens the server reported before the answer failed are still spent.
                reported = getattr(decoder, "reported", None)
                if error.usage is None and reported is not None:
                    with contextlib.suppress(ProviderError):  # a count that is not one
                        error.usage = reported()
                raise
        finally:
            await response.aclose()

    def _hide(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


async def _drain(events: AsyncIterator[Any]) -> None:
    """Read to the end of the body after the terminal event: a connection closed with
    unread bytes is reset, a fully read one goes back to the pool for the next turn."""
    try:
        async with asyncio.timeout(DRAIN_SECS):
            async for _ in events:
                pass
    except (TimeoutError, ProviderError):
        pass  # the answer is complete; a server that keeps talking only costs its connection


def _secrets(key: str | None, headers: Mapping[str, str]) -> tuple[str, ...]:
    """The key and the credentials among ``headers``, longest first (so a key inside a
    longer credential does not leave the rest of it behind)."""
    found = {key} if key else set()
    for name, value in headers.items():
        if any(word in name.lower() for word in _CREDENTIAL_WORDS):
            found.add(value)
            found.add(value.rsplit(" ", 1)[-1])  # the token of "Bearer <token>"
    return tuple(sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True))


def _hide_in(error: ProviderError, hide: Callable[[str], str]) -> None:
    error.message = hide(error.message)
    error.args = tuple(hide(a) if isinstance(a, str) else a for a in error.args)
    if error.body is not None:
        error.body = hide(error.body)
