"""What every HTTP adapter shares: the client, the retry policy, SSE reading, bounded JSON
(what an error answer means is ``tether.providers.failures``'s to say).

One retry policy for all adapters: 429, 503, 529 and transport errors are retried with
exponential backoff, honouring Retry-After up to a cap; a Retry-After beyond the cap fails
at once, naming the wait; a model-output parse error (llama-server's 500) is retried once.
Everything else fails on the first error.

A request is retried at two layers: ``HTTPTransport.send`` retries errors that come before
a response starts, and ``retry_before_first_chunk`` re-opens a stream when the error comes
inside a 200 before any content (a streamed llama-server parse error, an Anthropic
``overloaded_error`` event). Both spend one ``RetryBudget`` per request, so a request makes
at most ``1 + max_retries`` attempts whichever layer saw its failures.

Everything a server sends is hostile input. httpx errors never leave this module untyped
(``transport_error``); a body that is not the encoding it claims (``content-encoding``) is
a ``MalformedResponseError`` that is retried like a broken connection, and so is a stream
that ends before its terminal event (``cut_short``); JSON is parsed by ``decode_json``,
which refuses nesting deeper than ``MAX_JSON_DEPTH``. Bodies are read as UTF-8 whatever
charset a server names (JSON is UTF-8), with invalid bytes replaced, and at most
``MAX_RESPONSE_BYTES`` of one answer (a body, or a whole stream) are read. An event stream
is split into lines where the SSE spec splits them, and nowhere else.
"""

from __future__ import annotations

import asyncio
import codecs
import email.utils
import functools
import json
import os
import random
import re
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx

from tether.errors import (
    ConfigError,
    MalformedResponseError,
    ModelOutputParseError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
)
from tether.messages import Message, Text, Usage
from tether.providers.base import (
    Completed,
    Retrying,
    StreamChunk,
    TextChunk,
    attempt_usage,
    retry_reason,
)
from tether.textrepair import repair


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` further attempts after the first; waits grow from ``base_delay``
    doubling up to ``max_delay``; a provider's Retry-After is honoured up to
    ``retry_after_cap`` seconds, beyond which the request fails at once."""

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    retry_after_cap: float = 60.0

    def backoff(self, attempt: int) -> float:
        delay: float = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return delay * (0.5 + random.random() / 2)  # jitter keeps clients from marching in step


Sleep = Callable[[float], Awaitable[None]]

Revise = Callable[[ProviderError, Any], Any]
"""How a request body changes for the attempt after ``error`` (return it unchanged to resend
it as it was)."""

Resume = Callable[[ProviderError, Any, str], Any | None]
"""The body that asks the server to go on from ``text``, an answer's text that has gone out
before ``error`` broke it off, or None (it cannot be continued)."""

Resend = Callable[[ProviderError, Any], Any | None]
"""The body to send at once after ``error`` instead, whatever the retry policy says, or None:
a server that refused an optional field tether added (``stream_options``) is asked again
without it."""


def retry_wait(
    policy: RetryPolicy, error: ProviderError, attempt: int, parse_retries: int
) -> float | None:
    """Seconds to wait after attempt number ``attempt`` failed with ``error``, or None to
    give up now. ``parse_retries`` is how many model-output parse errors were retried already.

    A Retry-After beyond the cap gives up and names the wait in the error's message.
    """
    if not error.retryable or attempt > policy.max_retries:
        return None
    if isinstance(error, ModelOutputParseError):
        # The server is not busy, the model's output was unreadable: no wait helps.
        return None if parse_retries >= 1 else 0.0
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        if retry_after > policy.retry_after_cap:
            # Waiting longer than the cap would look like a hang: fail now, name the wait.
            error.args = (
                f"{error.message} (the provider asked to retry after {retry_after:g}s, "
                f"more than retry_after_cap_secs={policy.retry_after_cap:g}s)",
            )
            return None
        return float(retry_after)
    return policy.backoff(attempt)


class RetryBudget:
    """One request's attempts against its ``RetryPolicy``, and the body the next one sends.

    Shared by every layer that retries the request (``HTTPTransport.send`` before a
    response, ``retry_before_first_chunk`` inside a 200), so the request makes at most
    ``1 + policy.max_retries`` attempts in all and retries a ``ModelOutputParseError`` at
    most once, whichever layer saw the failures. ``attempts`` counts the requests sent.
    ``revise`` gives the body for the attempt after an error (``OpenAIChat`` withholds the
    tools after a parse error); without it every attempt sends the same body. ``resend``
    may answer an error the policy would not retry with a body to send at once instead
    (it does not count against ``max_retries``). ``resume`` continues an answer whose text
    went out before it broke off (``resume_after``).
    """

    __slots__ = ("_refused", "_resend", "_resume", "_revise", "attempts", "body",
                 "parse_retries", "policy")

    def __init__(self, policy: RetryPolicy, body: Any, revise: Revise | None = None,
                 resend: Resend | None = None, resume: Resume | None = None) -> None:
        self.policy = policy
        self.body = body
        self.attempts = 0
        self.parse_retries = 0
        self._revise = revise
        self._resend = resend
        self._resume = resume
        self._refused: ProviderError | None = None

    @property
    def resumable(self) -> bool:
        """Whether an answer broken off after some text can be continued at all."""
        return self._resume is not None

    def resume_after(self, error: ProviderError, text: str) -> float | None:
        """The answer broke off with ``error`` after ``text`` went out: seconds to wait
        before asking the server to go on from it, or None to give up (the retry policy
        says no, or the wire cannot continue it)."""
        if self._resume is None or error is self._refused:
            return None
        wait = retry_wait(self.policy, error, self.attempts, self.parse_retries)
        body = None if wait is None else self._resume(error, self.body, text)
        if body is None:
            self._refused = error
            return None
        if isinstance(error, ModelOutputParseError):
            self.parse_retries += 1
        self.body = body
        return wait

    def wait_for(self, error: ProviderError) -> float | None:
        """The current attempt failed with ``error``: seconds to wait before the next one,
        or None to give up. Deciding to retry spends the budget and revises the body."""
        if error is self._refused:
            # The transport gave up on it and it surfaced through the stream: one verdict
            # per error (a second would also name a Retry-After wait twice).
            return None
        if self._resend is not None:
            instead = self._resend(error, self.body)
            if instead is not None:
                self.body = instead
                return 0.0
        wait = retry_wait(self.policy, error, self.attempts, self.parse_retries)
        if wait is None:
            self._refused = error
            return None
        if isinstance(error, ModelOutputParseError):
            self.parse_retries += 1
        if self._revise is not None:
            self.body = self._revise(error, self.body)
        return wait


async def retry_before_first_chunk(
    open_stream: Callable[[], AsyncGenerator[StreamChunk, None]],
    budget: RetryBudget,
    sleep: Sleep,
) -> AsyncGenerator[StreamChunk, None]:
    """The chunks of ``open_stream()``, opened again when it raises a retryable
    ``ProviderError`` before any content came out.

    Content is any chunk but a ``Retrying`` notice (text, reasoning, a tool call,
    ``Completed``): once some has gone to the caller a retry would repeat it, so a later
    error is raised as it is. Before that, the error (an error event inside a streamed 200,
    an error object in a 200 body, a stream that broke or stalled before its first token)
    is retried by ``budget``'s rules, announced with a ``Retrying`` notice.
    ``open_stream`` must send ``budget.body`` through ``HTTPTransport.send(...,
    budget=budget)`` so both layers spend the same budget.

    One exception: an answer that broke off after only text went out is continued where
    the wire can ask for that (``RetryBudget.resume_after``; llama-server's parse error
    after text). The next attempt asks the server to go on from the text shown; what of it
    the server sends again is dropped, and its ``Completed`` holds the whole text.
    """
    shown = ""  # the text already out, of an answer being continued
    while True:
        chunks = open_stream()
        content = False
        # This attempt's text, while it is only text (None: nothing to continue from).
        texts: list[str] | None = [] if budget.resumable else None
        echo = shown  # what the server may send again of the text it continues
        try:
            async for chunk in chunks:
                if isinstance(chunk, Retrying):
                    yield chunk
                    continue
                content = True
                if isinstance(chunk, TextChunk):
                    if echo:
                        unechoed, echo = _unechoed(chunk, echo)
                        if unechoed is None:
                            continue
                        chunk = unechoed
                    if texts is not None:
                        texts.append(chunk.text)
                elif isinstance(chunk, Completed):
                    if shown:
                        chunk = _continued(chunk, shown)
                else:
                    texts = None  # reasoning or a call went out: no text to go on from
                yield chunk
            return
        except ProviderError as error:
            if not content:
                wait = budget.wait_for(error)
            elif texts:
                so_far = shown + "".join(texts)
                wait = budget.resume_after(error, so_far)
                if wait is not None:
                    shown = so_far
            else:
                wait = None
            if wait is None:
                raise
            notice = Retrying(budget.attempts, wait, str(error), usage=attempt_usage(error),
                              reason=retry_reason(error))
        finally:
            await chunks.aclose()
        # Only a retried error gets here: a finished stream returned, any other error raised.
        yield notice
        await sleep(wait)


def _unechoed(chunk: TextChunk, echo: str) -> tuple[TextChunk | None, str]:
    """``chunk`` without what it repeats of ``echo`` (the text a continued answer already
    showed, which some servers send again first), and what of ``echo`` is still to come."""
    text = chunk.text
    if echo.startswith(text):
        return None, echo[len(text):]
    if text.startswith(echo):
        return TextChunk(text[len(echo):]), ""
    return chunk, ""  # this server does not send it again


def _continued(completed: Completed, shown: str) -> Completed:
    """The ``Completed`` of a continued answer, holding the text shown before it too."""
    message = completed.response.message
    if message.text.startswith(shown):
        return completed  # the server's answer already holds it
    parts = list(message.parts)
    at = next((i for i, p in enumerate(parts) if isinstance(p, Text)), None)
    if at is None:
        parts.insert(0, Text(shown))
    else:
        parts[at] = Text(shown + parts[at].text)  # type: ignore[union-attr]
    return Completed(replace(completed.response, message=Message(message.role, tuple(parts))))


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

    def budget(self, body: Any, revise: Revise | None = None, resend: Resend | None = None,
               resume: Resume | None = None) -> RetryBudget:
        """A fresh ``RetryBudget`` for one request with this transport's policy."""
        return RetryBudget(self.retry, body, revise, resend, resume)

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
        url = f"{self.base_url}{path}"
        if budget is None:
            budget = self.budget(body)
        headers = {"content-type": "application/json"}
        if extra_headers:
            headers.update(extra_headers)
        content = _encode(body)
        while True:
            budget.attempts += 1
            try:
                response = await self._post(url, content, headers, params, stream)
            except ProviderError as error:
                wait = budget.wait_for(error)
                if wait is None:
                    raise
                yield Retrying(budget.attempts, wait, str(error), usage=attempt_usage(error),
                               reason=retry_reason(error))
                await self.sleep(wait)
                if budget.body is not body:
                    body = budget.body
                    content = _encode(body)
                continue
            yield response
            return

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


def transport_error(error: httpx.HTTPError, provider: str, where: str) -> ProviderError:
    """The tether error for an httpx error met while talking to ``provider``.

    A body that does not decode as its ``content-encoding`` says is a malformed answer,
    retried like a connection that broke (a proxy mangling bytes is the likely cause).
    """
    detail = str(error) or type(error).__name__
    if isinstance(error, httpx.TimeoutException):
        return ProviderTimeout(f"{provider}: no answer {where} in time", provider=provider)
    if isinstance(error, httpx.DecodingError):
        found = MalformedResponseError(
            f"{provider}: the answer {where} does not decode as its content-encoding says: "
            f"{detail}", provider=provider)
        found.retryable = True
        return found
    if isinstance(error, httpx.TransportError):
        return ProviderConnectionError(f"{provider}: the connection {where} failed: {detail}",
                                       provider=provider)
    return ProviderConnectionError(f"{provider}: the exchange {where} failed: {detail}",
                                   provider=provider)


def cut_short(provider: str, message: str) -> MalformedResponseError:
    """A stream that ended before its terminal event. Retried (before any content came
    out) like a connection that broke, which is what it most likely was."""
    error = MalformedResponseError(f"{provider}: {message}", provider=provider)
    error.retryable = True
    return error


def count(value: Any, provider: str, what: str) -> int:
    """A token count: a non-negative JSON integer (0 when absent or null)."""
    if value is None:
        return 0
    if type(value) is int and value >= 0:
        return value
    if type(value) is float and value.is_integer() and value >= 0:
        return int(value)
    raise wrong_type(provider, what, value)


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number",
               float: "a number", bool: "a boolean", type(None): "null"}


def wrong_type(provider: str, what: str, value: Any) -> MalformedResponseError:
    """The error for a field whose JSON type is not the one the wire format gives it."""
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    return MalformedResponseError(
        f"{provider}: {what} is {kind} ({json.dumps(value, default=repr)[:80]}), which the "
        f"wire format does not allow", provider=provider)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms``, or ``retry-after`` as seconds or an HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""The most tether reads of one provider answer: a whole body, or all of a stream, counted
as decoded (a compressed body counts as it inflates). A real answer is a few megabytes at
most; a server that sends more, or without end, gets a ``MalformedResponseError`` instead
of the process's memory."""


class ResponseTooLarge(ValueError):
    """An answer past ``MAX_RESPONSE_BYTES`` (or the limit the reader was given)."""


async def read_body(response: httpx.Response, limit: int | None = None) -> bytes:
    """The (decoded) body of a response opened with ``stream=True``, refused past ``limit``
    bytes (None: ``MAX_RESPONSE_BYTES``) with ``ResponseTooLarge``; the response is closed
    either way."""
    limit = MAX_RESPONSE_BYTES if limit is None else limit
    try:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit and "content-encoding" not in \
                response.headers:
            raise ResponseTooLarge(f"the answer is larger than {limit} bytes "
                                   f"(content-length {declared})")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise ResponseTooLarge(f"the answer is larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        await response.aclose()


async def read_whole(response: httpx.Response, provider: str,
                     limit: int | None = None) -> httpx.Response:
    """The response opened with ``stream=True``, its body read (``read_body``): its
    ``content``, ``text`` and ``json()`` are the body, as after ``aread()``. Too large:
    ``MalformedResponseError``."""
    try:
        body = await read_body(response, limit)
    except ResponseTooLarge as e:
        raise MalformedResponseError(f"{provider}: {e}", provider=provider) from None
    # Where httpx's own aread() keeps what it read (it has no limit of its own to apply);
    # a new Response around the body would cost more than the rest of the request.
    response._content = body
    return response


# The SSE spec ends a line with CRLF, LF or CR, and with nothing else: not with U+2028,
# U+0085 and the other breaks ``str.splitlines`` (and so httpx's ``aiter_lines``) knows,
# which JSON carries raw inside a string (a model's text may hold them).
_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


async def sse_lines(response: httpx.Response, limit: int | None = None) -> AsyncIterator[str]:
    """The lines of an event stream, decoded as UTF-8 (invalid bytes replaced); past
    ``limit`` bytes in all (None: ``MAX_RESPONSE_BYTES``), ``ResponseTooLarge``."""
    limit = MAX_RESPONSE_BYTES if limit is None else limit
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    # The start of a line not yet ended, in pieces: joined once it ends (adding each read to
    # it would copy a long line once per read, quadratic in its length).
    parts: list[str] = []
    after_cr = False  # the last read ended with CR: an LF first in the next one is its pair
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(f"the stream is larger than {limit} bytes")
        text = decoder.decode(chunk)
        if not text:
            continue
        if after_cr and text[0] == "\n":
            text = text[1:]
        after_cr = text.endswith("\r")
        lines = _SSE_LINE_END.split(text)
        rest = lines.pop()  # after the last line end: the start of the next line
        if lines:
            if parts:
                lines[0] = "".join(parts) + lines[0]
                parts = []
            for line in lines:
                yield line
        if rest:
            parts.append(rest)
    parts.append(decoder.decode(b"", final=True))
    if last := "".join(parts):
        yield last


async def iter_sse(response: httpx.Response,
                   limit: int | None = None) -> AsyncIterator[tuple[str, str]]:
    """``(event, data)`` pairs of a server-sent-event stream, per the SSE spec's framing;
    past ``limit`` bytes in all, ``ResponseTooLarge``."""
    event = ""
    data: list[str] = []
    async for line in sse_lines(response, limit):
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event, "\n".join(data)


async def iter_ndjson(response: httpx.Response,
                      limit: int | None = None) -> AsyncIterator[tuple[str, str]]:
    """``("", line)`` for each line of a newline-delimited JSON stream (Ollama's), blank
    lines skipped, in the shape ``iter_sse`` gives, so one decoder reads either; past
    ``limit`` bytes in all, ``ResponseTooLarge``."""
    async for line in sse_lines(response, limit):
        if line.strip():
            yield "", line


def stream_framing(content_type: str) -> str | None:
    """How a streamed answer of ``content_type`` is framed: ``"sse"``, ``"ndjson"``, or
    None (not a stream: the whole answer in one body)."""
    kind = content_type.lower()
    if "text/event-stream" in kind:
        return "sse"
    if "ndjson" in kind or "jsonlines" in kind or "jsonl" in kind:
        return "ndjson"
    return None


MAX_JSON_DEPTH = 512
"""The deepest nesting of arrays and objects tether reads from a provider. Python's own
parser stops near its recursion limit, which depends on how deep the caller already is;
a fixed bound below it means what was read can always be written again (the next
request, the session store)."""

# Strings (whose brackets do not nest) and runs of anything that is not a bracket.
_NOT_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^"\[\]{}]+')


def decode_json(text: str | bytes) -> Any:
    """``json.loads`` for text from outside: also a ``ValueError`` for nesting deeper than
    ``MAX_JSON_DEPTH`` (and never a ``RecursionError``)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    # Cheap first: fewer brackets than the limit cannot nest past it.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _nesting(text) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested deeper than the parser allows") from None


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in _NOT_NESTING.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char != '"':  # a quote left over: the text is not JSON, json.loads says so
            depth -= 1
    return deepest


def load_json(text: str, provider: str, what: str = "response") -> Any:
    try:
        return decode_json(text)
    except ValueError as e:
        raise MalformedResponseError(
            f"{provider}: the {what} is not JSON ({e}): {text[:200]!r}", provider=provider
        ) from None


async def read_stream_errors(
    response: httpx.Response, provider: str, idle: float | None = None,
    framing: str = "sse",
) -> AsyncIterator[tuple[str, str]]:
    """``iter_sse`` (``iter_ndjson`` for ``framing="ndjson"``) with transport failures
    mid-stream mapped to tether's errors (``idle``: the idle timeout in seconds, named when
    the stream stalls)."""
    events = iter_ndjson(response) if framing == "ndjson" else iter_sse(response)
    try:
        async for item in events:
            yield item
    except ResponseTooLarge as e:
        raise MalformedResponseError(f"{provider}: {e}", provider=provider) from None
    except httpx.ReadTimeout:
        within = "the idle timeout" if idle is None else f"{idle:g} s"
        raise ProviderTimeout(
            f"{provider}: the stream stalled (no data within {within}, "
            f"stream_idle_timeout_secs)", provider=provider) from None
    except httpx.TransportError as e:
        raise ProviderConnectionError(
            f"{provider}: the stream broke: {e or type(e).__name__}", provider=provider
        ) from None
    except httpx.HTTPError as e:
        raise transport_error(e, provider, "in the stream") from None
