"""The shared HTTP layer: retry waits, Retry-After parsing, SSE framing, error taxonomy."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from tether.errors import (
    AuthError,
    ContextOverflowError,
    ModelOutputParseError,
    OverloadedError,
    RateLimitError,
    ServerError,
)
from tether.providers.http import (
    RetryPolicy,
    classify_status,
    error_message,
    iter_sse,
    parse_retry_after,
)


def test_backoff_doubles_from_the_base_delay_up_to_the_max_with_jitter():
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    for attempt, full in ((1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)):
        wait = policy.backoff(attempt)
        assert full / 2 <= wait <= full


@pytest.mark.parametrize(("headers", "expected"), [
    ({"retry-after": "7"}, 7.0),
    ({"retry-after": "1.5"}, 1.5),
    ({"retry-after-ms": "250"}, 0.25),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ({"retry-after": "-3"}, 0.0),
    ({"retry-after": "soon"}, None),
    ({}, None),
])
def test_retry_after_is_read_as_seconds_or_milliseconds(headers: dict[str, str],
                                                        expected: float | None):
    assert parse_retry_after(headers) == expected


def test_retry_after_as_an_http_date_is_the_seconds_until_then():
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = parse_retry_after({"retry-after": when})
    assert wait is not None and 25 <= wait <= 31


async def sse(raw: bytes) -> list[tuple[str, str]]:
    return [item async for item in iter_sse(httpx.Response(200, content=raw))]


async def test_sse_events_are_framed_by_blank_lines_with_names_and_multiline_data():
    raw = (b": keep-alive comment\n\n"
           b"event: message_start\ndata: {\"a\": 1}\n\n"
           b"data: line one\ndata: line two\n\n"
           b"data:no-space\n\n"
           b"data: [DONE]\n\n")
    assert await sse(raw) == [("message_start", '{"a": 1}'), ("", "line one\nline two"),
                              ("", "no-space"), ("", "[DONE]")]


async def test_sse_last_event_without_a_trailing_blank_line_is_kept():
    assert await sse(b"data: tail") == [("", "tail")]


async def test_sse_crlf_line_endings_are_understood():
    assert await sse(b"data: one\r\n\r\ndata: two\r\n\r\n") == [("", "one"), ("", "two")]


def test_error_message_finds_the_human_part_of_common_bodies():
    assert error_message('{"error": {"message": "bad key"}}') == "bad key"
    assert error_message('{"error": "plain"}') == "plain"
    assert error_message('[{"error": {"message": "gemini style"}}]') == "gemini style"
    assert error_message("  not json  ") == "not json"


@pytest.mark.parametrize(("status", "body", "kind"), [
    (401, "{}", AuthError),
    (429, "{}", RateLimitError),
    (503, "{}", OverloadedError),
    (529, "{}", OverloadedError),
    (413, "{}", ContextOverflowError),
    (500, '{"error": {"message": "does not match the expected format"}}',
     ModelOutputParseError),
    (502, "{}", ServerError),
])
def test_statuses_map_to_the_shared_taxonomy(status: int, body: str, kind: type):
    error = classify_status(status, {}, body, provider="p")
    assert type(error) is kind and error.status == status and error.provider == "p"


def test_rate_limit_errors_carry_the_retry_after():
    error = classify_status(429, {"retry-after": "12"}, "{}", provider="p")
    assert isinstance(error, RateLimitError) and error.retry_after == 12.0
