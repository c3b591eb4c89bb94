"""tether's typed errors for what goes wrong below a wire's own words: an httpx failure, a
body that does not decode as its content-encoding says (retried like a broken connection),
a stream that ends before its terminal event (``cut_short``), a field of the wrong JSON
type; and the wait a ``Retry-After`` names.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from tether.errors import (
    MalformedResponseError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
)


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
