"""The HTTP transport every adapter shares: an httpx client per event loop, a JSON POST
retried (by the request's ``RetryBudget``) before its response starts, and how long a
request may take.

httpx errors never leave this module untyped (``errors.transport_error``); a body is read
as UTF-8 whatever charset a server names (JSON is UTF-8), with invalid bytes replaced, and
at most ``bodies.MAX_RESPONSE_BYTES`` of it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from tether.errors import (
    ConfigError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
)
from tether.messages import Usage
from tether.providers.base import Retrying, attempt_usage, retry_reason
from tether.providers.http.bodies import read_whole
from tether.providers.http.errors import transport_error
from tether.providers.http.retry import RetryBudget, RetryPolicy, RetryRules, Sleep
from tether.textrepair import repair


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a request may take, in seconds.

    - ``connect``: to open the connection;
    - ``read``: a streamed request's silence, until its response starts and then between two
      reads of it (``stream_idle_timeout_secs`` in tether.toml);
    - ``total``: a whole (non-streamed) request, from sending it to the end of its answer
      (``timeout_secs``). A server sends nothing until it has written the whole answer, so
      no read timeout applies to it: only this one.
    """

    connect: float = 10.0
    read: float = 120.0
    total: float = 600.0


def resolve_api_key(api_key: str | None, api_key_env: str | None, provider: str) -> str | None:
    if api_key is not None:
        return api_key
    if api_key_env:
        value = os.environ.get(api_key_env)
        if value is None:
            raise ConfigError(
                f"provider {provider} needs an API key: the environment variable "
                f"{api_key_env} (api_key_env) is not set; export it, or pass api_key=..., or "
                f"name another variable with api_key_env=..."
            )
        return value
    return None


class HTTPTransport:
    """An httpx client with tether's retry policy. Created lazily, closed by ``aclose``.

    A client belongs to the event loop it was made on (its connections are that loop's
    sockets). A request on another loop (a second ``asyncio.run``, ``run_sync`` twice)
    gets a new client; the old one is dropped without awaiting anything on its loop,
    which has ended or is not ours to use. A client passed in is the caller's to manage
    and is never replaced.
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: Mapping[str, str],
        provider: str,
        classify: Callable[[int, Mapping[str, str], str], ProviderError],
        retry: RetryPolicy = RetryPolicy(),
        timeouts: Timeouts = Timeouts(),
        sleep: Sleep = asyncio.sleep,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers)
        self.provider = provider
        self.classify = classify
        self.retry = retry
        self.timeouts = timeouts
        self.sleep = sleep
        self._client = client
        self._owned = client is None
        # The loop self._client was made on (None: not made yet, or passed in).
        self._loop: asyncio.AbstractEventLoop | None = None
        # Each URL requested, parsed: httpx parsing a URL string took half the time of
        # building the rest of a request.
        self._urls: dict[str, httpx.URL] = {}
        # A whole answer's reads wait as long as the request may take (the client's own
        # read timeout is the stream's idle timeout).
        self._whole = httpx.Timeout(timeouts.total, connect=timeouts.connect)

    @property
    def client(self) -> httpx.AsyncClient:
        """The client for the running event loop (made on first use on each loop)."""
        loop = _running_loop()
        if self._client is None or (self._owned and self._loop is not loop):
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeouts.read, connect=self.timeouts.connect),
                headers=self.headers,
                # trust_env=False: proxies from the environment must not silently see traffic
                # meant for a local model server.
                trust_env=False,
                verify=_tls_context(),
            )
            self._owned = True
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and (not self._owned or self._loop is _running_loop()):
            await client.aclose()

    def budget(self, body: Any, rules: RetryRules = RetryRules(), *,
               dropped: set[str] | None = None) -> RetryBudget:
        """A fresh ``RetryBudget`` for one request with this transport's policy and the
        wire's ``rules`` (``dropped``: see ``RetryBudget``)."""
        return RetryBudget(self.retry, body, rules, dropped=dropped)

    async def send(
        self,
        path: str,
        body: Any,
        *,
        stream: bool,
        params: Mapping[str, str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        budget: RetryBudget | None = None,
    ) -> AsyncIterator[Retrying | httpx.Response]:
        """POST ``body`` as JSON; yields ``Retrying`` notices, then the successful response.

        With ``stream=True`` the response is open and the caller must close it. ``budget``
        is the request's budget when another layer retries it too (pass ``budget.body`` as
        ``body``); each retry then sends the budget's body as revised for it. Without one
        the request has a budget of its own.
        """
        if budget is None:
            budget = self.budget(body)
        while True:
            try:
                response = await self.attempt(path, body, stream=stream, params=params,
                                              extra_headers=extra_headers, budget=budget)
            except ProviderError as error:
                wait = budget.wait_for(error)
                if wait is None:
                    raise
                yield Retrying(budget.attempts, wait, str(error), usage=attempt_usage(error),
                               reason=retry_reason(error))
                await self.sleep(wait)
                body = budget.body
                continue
            yield response
            return

    async def attempt(
        self,
        path: str,
        body: Any,
        *,
        stream: bool,
        params: Mapping[str, str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        budget: RetryBudget | None = None,
    ) -> httpx.Response:
        """One POST of ``body`` as JSON, counted in ``budget``: the successful response, or
        the ``ProviderError`` it failed with, for the caller to retry or not (``send``
        retries; a wire's stream retries in ``retry_before_first_chunk``, which then judges
        an HTTP status and an error inside a 200 alike, with one budget)."""
        headers = {"content-type": "application/json"}
        if extra_headers:
            headers.update(extra_headers)
        if budget is not None:
            budget.attempts += 1
        return await self._post(f"{self.base_url}{path}", _encode(body), headers, params, stream)

    async def _post(
        self, url: str, content: bytes, headers: dict[str, str],
        params: Mapping[str, str] | None, stream: bool,
    ) -> httpx.Response:
        client = self.client  # one client for the whole exchange, whatever another loop does
        timeouts = self.timeouts
        try:
            if stream:
                request = client.build_request("POST", self._url(url), content=content,
                                               headers=headers, params=params)
                response = await client.send(request, stream=True)
            else:
                request = client.build_request("POST", self._url(url), content=content,
                                               headers=headers, params=params,
                                               timeout=self._whole)
                async with asyncio.timeout(timeouts.total):
                    response = await client.send(request, stream=True)
                    response = await read_whole(response, self.provider)
        except (httpx.TimeoutException, TimeoutError) as e:
            if isinstance(e, httpx.ConnectTimeout):
                waited = f"could not connect to {url} within {timeouts.connect:g} s"
            elif stream:
                waited = (f"no answer from {url} within {timeouts.read:g} s "
                          f"(stream_idle_timeout_secs)")
            else:
                waited = f"no answer from {url} within {timeouts.total:g} s (timeout_secs)"
            raise ProviderTimeout(f"{self.provider}: {waited}", provider=self.provider) from None
        except httpx.TransportError as e:
            error = ProviderConnectionError(
                f"{self.provider}: cannot reach {url}: {e or type(e).__name__}",
                provider=self.provider)
            if isinstance(e, httpx.ConnectError):
                error.usage = Usage()  # no connection, no request: nothing spent
            raise error from None
        except httpx.InvalidURL as e:
            raise ConfigError(f"{self.provider}: {url} is not a usable URL: {e}") from None
        except httpx.HTTPError as e:  # a body that did not decode, and any other kind
            raise transport_error(e, self.provider, f"from {url}") from None
        # JSON is UTF-8 (RFC 8259): a charset the server names is not trusted to decode it
        # (a codec like "hex" or "rot13" would break the decoder); invalid bytes become U+FFFD.
        response.encoding = "utf-8"
        if response.status_code >= 400:
            if stream:
                try:
                    response = await read_whole(response, self.provider)
                except httpx.HTTPError as e:
                    raise transport_error(e, self.provider, f"from {url}") from None
            raise self.classify(response.status_code, response.headers, response.text)
        return response

    def _url(self, url: str) -> httpx.URL:
        """``url`` parsed, once per transport."""
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= _MAX_URLS:  # a model name per request (Gemini's paths)
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed


_MAX_URLS = 64


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS settings every client shares: loading the CA bundle takes ~20 ms, which a
    client per event loop (``run_sync`` in a loop) would otherwise pay each time."""
    return httpx.create_ssl_context(trust_env=False)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _encode(body: Any) -> bytes:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate from somewhere (a tool's output, a pasted prompt) would make the
        # body unsendable: it goes as U+FFFD instead.
        return repair(text).encode()
