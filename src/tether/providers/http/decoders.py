"""A streamed answer read event by event: server-sent events (``iter_sse``) or
newline-delimited JSON (``iter_ndjson``: Ollama's), in one shape so one decoder reads
either, with transport failures mid-stream typed (``read_stream_errors``).

An event stream is split into lines where the SSE spec splits them, and nowhere else; it
is decoded as UTF-8 (invalid bytes replaced), and read up to ``bodies.MAX_RESPONSE_BYTES``
in all.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator

import httpx

from tether.errors import MalformedResponseError, ProviderConnectionError, ProviderTimeout
from tether.providers.http import bodies
from tether.providers.http.bodies import ResponseTooLarge
from tether.providers.http.errors import transport_error

# The SSE spec ends a line with CRLF, LF or CR, and with nothing else: not with U+2028,
# U+0085 and the other breaks ``str.splitlines`` (and so httpx's ``aiter_lines``) knows,
# which JSON carries raw inside a string (a model's text may hold them).
_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


async def sse_lines(response: httpx.Response, limit: int | None = None) -> AsyncIterator[str]:
    """The lines of an event stream, decoded as UTF-8 (invalid bytes replaced); past
    ``limit`` bytes in all (None: ``MAX_RESPONSE_BYTES``), ``ResponseTooLarge``."""
    limit = bodies.MAX_RESPONSE_BYTES if limit is None else limit
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
