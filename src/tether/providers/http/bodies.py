"""Bounded reads of what a server sends: at most ``MAX_RESPONSE_BYTES`` of one answer (a
body, or a whole stream), and JSON nested at most ``MAX_JSON_DEPTH`` deep (``decode_json``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from tether.errors import MalformedResponseError

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
