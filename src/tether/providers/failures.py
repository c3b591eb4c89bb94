"""What a server's error answer means: tether's typed error for an HTTP status and its body,
shared by every wire (each refines it with what its own server says first).

``classify_status`` is the taxonomy (401 a bad key, 429 a rate limit, an overflow of the
context window, a server that could not read its own model's output...); ``error_message``
is the human part of a JSON error body; ``stated_number`` and ``count_field`` read the
numbers a wire's server puts in its words or fields (an overflow's prompt and window:
``ContextOverflowError.prompt_tokens`` and ``window``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tether.errors import (
    AuthError,
    BadRequestError,
    ContextOverflowError,
    ModelOutputParseError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    ProviderError,
    RateLimitError,
    ServerError,
)
from tether.providers.http.bodies import decode_json
from tether.providers.http.errors import parse_retry_after

_OVERFLOW_HINTS = (
    "context length", "context_length", "maximum context", "context window", "too many tokens",
    "prompt is too long", "exceeds the context", "input is too long", "token limit",
)
_PARSE_HINTS = ("does not match the expected", "failed to parse", "parse tool call")


def error_message(body: str) -> str:
    """The human part of a JSON error body (``{"error": {"message": ...}}`` and kin)."""
    try:
        data = decode_json(body)
    except ValueError:
        return body.strip()[:500]
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("msg")
            if isinstance(msg, str):
                return msg
        if isinstance(err, str):
            return err
    return body.strip()[:500]


def classify_status(
    status: int, headers: Mapping[str, str], body: str, *, provider: str
) -> ProviderError:
    """The error taxonomy shared by every adapter (each may refine it first)."""
    detail = error_message(body)
    text = f"{provider}: HTTP {status}: {detail}"
    lowered = detail.lower()
    kw: dict[str, Any] = {"provider": provider, "status": status, "body": body}
    if status == 401:
        return AuthError(f"{text} (check the API key)", **kw)
    if status == 403:
        return PermissionDeniedError(text, **kw)
    if status == 404:
        return NotFoundError(f"{text} (check base_url and model)", **kw)
    if status == 429:
        return RateLimitError(text, retry_after=parse_retry_after(headers), **kw)
    if status in (503, 529):
        return OverloadedError(text, retry_after=parse_retry_after(headers), **kw)
    if status in (400, 413, 422):
        if status == 413 or any(h in lowered for h in _OVERFLOW_HINTS):
            return ContextOverflowError(text, **kw)
        return BadRequestError(text, **kw)
    if status >= 500:
        if any(h in lowered for h in _PARSE_HINTS):
            return ModelOutputParseError(unreadable_output(provider, status, detail), **kw)
        return ServerError(text, **kw)
    return BadRequestError(text, **kw)


def stated_number(patterns: Sequence[re.Pattern[str]], text: str) -> int | None:
    """The number the first of ``patterns`` that matches ``text`` captures (its group 1),
    when it is a count a server could mean (at most nine digits); None otherwise. A wire
    reads its server's overflow error with it (``ContextOverflowError.prompt_tokens`` and
    ``window``), each with the patterns of its own server's wording."""
    for pattern in patterns:
        match = pattern.search(text)
        if match and len(match.group(1)) <= 9:
            return int(match.group(1))
    return None


def count_field(value: object) -> int | None:
    """A positive whole number a server put in a JSON field, or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def unreadable_output(provider: str, status: int, detail: str) -> str:
    """What a server's failure to read its own model's output means, and what to try."""
    return (f"{provider}: the server could not read the model's output as an answer or as a "
            f"call of one of the offered tools (HTTP {status}: {detail}). Small models do "
            f"this when they call a tool that does not exist or write code the server takes "
            f"for a call. Try rephrasing the request or naming the tool to use, offering "
            f"fewer tools, or a larger model")
