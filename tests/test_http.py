"""The shared HTTP layer: retry waits, Retry-After parsing, SSE framing, error taxonomy,
and retries of errors that arrive inside a streamed 200 (against a loopback server)."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import FrozenInstanceError
from typing import Any

import httpx
import pytest

from tests.providers.helpers import FakeSleep
from tests.servers.http import Canned, LoopbackServer
from tether.errors import (
    AuthError,
    BadRequestError,
    ConfigError,
    ContextOverflowError,
    ModelOutputParseError,
    OverloadedError,
    ProviderError,
    RateLimitError,
    ServerError,
)
from tether.messages import Message, Usage
from tether.providers.base import (
    Completed,
    ModelResponse,
    Retrying,
    StreamChunk,
    TextChunk,
)
from tether.providers.failures import classify_status, error_message
from tether.providers.http.decoders import iter_sse, read_stream_errors
from tether.providers.http.errors import parse_retry_after
from tether.providers.http.retry import (
    RetryBudget,
    RetryPolicy,
    RetryRules,
    retry_before_first_chunk,
    retry_wait,
)
from tether.providers.http.transport import HTTPTransport


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


# --- retry decisions ------------------------------------------------------------------------


def test_retry_wait_gives_up_past_max_retries_and_on_errors_that_are_not_retryable():
    policy = RetryPolicy(max_retries=2, base_delay=1.0)
    busy = OverloadedError("busy")
    assert retry_wait(policy, busy, 1, 0) is not None
    assert retry_wait(policy, busy, 2, 0) is not None
    assert retry_wait(policy, busy, 3, 0) is None
    assert retry_wait(policy, ServerError("boom"), 1, 0) is None


def test_retry_wait_retries_a_parse_error_once():
    error = ModelOutputParseError("does not match the expected format")
    assert retry_wait(RetryPolicy(), error, 1, 0) is not None
    assert retry_wait(RetryPolicy(), error, 2, 1) is None


def test_retry_wait_honours_retry_after_up_to_the_cap_and_names_a_longer_wait():
    policy = RetryPolicy(retry_after_cap=60)
    assert retry_wait(policy, RateLimitError("slow", retry_after=5), 1, 0) == 5.0
    long = RateLimitError("slow", retry_after=3600)
    assert retry_wait(policy, long, 1, 0) is None
    assert "3600s" in str(long) and "retry_after_cap_secs=60s" in str(long)


def test_a_budget_counts_parse_retries_and_revises_the_body_only_when_it_retries():
    def revise(error: ProviderError, body: Any) -> Any:
        return {**body, "n": body["n"] + 1}

    budget = RetryBudget(RetryPolicy(max_retries=5), {"n": 0}, RetryRules(revise=revise))
    parse = ModelOutputParseError("does not match the expected format")
    budget.attempts = 1
    assert budget.wait_for(parse) is not None
    budget.attempts = 2
    assert budget.wait_for(ModelOutputParseError("again")) is None
    assert budget.parse_retries == 1 and budget.body == {"n": 1}


def test_a_budget_sends_again_at_once_without_an_optional_field_a_server_refused_by_name():
    rules = RetryRules(optional_fields=("extra",))
    budget = RetryBudget(RetryPolicy(max_retries=0), {"q": 1, "extra": True}, rules)
    budget.attempts = 1
    assert budget.wait_for(BadRequestError("unknown field: model")) is None
    budget = RetryBudget(RetryPolicy(max_retries=0), {"q": 1, "extra": True}, rules)
    budget.attempts = 1
    assert budget.wait_for(BadRequestError("p: HTTP 400", body="unknown field: extra")) == 0.0
    assert budget.body == {"q": 1} and budget.dropped == {"extra"}
    with pytest.raises(FrozenInstanceError):
        rules.optional_fields = ()  # type: ignore[misc]


# --- errors inside a streamed 200 -----------------------------------------------------------


def _classify(status: int, headers: Mapping[str, str], body: str) -> ProviderError:
    return classify_status(status, headers, body, provider="p")


def transport(server: LoopbackServer, sleep: FakeSleep, **kw: Any) -> HTTPTransport:
    return HTTPTransport(base_url=server.url, headers={}, provider="p", classify=_classify,
                         sleep=sleep, **kw)


async def attempt(http: HTTPTransport, budget: RetryBudget) -> AsyncGenerator[StreamChunk, None]:
    """The smallest adapter: each event's ``text`` becomes a TextChunk, an ``error`` event
    is raised as the error its code means, and the end of the stream completes."""
    response: httpx.Response | None = None
    async for item in http.send("/x", budget.body, stream=True, budget=budget):
        if isinstance(item, Retrying):
            yield item
        else:
            response = item
    assert response is not None
    try:
        texts: list[str] = []
        async for _event, data in read_stream_errors(response, "p"):
            event = json.loads(data)
            if "error" in event:
                raise _classify(event["error"]["code"], {}, data)
            texts.append(event["text"])
            yield TextChunk(event["text"])
        yield Completed(ModelResponse(Message.assistant("".join(texts)), "end_turn", Usage()))
    finally:
        await response.aclose()


async def run(http: HTTPTransport, budget: RetryBudget | None = None) -> list[StreamChunk]:
    """All chunks of one request with both layers retrying; closes the transport."""
    spend = budget or http.budget({"q": 1})
    try:
        return [c async for c in retry_before_first_chunk(lambda: attempt(http, spend),
                                                          spend, http.sleep)]
    finally:
        await http.aclose()


def error_event(code: int, message: str = "busy") -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


OK = Canned.sse([{"text": "ok"}], done=False)


async def test_an_error_event_before_any_content_reopens_the_stream(server: LoopbackServer):
    sleep = FakeSleep()
    server.queue(Canned.sse([error_event(503)], done=False), OK)
    chunks = await run(transport(server, sleep))
    assert isinstance(chunks[0], Retrying) and chunks[0].attempt == 1 and "busy" in chunks[0].error
    assert chunks[1] == TextChunk("ok") and isinstance(chunks[2], Completed)
    assert len(server.requests) == 2 and sleep.waits == [chunks[0].wait_secs]


async def test_an_error_event_after_content_is_raised_without_a_retry(server: LoopbackServer):
    sleep = FakeSleep()
    server.queue(Canned.sse([{"text": "Hel"}, error_event(503)], done=False), OK)
    seen: list[StreamChunk] = []
    http = transport(server, sleep)
    budget = http.budget({})
    with pytest.raises(OverloadedError, match="busy"):
        async for chunk in retry_before_first_chunk(lambda: attempt(http, budget), budget,
                                                    sleep):
            seen.append(chunk)
    assert seen == [TextChunk("Hel")]
    assert len(server.requests) == 1 and sleep.waits == []
    await http.aclose()


async def test_an_error_event_that_is_not_retryable_is_raised_at_once(server: LoopbackServer):
    sleep = FakeSleep()
    server.queue(Canned.sse([error_event(400, "bad field")], done=False), OK)
    with pytest.raises(BadRequestError, match="bad field"):
        await run(transport(server, sleep))
    assert len(server.requests) == 1 and sleep.waits == []


async def test_http_and_in_stream_retries_spend_one_budget(server: LoopbackServer):
    sleep = FakeSleep()
    busy = Canned.json(error_event(503), 503)
    server.queue(busy, Canned.sse([error_event(503)], done=False), busy, OK)
    http = transport(server, sleep, retry=RetryPolicy(max_retries=2))
    budget = http.budget({})
    seen: list[StreamChunk] = []
    with pytest.raises(OverloadedError):
        async for chunk in retry_before_first_chunk(lambda: attempt(http, budget), budget,
                                                    sleep):
            seen.append(chunk)
    # Retry 1 by the transport (HTTP 503), retry 2 by the stream (an error event); the
    # third attempt's 503 is past max_retries=2 whichever layer sees it.
    assert [c.attempt for c in seen if isinstance(c, Retrying)] == [1, 2]
    assert budget.attempts == 3 and len(server.requests) == 3 and len(sleep.waits) == 2
    await http.aclose()


async def test_a_revised_body_is_what_both_layers_resend(server: LoopbackServer):
    def revise(error: ProviderError, body: Any) -> Any:
        return {**body, "retry": body["retry"] + 1}

    sleep = FakeSleep()
    server.queue(Canned.json(error_event(503), 503),
                 Canned.sse([error_event(503)], done=False), OK)
    http = transport(server, sleep)
    chunks = await run(http, http.budget({"retry": 0}, RetryRules(revise=revise)))
    assert isinstance(chunks[-1], Completed)
    assert [b["retry"] for b in server.bodies()] == [0, 1, 2]


async def test_a_retry_after_past_the_cap_is_named_once_through_both_layers(
        server: LoopbackServer):
    sleep = FakeSleep()
    server.queue(Canned.json(error_event(429, "slow down"), 429, **{"retry-after": "3600"}))
    with pytest.raises(RateLimitError) as caught:
        await run(transport(server, sleep, retry=RetryPolicy(retry_after_cap=60)))
    assert str(caught.value).count("retry_after_cap_secs=60s") == 1
    assert len(server.requests) == 1 and sleep.waits == []


async def test_without_a_budget_the_transport_retries_on_its_own(server: LoopbackServer):
    sleep = FakeSleep()
    busy = Canned.json(error_event(503), 503)
    server.queue(busy, busy, Canned.json({"ok": True}))
    http = transport(server, sleep, retry=RetryPolicy(max_retries=2))
    items = [item async for item in http.send("/x", {"q": 1}, stream=False)]
    assert [i.attempt for i in items if isinstance(i, Retrying)] == [1, 2]
    assert isinstance(items[-1], httpx.Response) and items[-1].json() == {"ok": True}
    assert len(sleep.waits) == 2
    await http.aclose()


async def test_a_base_url_httpx_cannot_parse_is_a_config_error_naming_it():
    http = HTTPTransport(base_url="http://[::1/v1", headers={}, provider="p",
                         classify=_classify, sleep=FakeSleep())
    with pytest.raises(ConfigError, match=r"http://\[::1/v1/x is not a usable URL"):
        [item async for item in http.send("/x", {}, stream=False)]


async def test_each_path_is_sent_to_its_own_url(server: LoopbackServer):
    server.queue(Canned.json({"n": 1}), Canned.json({"n": 2}), Canned.json({"n": 3}))
    http = transport(server, FakeSleep())
    for path in ("/a", "/b", "/a"):
        [item async for item in http.send(path, {}, stream=False)]
    assert [r.path for r in server.requests] == ["/a", "/b", "/a"]
    await http.aclose()
