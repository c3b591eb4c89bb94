"""The Anthropic Messages adapter against a real HTTP server on 127.0.0.1.

Hand-written wire fixtures: one per error class, streamed and whole answers, and the
request body the adapter builds. Retries wait through a fake ``sleep`` that only records.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.providers.helpers import FakeSleep, ask, collect
from tests.servers.http import Canned, LoopbackServer
from tether.agent import Agent
from tether.errors import (
    AuthError,
    BadRequestError,
    ConfigError,
    ContextOverflowError,
    MalformedResponseError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    ProviderTimeout,
    RateLimitError,
    ServerError,
)
from tether.events import ProviderRetry, RunFinished, TextDelta
from tether.messages import Image, Message, Reasoning, Text, ToolCall, ToolResult
from tether.providers.anthropic import Anthropic
from tether.providers.base import (
    Completed,
    ModelRequest,
    NamedToolChoice,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    complete,
)
from tether.providers.http.retry import RetryPolicy
from tether.providers.http.transport import Timeouts
from tether.tools.function import tool
from tether.tools.spec import ToolSpec

WEATHER = ToolSpec("get_weather", "Get the weather for a city.",
                   {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]})


_OPENED: list[Anthropic] = []


@pytest.fixture(autouse=True)
async def _close_providers() -> AsyncIterator[None]:
    yield
    while _OPENED:
        await _OPENED.pop().aclose()


def opened(provider: Anthropic) -> Anthropic:
    """Closed when the test ends (its connections would otherwise linger)."""
    _OPENED.append(provider)
    return provider


def claude(srv: LoopbackServer, sleep: FakeSleep | None = None, **kw: Any) -> Anthropic:
    return opened(Anthropic(srv.url, "claude-test", api_key="sk-test",
                            sleep=sleep or FakeSleep(), **kw))


def message_json(content: list[dict[str, Any]], stop: str = "end_turn",
                 **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-2025",
        "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0,
                  "cache_creation_input_tokens": 0, **usage},
    }


def error_json(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


# --- streamed event builders (Anthropic names every event) ----------------------------------


def start(input_tokens: int = 10, output_tokens: int = 1, **usage: int) -> tuple[str, Any]:
    return ("message_start", {"type": "message_start", "message": {
        "id": "msg_s", "type": "message", "role": "assistant", "model": "claude-test-2025",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, **usage}}})


def block(index: int, content_block: dict[str, Any]) -> tuple[str, Any]:
    return ("content_block_start",
            {"type": "content_block_start", "index": index, "content_block": content_block})


def delta(index: int, **d: Any) -> tuple[str, Any]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})


def stop_block(index: int) -> tuple[str, Any]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def finish(stop: str, output_tokens: int) -> list[tuple[str, Any]]:
    return [("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": output_tokens}}),
            ("message_stop", {"type": "message_stop"})]


PING = ("ping", {"type": "ping"})


def sse(*events: Any) -> Canned:
    return Canned.sse(list(events), named=True, done=False)


def text_stream(*pieces: str, stop: str = "end_turn") -> Canned:
    return sse(start(), block(0, {"type": "text", "text": ""}),
               *[delta(0, type="text_delta", text=p) for p in pieces], stop_block(0),
               *finish(stop, 7))


# --- whole (non-streamed) answers -------------------------------------------------------------


async def test_a_whole_text_answer_is_parsed_with_usage_and_cache_tokens(server, sleep):
    server.queue(Canned.json(message_json(
        [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}],
        input_tokens=12, output_tokens=3, cache_read_input_tokens=100,
        cache_creation_input_tokens=40)))
    chunks = await collect(claude(server, sleep), ask())
    assert len(chunks) == 1 and isinstance(chunks[0], Completed)
    response = chunks[0].response
    assert response.message == Message("assistant", (Text("Hello"), Text(" there")))
    assert response.stop_reason == "end_turn" and response.raw_stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12 + 100 + 40, 3)
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (100, 40)
    assert response.usage.requests == 1
    assert (response.model, response.id) == ("claude-test-2025", "msg_1")


async def test_requests_carry_the_key_the_version_and_go_to_v1_messages(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    provider = opened(Anthropic(server.url + "/", "claude-test", api_key="sk-secret",
                                headers={"anthropic-beta": "feature-x"},
                                anthropic_version="2099-01-01"))
    await complete(provider, ask())
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "sk-secret"
    assert sent.headers["anthropic-version"] == "2099-01-01"
    assert sent.headers["anthropic-beta"] == "feature-x"
    assert "authorization" not in sent.headers


async def test_the_key_is_read_from_the_environment_variable(server, monkeypatch):
    monkeypatch.setenv("MY_CLAUDE_KEY", "sk-from-env")
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    await complete(opened(Anthropic(server.url, "claude-test", api_key_env="MY_CLAUDE_KEY")),
                   ask())
    assert server.requests[0].headers["x-api-key"] == "sk-from-env"


def test_a_missing_key_variable_is_a_config_error_naming_it(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR"):
        Anthropic(model="claude-test", api_key_env="NO_SUCH_KEY_VAR")


def test_a_missing_model_is_a_config_error():
    with pytest.raises(ConfigError, match="model is required"):
        Anthropic(api_key="k")


async def test_with_model_returns_a_copy_that_asks_for_the_other_model(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    original = claude(server, max_tokens_default=77)
    other = opened(original.with_model("claude-other"))
    assert (original.model, other.model, other.name) == ("claude-test", "claude-other",
                                                          "anthropic")
    await complete(other, ask())
    assert server.requests[0].body["model"] == "claude-other"
    assert server.requests[0].body["max_tokens"] == 77
    assert server.requests[0].headers["x-api-key"] == "sk-test"


async def test_whole_tool_use_blocks_become_tool_calls_with_json_arguments(server):
    server.queue(Canned.json(message_json([
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
    ], stop="tool_use")))
    response = await complete(claude(server), ask(tools=[WEATHER]))
    assert response.stop_reason == "tool_calls"
    assert response.message.text == "Checking."
    calls = response.message.tool_calls
    assert [(c.id, c.name, c.parsed_arguments()) for c in calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}), ("toolu_2", "get_weather", {})]


@pytest.mark.parametrize(("wire", "ours"), [
    ("end_turn", "end_turn"), ("stop_sequence", "end_turn"), ("tool_use", "tool_calls"),
    ("max_tokens", "max_tokens"), ("refusal", "content_filter"), ("pause_turn", "other"),
])
async def test_stop_reasons_map_to_tethers(server, wire, ours):
    server.queue(Canned.json(message_json([{"type": "text", "text": "x"}], stop=wire)))
    response = await complete(claude(server), ask())
    assert (response.stop_reason, response.raw_stop_reason) == (ours, wire)


async def test_a_stream_answered_as_json_is_parsed_as_a_whole_answer(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "whole"}])))
    chunks = await collect(claude(server), ask(stream=True))
    assert server.requests[0].body["stream"] is True
    assert [type(c) for c in chunks] == [Completed]
    assert isinstance(chunks[0], Completed) and chunks[0].response.message.text == "whole"


# --- streamed answers -------------------------------------------------------------------------


async def test_streamed_text_and_a_tool_call_split_over_input_json_deltas(server):
    server.queue(sse(
        start(input_tokens=20, output_tokens=1, cache_read_input_tokens=8), PING,
        block(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="Let me "), delta(0, type="text_delta", text="check."),
        stop_block(0),
        block(1, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}),
        delta(1, type="input_json_delta", partial_json=""),
        delta(1, type="input_json_delta", partial_json='{"ci'),
        delta(1, type="input_json_delta", partial_json='ty": "Par'),
        delta(1, type="input_json_delta", partial_json='is"}'),
        stop_block(1), *finish("tool_use", 31)))
    chunks = await collect(claude(server), ask(stream=True, tools=[WEATHER]))
    assert chunks[:-1] == [
        TextChunk("Let me "), TextChunk("check."),
        ToolCallChunk(0, "toolu_a", "get_weather", ""),
        ToolCallChunk(0, None, None, '{"ci'), ToolCallChunk(0, None, None, 'ty": "Par'),
        ToolCallChunk(0, None, None, 'is"}'),
    ]
    final = chunks[-1]
    assert isinstance(final, Completed)
    response = final.response
    assert response.message == Message("assistant", (
        Text("Let me check."), ToolCall("toolu_a", "get_weather", '{"city": "Paris"}')))
    assert response.stop_reason == "tool_calls"
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.cache_read_tokens) == (20 + 8, 31, 8)
    assert (response.id, response.model) == ("msg_s", "claude-test-2025")


async def test_two_streamed_tool_uses_in_one_turn_are_numbered_in_order(server):
    server.queue(sse(
        start(),
        block(0, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
        delta(0, type="input_json_delta", partial_json='{"city": '),
        delta(0, type="input_json_delta", partial_json='"Oslo"}'), stop_block(0),
        block(1, {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}}),
        stop_block(1), *finish("tool_use", 40)))
    chunks = await collect(claude(server), ask(stream=True, tools=[WEATHER]))
    starts = [c for c in chunks if isinstance(c, ToolCallChunk) and c.id]
    assert [(c.index, c.id, c.name) for c in starts] == [(0, "toolu_1", "get_weather"),
                                                         (1, "toolu_2", "get_time")]
    final = chunks[-1]
    assert isinstance(final, Completed)
    calls = final.response.message.tool_calls
    # A tool_use with no input deltas has empty arguments: "{}".
    assert [(c.id, c.arguments) for c in calls] == [("toolu_1", '{"city": "Oslo"}'),
                                                    ("toolu_2", "{}")]


async def test_streamed_thinking_is_kept_with_its_signature(server):
    server.queue(sse(
        start(),
        block(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="The user wants "),
        delta(0, type="thinking_delta", thinking="a greeting."),
        delta(0, type="signature_delta", signature="EqQBsig=="), stop_block(0),
        block(1, {"type": "redacted_thinking", "data": "ENCRYPTED"}), stop_block(1),
        block(2, {"type": "text", "text": ""}), delta(2, type="text_delta", text="Hello!"),
        stop_block(2), *finish("end_turn", 50)))
    chunks = await collect(claude(server), ask(stream=True))
    assert [c for c in chunks if isinstance(c, ReasoningChunk)] == [
        ReasoningChunk("The user wants "), ReasoningChunk("a greeting.")]
    final = chunks[-1]
    assert isinstance(final, Completed)
    assert final.response.message.parts == (
        Reasoning("The user wants a greeting.", "anthropic", signature="EqQBsig=="),
        Reasoning("", "anthropic", redacted="ENCRYPTED"),
        Text("Hello!"),
    )


async def test_thinking_is_replayed_verbatim_to_anthropic_and_dropped_from_other_wires(server):
    server.queue(Canned.json(message_json([
        {"type": "thinking", "thinking": "Weather needs a tool.", "signature": "SIG1"},
        {"type": "redacted_thinking", "data": "REDACTED1"},
        {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Rome"}},
    ], stop="tool_use")), Canned.json(message_json([{"type": "text", "text": "Sunny."}])))
    provider = claude(server)
    first = await complete(provider, ask("Weather in Rome?", tools=[WEATHER]))
    history = (
        Message.user("Weather in Rome?"),
        first.message,
        Message("tool", (ToolResult("toolu_9", "get_weather", "Sunny"),)),
        # A turn from another wire: its reasoning must never reach Anthropic.
        Message("assistant", (Reasoning("chat thoughts", "openai-chat", signature="x"),
                              Text("Noted."))),
        Message.user("And tomorrow?"),
    )
    await complete(provider, ModelRequest(messages=history, tools=[WEATHER]))
    assert server.requests[1].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Weather needs a tool.", "signature": "SIG1"},
            {"type": "redacted_thinking", "data": "REDACTED1"},
            {"type": "tool_use", "id": "toolu_9", "name": "get_weather",
             "input": {"city": "Rome"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9",
                                      "content": "Sunny", "is_error": False}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
    ]


async def test_unknown_content_blocks_are_kept_and_replayed_as_they_came(server):
    server_tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                   "input": {"query": "tether"}}
    server.queue(Canned.json(message_json([server_tool, {"type": "text", "text": "Found."}])),
                 Canned.json(message_json([{"type": "text", "text": "ok"}])))
    provider = claude(server)
    first = await complete(provider, ask())
    assert first.message.text == "Found."
    await complete(provider, ModelRequest(messages=(Message.user("Hi"), first.message,
                                                    Message.user("More"))))
    assert server.requests[1].body["messages"][1]["content"] == [
        server_tool, {"type": "text", "text": "Found."}]


# --- the request body -------------------------------------------------------------------------


async def test_the_request_body_maps_system_tools_choice_and_max_tokens(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    await complete(claude(server), ModelRequest(
        messages=(Message("system", (Text("Be brief."),)), Message.user("Hi")),
        system="You are tether.", tools=[WEATHER], tool_choice="auto",
        max_output_tokens=321, temperature=0.2))
    assert server.requests[0].body == {
        "model": "claude-test", "max_tokens": 321, "stream": False, "temperature": 0.2,
        "system": "You are tether.\n\nBe brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "tools": [{"name": "get_weather", "description": "Get the weather for a city.",
                   "input_schema": WEATHER.schema_json}],
        "tool_choice": {"type": "auto"},
    }


async def test_max_tokens_defaults_when_the_request_sets_none(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    await complete(claude(server), ask())
    body = server.requests[0].body
    assert body["max_tokens"] == 4096
    assert "system" not in body and "tools" not in body and "tool_choice" not in body


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", {"type": "auto"}), ("none", {"type": "none"}), ("required", {"type": "any"}),
    (NamedToolChoice("get_weather"), {"type": "tool", "name": "get_weather"}),
])
async def test_tool_choice_modes_map_to_the_wire(server, choice, wire):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    await complete(claude(server), ask(tools=[WEATHER], tool_choice=choice))
    body = server.requests[0].body
    assert body["tool_choice"] == wire
    assert "disable_parallel_tool_use" not in body["tool_choice"]


async def test_tool_choice_is_left_out_without_tools(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    await complete(claude(server), ask(tool_choice="none"))
    assert "tool_choice" not in server.requests[0].body


async def test_tool_results_and_following_user_text_merge_into_one_user_message(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    history = (
        Message.user("Weather in Oslo and Rome?"),
        Message("assistant", (Text("Two calls."),
                              ToolCall("t1", "get_weather", '{"city": "Oslo"}'),
                              ToolCall("t2", "get_weather", '{"city": "Rome"}'))),
        Message("tool", (ToolResult("t1", "get_weather", "Rain"),
                         ToolResult("t2", "get_weather", "Error: timeout", is_error=True))),
        Message.user("Answer in one word."),
    )
    await complete(claude(server), ModelRequest(messages=history, tools=[WEATHER]))
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "Rain", "is_error": False},
        {"type": "tool_result", "tool_use_id": "t2", "content": "Error: timeout",
         "is_error": True},
        {"type": "text", "text": "Answer in one word."},
    ]


async def test_images_are_sent_inline_or_by_url(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    picture = Message("user", (Text("What is this?"),
                               Image("image/jpeg", data=b"\xff\xd8\xff"),
                               Image(url="https://example.com/cat.png")))
    await complete(claude(server), ModelRequest(messages=(picture,)))
    assert server.requests[0].body["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                     "data": "/9j/"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]


async def test_tool_call_arguments_that_are_not_json_are_sent_empty_with_the_raw_text_kept(
        server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    history = (Message.user("Go"),
               Message("assistant", (ToolCall("t1", "get_weather", '{"city": "Par'),)),
               Message("tool", (ToolResult("t1", "get_weather", "Error: not JSON", True),)))
    await complete(claude(server), ModelRequest(messages=history, tools=[WEATHER]))
    content = server.requests[0].body["messages"][1]["content"]
    assert content[1] == {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}
    assert content[0]["type"] == "text" and '{"city": "Par' in content[0]["text"]


async def test_empty_text_parts_and_messages_left_empty_are_not_sent(server):
    server.queue(Canned.json(message_json([{"type": "text", "text": "ok"}])))
    history = (Message.user("Hi"),
               Message("assistant", (Reasoning("other wire", "gemini"), Text(""))),
               Message.user("Again"))
    await complete(claude(server), ModelRequest(messages=history))
    assert server.requests[0].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                     {"type": "text", "text": "Again"}]}]


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "kind", "message", "error"), [
    (401, "authentication_error", "invalid x-api-key", AuthError),
    (403, "permission_error", "not allowed to use this model", PermissionDeniedError),
    (404, "not_found_error", "model: claude-nope", NotFoundError),
    (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum",
     ContextOverflowError),
    (400, "invalid_request_error", "messages: roles must alternate", BadRequestError),
    (500, "api_error", "Internal server error", ServerError),
])
async def test_http_errors_map_to_named_errors_without_retry(server, sleep, status, kind,
                                                             message, error):
    server.queue(Canned.json(error_json(kind, message), status))
    with pytest.raises(error) as caught:
        await complete(claude(server, sleep), ask())
    assert type(caught.value) is error
    assert message in str(caught.value) and caught.value.provider == "anthropic"
    assert caught.value.status == status
    assert len(server.requests) == 1 and sleep.waits == []


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_overflow_states_the_prompt_and_the_window_as_anthropic_words_them(
        server, streamed):
    # As an error status, and as an error event in a 200 stream.
    words = "prompt is too long: 210000 tokens > 200000 maximum"
    if streamed:
        server.queue(sse(start(), ("error", error_json("invalid_request_error", words))))
    else:
        server.queue(Canned.json(error_json("invalid_request_error", words), 400))
    with pytest.raises(ContextOverflowError) as caught:
        await complete(claude(server), ask(stream=streamed))
    assert (caught.value.prompt_tokens, caught.value.window) == (210000, 200000)


async def test_a_rate_limit_is_retried_after_the_wait_the_server_asked_for(server, sleep):
    server.queue(Canned.json(error_json("rate_limit_error", "slow down"), 429,
                             **{"retry-after": "3"}),
                 Canned.json(message_json([{"type": "text", "text": "ok"}])))
    chunks = await collect(claude(server, sleep), ask())
    assert sleep.waits == [3.0]
    assert isinstance(chunks[0], Retrying) and "slow down" in chunks[0].error
    assert chunks[0].wait_secs == 3.0
    assert isinstance(chunks[-1], Completed) and chunks[-1].response.message.text == "ok"
    assert len(server.requests) == 2


async def test_a_retry_after_beyond_the_cap_fails_fast_naming_the_wait(server, sleep):
    server.queue(Canned.json(error_json("rate_limit_error", "slow down"), 429,
                             **{"retry-after": "900"}))
    with pytest.raises(RateLimitError, match="900s"):
        await complete(claude(server, sleep, retry=RetryPolicy(retry_after_cap=60)), ask())
    assert sleep.waits == [] and len(server.requests) == 1


async def test_overloaded_529_is_retried_with_backoff_then_succeeds(server, sleep):
    server.queue(Canned.json(error_json("overloaded_error", "Overloaded"), 529),
                 Canned.json(error_json("overloaded_error", "Overloaded"), 529),
                 Canned.json(message_json([{"type": "text", "text": "finally"}])))
    response = await complete(claude(server, sleep), ask())
    assert response.message.text == "finally"
    assert len(sleep.waits) == 2 and all(0 < w <= 8 for w in sleep.waits)


async def test_overloaded_529_gives_up_after_the_retry_budget(server, sleep):
    server.queue(*[Canned.json(error_json("overloaded_error", "Overloaded"), 529)] * 3)
    with pytest.raises(OverloadedError, match="Overloaded"):
        await complete(claude(server, sleep, retry=RetryPolicy(max_retries=2)), ask())
    assert len(server.requests) == 3 and len(sleep.waits) == 2


async def test_an_overloaded_error_type_behind_another_status_is_still_overload(server, sleep):
    # A gateway in front of the API may turn 529 into a 500; the error type still says it.
    server.queue(Canned.json(error_json("overloaded_error", "Overloaded"), 500),
                 Canned.json(message_json([{"type": "text", "text": "ok"}])))
    response = await complete(claude(server, sleep), ask())
    assert response.message.text == "ok" and len(sleep.waits) == 1


async def test_an_error_event_mid_stream_raises_the_matching_error(server):
    server.queue(sse(start(), block(0, {"type": "text", "text": ""}),
                     delta(0, type="text_delta", text="Partial"),
                     ("error", error_json("overloaded_error", "Overloaded"))))
    seen: list[StreamChunk] = []
    sleep = FakeSleep()
    with pytest.raises(OverloadedError, match=r"Overloaded.*in the stream"):
        async for chunk in claude(server, sleep).stream(ask(stream=True)):
            seen.append(chunk)
    assert seen == [TextChunk("Partial")]
    # Text went out already: a retry would repeat it, so the error is raised as it is.
    assert len(server.requests) == 1 and sleep.waits == []


async def test_an_overloaded_event_right_after_message_start_is_retried(server, sleep):
    # message_start yields nothing to the caller, so no content went out yet.
    server.queue(sse(start(), ("error", error_json("overloaded_error", "Overloaded"))),
                 text_stream("Hello"))
    chunks = await collect(claude(server, sleep), ask(stream=True))
    assert isinstance(chunks[0], Retrying) and chunks[0].attempt == 1
    assert "Overloaded" in chunks[0].error
    assert chunks[1:-1] == [TextChunk("Hello")]
    assert isinstance(chunks[-1], Completed) and chunks[-1].response.message.text == "Hello"
    assert len(server.requests) == 2 and len(sleep.waits) == 1
    assert server.requests[0].body == server.requests[1].body


async def test_an_overloaded_event_after_an_empty_text_block_start_is_retried(server, sleep):
    server.queue(sse(start(), block(0, {"type": "text", "text": ""}), PING,
                     ("error", error_json("overloaded_error", "Overloaded"))),
                 text_stream("Hello"))
    response = await complete(claude(server, sleep), ask(stream=True))
    assert response.message.text == "Hello" and len(sleep.waits) == 1


async def test_an_invalid_request_event_before_content_is_not_retried(server, sleep):
    server.queue(sse(start(), ("error", error_json("invalid_request_error", "bad"))))
    with pytest.raises(BadRequestError, match="bad"):
        await complete(claude(server, sleep), ask(stream=True))
    assert len(server.requests) == 1 and sleep.waits == []


async def test_overload_over_http_and_in_the_stream_share_one_retry_budget(server, sleep):
    overloaded = Canned.json(error_json("overloaded_error", "Overloaded"), 529)
    server.queue(overloaded,
                 sse(start(), ("error", error_json("overloaded_error", "Overloaded"))),
                 overloaded, text_stream("never"))
    with pytest.raises(OverloadedError):
        await complete(claude(server, sleep, retry=RetryPolicy(max_retries=2)),
                       ask(stream=True))
    assert len(server.requests) == 3 and len(sleep.waits) == 2


async def test_an_agent_stream_reports_an_in_stream_overload_as_a_provider_retry(server,
                                                                                 sleep):
    server.queue(sse(start(), ("error", error_json("overloaded_error", "Overloaded"))),
                 text_stream("Hi there."))
    agent = Agent(claude(server, sleep))
    events = [e async for e in agent.stream("Hi")]
    await agent.aclose()
    retries = [e for e in events if isinstance(e, ProviderRetry)]
    assert len(retries) == 1 and "Overloaded" in retries[0].error
    assert isinstance(events[-1], RunFinished) and events[-1].result.text == "Hi there."


async def test_the_tokens_a_failed_stream_reported_before_its_error_are_counted(server,
                                                                               sleep):
    # message_start reported the prompt the server read (40 tokens) before it overloaded.
    server.queue(sse(start(input_tokens=40, output_tokens=1),
                     ("error", error_json("overloaded_error", "Overloaded"))),
                 text_stream("Hi there."))
    agent = Agent(claude(server, sleep))
    events = [e async for e in agent.stream("Hi")]
    await agent.aclose()
    (retry,) = [e for e in events if isinstance(e, ProviderRetry)]
    assert (retry.usage.input_tokens, retry.usage.output_tokens, retry.usage.requests) == (
        40, 1, 1)
    assert isinstance(events[-1], RunFinished)
    usage = events[-1].result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.requests) == (50, 8, 2)
    assert usage.unreported_requests == 0


@pytest.mark.parametrize(("kind", "error"), [
    ("rate_limit_error", RateLimitError), ("invalid_request_error", BadRequestError),
    ("api_error", ServerError),
])
async def test_error_events_are_typed_by_their_error_type(server, kind, error):
    server.queue(sse(start(), ("error", error_json(kind, "went wrong"))))
    # No retries: the retryable kinds would otherwise be retried (no content came yet).
    with pytest.raises(error, match="went wrong"):
        await complete(claude(server, retry=RetryPolicy(max_retries=0)), ask(stream=True))


async def test_an_error_object_in_a_200_answer_is_a_typed_error(server):
    server.queue(Canned.json(error_json("overloaded_error", "Overloaded")))
    with pytest.raises(OverloadedError, match="Overloaded"):
        await complete(claude(server, retry=RetryPolicy(max_retries=0)), ask())


async def test_a_body_that_is_not_json_is_a_malformed_response(server):
    server.queue(Canned(200, b"<html>gateway</html>", {"content-type": "application/json"}))
    with pytest.raises(MalformedResponseError, match="not JSON"):
        await complete(claude(server), ask())


async def test_a_json_answer_without_content_is_a_malformed_response(server):
    server.queue(Canned.json({"id": "msg_1", "type": "message"}))
    with pytest.raises(MalformedResponseError, match="no content"):
        await complete(claude(server), ask())


async def test_a_stream_event_that_is_not_json_is_a_malformed_response(server):
    server.queue(Canned(200, ["event: message_start\ndata: {not json\n\n"],
                        {"content-type": "text/event-stream"}))
    with pytest.raises(MalformedResponseError, match="stream event is not JSON"):
        await complete(claude(server), ask(stream=True))


async def test_a_stream_that_ends_before_message_stop_is_a_malformed_response(server):
    server.queue(sse(start(), block(0, {"type": "text", "text": ""}),
                     delta(0, type="text_delta", text="cut")))
    with pytest.raises(MalformedResponseError, match="before message_stop"):
        await complete(claude(server), ask(stream=True))


async def test_a_stalled_stream_fails_with_the_idle_timeout(server):
    stall = threading.Event()
    server.queue(sse(start(), block(0, {"type": "text", "text": ""}),
                     delta(0, type="text_delta", text="Hel"), stall,
                     delta(0, type="text_delta", text="lo"), stop_block(0),
                     *finish("end_turn", 2)))
    seen: list[StreamChunk] = []
    try:
        with pytest.raises(ProviderTimeout, match="stalled"):
            async for chunk in claude(server, timeouts=Timeouts(read=0.2)).stream(
                    ask(stream=True)):
                seen.append(chunk)
    finally:
        stall.set()
    assert seen == [TextChunk("Hel")]


# --- an agent run through the adapter ---------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"Sunny, 22C in {city}"


def tool_turn(streamed: bool) -> Canned:
    if not streamed:
        return Canned.json(message_json([
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_w", "name": "get_weather",
             "input": {"city": "Paris"}}], stop="tool_use"))
    return sse(start(), block(0, {"type": "text", "text": ""}),
               delta(0, type="text_delta", text="Checking."), stop_block(0),
               block(1, {"type": "tool_use", "id": "toolu_w", "name": "get_weather",
                         "input": {}}),
               delta(1, type="input_json_delta", partial_json='{"city":'),
               delta(1, type="input_json_delta", partial_json=' "Paris"}'), stop_block(1),
               *finish("tool_use", 20))


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_an_agent_runs_one_tool_call_through_anthropic(server, streamed):
    server.queue(tool_turn(streamed),
                 text_stream("It is sunny", " in Paris.") if streamed else Canned.json(
                     message_json([{"type": "text", "text": "It is sunny in Paris."}])))
    agent = Agent(claude(server), tools=[get_weather], system_prompt="Be brief.")
    if streamed:
        events = [e async for e in agent.stream("Weather in Paris?")]
        assert isinstance(events[-1], RunFinished)
        result = events[-1].result
        deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert deltas == "Checking.It is sunny in Paris."
    else:
        result = await agent.run("Weather in Paris?")
    await agent.aclose()
    assert result.text == "It is sunny in Paris."
    assert [(c.name, c.input) for c in result.tool_calls] == [("get_weather",
                                                               {"city": "Paris"})]
    bodies = list(server.bodies())
    assert [b["stream"] for b in bodies] == [streamed, streamed]
    assert bodies[1]["system"] == "Be brief."
    assert bodies[1]["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_w", "name": "get_weather",
             "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_w",
                                      "content": "Sunny, 22C in Paris", "is_error": False}]},
    ]
    assert json.loads(json.dumps(bodies[1]["tools"]))[0]["name"] == "get_weather"
