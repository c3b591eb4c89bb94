"""The Gemini adapter against a real HTTP server on 127.0.0.1.

Hand-written wire fixtures: one per error class, streamed and whole answers, thought
signatures carried to the next request, and the request body the adapter builds. Retries
wait through a fake ``sleep`` that only records.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator
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
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    ServerError,
)
from tether.events import RunFinished, TextDelta
from tether.messages import Image, Message, Reasoning, Text, ToolCall, ToolResult
from tether.outcome import StopCause
from tether.providers.base import (
    Completed,
    ModelRequest,
    NamedToolChoice,
    Provider,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    complete,
)
from tether.providers.gemini import SKIP_SIGNATURE, Gemini
from tether.providers.http.retry import RetryPolicy
from tether.providers.http.transport import Timeouts
from tether.tools.function import tool
from tether.tools.spec import ToolSpec

WEATHER = ToolSpec("get_weather", "Get the weather for a city.",
                   {"$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"], "additionalProperties": False})
SIG_A = "CusBAXLI2nxjqlNFmkZhFvBKYO2Qbvj3E+G7N6Bml=="
SIG_B = "Cu4BAXLI2nycYMBX9tXHnlLYlEcsaa/06Vuho7Z=="


def gemini(srv: LoopbackServer, sleep: FakeSleep | None = None, **kw: Any) -> Gemini:
    return Gemini(srv.url, "gemini-test", api_key="g-test", sleep=sleep or FakeSleep(), **kw)


def answer(parts: list[dict[str, Any]], finish: str | None = "STOP",
           usage: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    data: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-test-001",
                            "responseId": "resp-1", **extra}
    if usage is not None:
        data["usageMetadata"] = usage
    return data


def call_part(name: str, args: dict[str, Any], signature: str | None = None,
              **extra: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": args, **extra}}
    if signature:
        part["thoughtSignature"] = signature
    return part


def gerror(code: int, status: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, **extra}}


# --- whole answers ------------------------------------------------------------------------------


async def test_a_whole_answer_becomes_text_with_stop_usage_model_and_id(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer(
        [{"text": "Paris."}],
        usage={"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15})))
    response = await complete(gemini(server), ask("Capital of France?"))
    assert response.message == Message("assistant", (Text("Paris."),))
    assert response.stop_reason == "end_turn"
    assert response.raw_stop_reason == "STOP"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    assert response.usage.requests == 1
    assert (response.model, response.id) == ("gemini-test-001", "resp-1")


async def test_whole_request_posts_generate_content_with_the_key_header(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ask())
    sent = server.requests[0]
    assert sent.method == "POST"
    assert sent.path == "/models/gemini-test:generateContent"
    assert sent.headers["x-goog-api-key"] == "g-test"
    assert "authorization" not in sent.headers


async def test_a_function_call_gets_an_id_its_parsed_args_and_its_signature(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([call_part("get_weather", {"city": "Paris"}, SIG_A)],
                                    finishMessage="Model generated function call(s).")))
    response = await complete(gemini(server), ask("Weather?", tools=[WEATHER]))
    (tc,) = response.message.tool_calls
    assert tc.name == "get_weather"
    assert tc.parsed_arguments() == {"city": "Paris"}
    assert tc.id  # Gemini sends none: the adapter makes one
    assert tc.provider_data == {"provider": "gemini", "thoughtSignature": SIG_A}
    assert response.stop_reason == "tool_calls"
    assert response.raw_stop_reason == "STOP"


async def test_two_calls_in_one_turn_get_distinct_ids(server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([call_part("get_weather", {"city": "Paris"}, SIG_A),
                                     call_part("get_weather", {"city": "Rome"})])))
    response = await complete(gemini(server), ask(tools=[WEATHER]))
    first, second = response.message.tool_calls
    assert [first.parsed_arguments(), second.parsed_arguments()] == [
        {"city": "Paris"}, {"city": "Rome"}]
    assert first.id != second.id
    assert second.provider_data == {"provider": "gemini"}


async def test_an_id_gemini_sends_is_kept_and_sent_back_on_call_and_response(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([call_part("get_weather", {"city": "Oslo"}, id="fc-7")])))
    model = gemini(server)
    response = await complete(model, ask(tools=[WEATHER]))
    (tc,) = response.message.tool_calls
    assert tc.id == "fc-7"
    server.queue(Canned.json(answer([{"text": "Cold."}])))
    await complete(model, ModelRequest(messages=(
        Message.user("Weather?"), response.message,
        Message("tool", (ToolResult("fc-7", "get_weather", "-3C"),))), tools=[WEATHER]))
    contents = server.requests[1].body["contents"]
    assert contents[1]["parts"][0]["functionCall"]["id"] == "fc-7"
    assert contents[2]["parts"][0]["functionResponse"] == {
        "name": "get_weather", "response": {"output": "-3C"}, "id": "fc-7"}


async def test_generated_ids_are_never_sent_to_gemini(server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([call_part("get_weather", {"city": "Paris"}, SIG_A)])))
    model = gemini(server)
    first = await complete(model, ask(tools=[WEATHER]))
    (tc,) = first.message.tool_calls
    server.queue(Canned.json(answer([{"text": "Sunny."}])))
    await complete(model, ModelRequest(messages=(
        Message.user("Hi"), first.message,
        Message("tool", (ToolResult(tc.id, "get_weather", "Sunny"),))), tools=[WEATHER]))
    model_turn, results = server.requests[1].body["contents"][1:]
    assert model_turn == {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
         "thoughtSignature": SIG_A}]}
    assert results == {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"output": "Sunny"}}}]}


async def test_thought_signatures_round_trip_exactly_on_text_and_calls(
        server: LoopbackServer) -> None:
    parts: list[dict[str, Any]] = [
        {"text": "Weighing the cities.", "thought": True, "thoughtSignature": SIG_B},
        {"text": "Let me look.", "thoughtSignature": SIG_A},
        call_part("get_weather", {"city": "Paris"}, "c2lnLWM="),
        call_part("get_weather", {"city": "Rome"}),
        {"text": "", "thoughtSignature": "c2lnLWVuZA=="},
    ]
    server.queue(Canned.json(answer(parts)))
    model = gemini(server)
    response = await complete(model, ask(tools=[WEATHER]))
    assert response.message.text == "Let me look."
    assert response.message.parts[0] == Reasoning("Weighing the cities.", "gemini",
                                                  signature=SIG_B)
    calls = response.message.tool_calls
    server.queue(Canned.json(answer([{"text": "Done."}])))
    results = tuple(ToolResult(c.id, c.name, "ok") for c in calls)
    await complete(model, ModelRequest(messages=(
        Message.user("Hi"), response.message, Message("tool", results)), tools=[WEATHER]))
    assert server.requests[1].body["contents"][1] == {"role": "model", "parts": parts}


async def test_gemini_reasoning_never_reaches_another_provider_and_foreign_reasoning_is_dropped(
        server: LoopbackServer) -> None:
    history = Message("assistant", (
        Reasoning("claude thinking", "anthropic", signature="sig-anthropic"),
        Text("Hello."),
    ))
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ModelRequest(messages=(
        Message.user("Hi"), history, Message.user("Again"))))
    assert server.requests[0].body["contents"][1] == {"role": "model",
                                                      "parts": [{"text": "Hello."}]}


async def test_a_call_from_another_model_goes_with_the_documented_skip_signature(
        server: LoopbackServer) -> None:
    foreign = Message("assistant", (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),))
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ModelRequest(messages=(
        Message.user("Hi"), foreign,
        Message("tool", (ToolResult("call_1", "get_weather", "Sunny", is_error=True),))),
        tools=[WEATHER]))
    model_turn, results = server.requests[0].body["contents"][1:]
    assert model_turn["parts"] == [{"functionCall": {"name": "get_weather",
                                                     "args": {"city": "Paris"}},
                                    "thoughtSignature": SKIP_SIGNATURE}]
    assert results["parts"][0]["functionResponse"]["response"] == {"error": "Sunny"}


async def test_arguments_that_are_not_a_json_object_go_as_empty_args_with_the_raw_text(
        server: LoopbackServer) -> None:
    broken = Message("assistant", (ToolCall("c1", "get_weather", '{"city": "Par'),))
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ModelRequest(messages=(Message.user("Hi"), broken)))
    parts = server.requests[0].body["contents"][1]["parts"]
    assert parts[0]["functionCall"] == {"name": "get_weather", "args": {}}
    assert '{"city": "Par' in parts[1]["text"]


@pytest.mark.parametrize(("finish", "stop"), [
    ("MAX_TOKENS", "max_tokens"), ("SAFETY", "content_filter"),
    ("RECITATION", "content_filter"), ("PROHIBITED_CONTENT", "content_filter"),
    ("BLOCKLIST", "content_filter"), ("MALFORMED_FUNCTION_CALL", "other"), ("OTHER", "other"),
])
async def test_finish_reasons_map_to_stop_reasons(server: LoopbackServer, finish: str,
                                                  stop: str) -> None:
    server.queue(Canned.json(answer([{"text": "x"}], finish=finish)))
    response = await complete(gemini(server), ask())
    assert (response.stop_reason, response.raw_stop_reason) == (stop, finish)


async def test_a_blocked_prompt_has_no_candidate_and_stops_as_content_filter(
        server: LoopbackServer) -> None:
    server.queue(Canned.json({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                              "usageMetadata": {"promptTokenCount": 9}}))
    response = await complete(gemini(server), ask())
    assert response.message.parts == ()
    assert response.stop_reason == "content_filter"
    assert "PROHIBITED_CONTENT" in (response.raw_stop_reason or "")


async def test_usage_counts_thoughts_as_output_and_cached_tokens_inside_the_prompt(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"text": "x"}], usage={
        "promptTokenCount": 100, "cachedContentTokenCount": 60, "candidatesTokenCount": 15,
        "thoughtsTokenCount": 48, "totalTokenCount": 163})))
    usage = (await complete(gemini(server), ask())).usage
    assert usage.input_tokens == 100  # the whole prompt, cached part included
    assert usage.cache_read_tokens == 60
    assert usage.output_tokens == 63
    assert usage.details == {"reasoning_tokens": 48}


async def test_an_image_in_the_answer_becomes_an_image_part(server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"inlineData": {"mimeType": "image/png",
                                                     "data": "iVBORw0K"}}])))
    response = await complete(gemini(server), ask())
    (image,) = response.message.parts
    assert isinstance(image, Image) and image.media_type == "image/png"


async def test_an_unknown_part_is_kept_for_gemini_and_replayed_as_it_came(
        server: LoopbackServer) -> None:
    code = {"executableCode": {"language": "PYTHON", "code": "print(1)"}}
    server.queue(Canned.json(answer([code, {"text": "1"}])))
    model = gemini(server)
    response = await complete(model, ask())
    assert response.message.text == "1"
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(model, ModelRequest(messages=(Message.user("Hi"), response.message)))
    assert server.requests[1].body["contents"][1]["parts"] == [code, {"text": "1"}]


# --- the request body ----------------------------------------------------------------------------


async def test_request_body_carries_system_tools_config_and_generation_settings(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ModelRequest(
        messages=(Message("system", (Text("Be brief."),)), Message.user("Hi")),
        system="You are helpful.", tools=[WEATHER], max_output_tokens=256, temperature=0.2))
    body = server.requests[0].body
    assert body == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"parts": [{"text": "You are helpful.\n\nBe brief."}]},
        "tools": [{"functionDeclarations": [{
            "name": "get_weather", "description": "Get the weather for a city.",
            "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}},
                                     "required": ["city"], "additionalProperties": False}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"maxOutputTokens": 256, "temperature": 0.2},
    }


async def test_no_tools_means_no_tools_and_no_tool_config(server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ask())
    assert server.requests[0].body == {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}


async def test_a_tool_without_parameters_is_declared_as_an_empty_object(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ask(tools=[ToolSpec("now", "The time.", {})]))
    (decl,) = server.requests[0].body["tools"][0]["functionDeclarations"]
    assert decl["parametersJsonSchema"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize(("choice", "config"), [
    ("auto", {"mode": "AUTO"}),
    ("none", {"mode": "NONE"}),
    ("required", {"mode": "ANY"}),
    (NamedToolChoice("get_weather"), {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
])
async def test_tool_choice_maps_to_function_calling_modes(
        server: LoopbackServer, choice: Any, config: dict[str, Any]) -> None:
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ask(tools=[WEATHER], tool_choice=choice))
    assert server.requests[0].body["toolConfig"] == {"functionCallingConfig": config}


async def test_images_go_inline_or_by_uri(server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"text": "a cat"}])))
    await complete(gemini(server), ModelRequest(messages=(Message("user", (
        Text("What is this?"),
        Image("image/png", data=b"\x89PNG"),
        Image("image/jpeg", url="data:image/jpeg;base64,/9j/"),
        Image("image/png", url="gs://bucket/cat.png"),
    )),)))
    assert server.requests[0].body["contents"][0]["parts"] == [
        {"text": "What is this?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}},
        {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/"}},
        {"fileData": {"mimeType": "image/png", "fileUri": "gs://bucket/cat.png"}},
    ]


async def test_tool_results_and_a_following_user_message_share_one_user_content(
        server: LoopbackServer) -> None:
    calls = Message("assistant", (
        ToolCall("a", "get_weather", '{"city": "Paris"}', {"provider": "gemini"}),
        ToolCall("b", "get_weather", '{"city": "Rome"}', {"provider": "gemini"})))
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server), ModelRequest(messages=(
        Message.user("Both?"), calls,
        Message("tool", (ToolResult("a", "get_weather", "Sunny"),
                         ToolResult("b", "get_weather", "Rain"))),
        Message.user("And tomorrow?"))))
    contents = server.requests[0].body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "Sunny"}}},
        {"functionResponse": {"name": "get_weather", "response": {"output": "Rain"}}},
        {"text": "And tomorrow?"},
    ]


def test_a_models_prefix_is_accepted_and_with_model_returns_a_copy() -> None:
    model = Gemini(model="models/gemini-2.5-flash", api_key="k")
    other = model.with_model("gemini-2.5-pro")
    assert (model.model, other.model, other.name) == ("gemini-2.5-flash", "gemini-2.5-pro",
                                                      "gemini")
    assert other is not model and other.base_url == model.base_url
    assert isinstance(other, Provider)


def test_a_missing_key_variable_or_model_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        Gemini(model="gemini-2.5-flash")
    with pytest.raises(ConfigError, match="model is required"):
        Gemini(api_key="k")


async def test_the_key_is_read_from_the_named_environment_variable(
        server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_GEMINI_KEY", "from-env")
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(Gemini(server.url, "m", api_key_env="MY_GEMINI_KEY"), ask())
    assert server.requests[0].headers["x-goog-api-key"] == "from-env"


# --- streaming ----------------------------------------------------------------------------------


def sse(*chunks: Any) -> Canned:
    return Canned.sse(list(chunks), done=False)


async def test_a_stream_yields_text_deltas_then_the_whole_message_with_last_usage(
        server: LoopbackServer) -> None:
    server.queue(sse(
        answer([{"text": "The"}], finish=None, usage={"promptTokenCount": 15}),
        answer([{"text": " capital"}], finish=None, usage={"promptTokenCount": 15}),
        answer([{"text": " is Paris."}], usage={"promptTokenCount": 13,
                                                "candidatesTokenCount": 8}),
    ))
    chunks = await collect(gemini(server), ask(stream=True))
    assert chunks[:3] == [TextChunk("The"), TextChunk(" capital"), TextChunk(" is Paris.")]
    final = chunks[-1]
    assert isinstance(final, Completed)
    assert final.response.message == Message("assistant", (Text("The capital is Paris."),))
    assert final.response.stop_reason == "end_turn"
    assert (final.response.usage.input_tokens, final.response.usage.output_tokens) == (13, 8)
    assert server.requests[0].path == "/models/gemini-test:streamGenerateContent?alt=sse"


async def test_a_streamed_thought_and_call_yield_reasoning_and_whole_call_chunks(
        server: LoopbackServer) -> None:
    server.queue(sse(
        answer([{"text": "Thinking about", "thought": True}], finish=None),
        answer([{"text": " Paris.", "thought": True}], finish=None),
        answer([call_part("get_weather", {"city": "Paris"}, SIG_A),
                call_part("get_weather", {"city": "Rome"})],
               usage={"promptTokenCount": 20, "candidatesTokenCount": 10,
                      "thoughtsTokenCount": 30}),
    ))
    chunks = await collect(gemini(server), ask(tools=[WEATHER], stream=True))
    assert chunks[:2] == [ReasoningChunk("Thinking about"), ReasoningChunk(" Paris.")]
    call_chunks = [c for c in chunks if isinstance(c, ToolCallChunk)]
    final = chunks[-1]
    assert isinstance(final, Completed)
    calls = final.response.message.tool_calls
    assert [(c.index, c.id, c.name) for c in call_chunks] == [
        (0, calls[0].id, "get_weather"), (1, calls[1].id, "get_weather")]
    assert [c.arguments_delta for c in call_chunks] == [calls[0].arguments, calls[1].arguments]
    assert final.response.message.parts[0] == Reasoning("Thinking about Paris.", "gemini")
    assert calls[0].provider_data == {"provider": "gemini", "thoughtSignature": SIG_A}
    assert final.response.stop_reason == "tool_calls"
    assert final.response.usage.output_tokens == 40


async def test_a_signature_on_the_last_streamed_chunk_goes_back_on_the_text(
        server: LoopbackServer) -> None:
    server.queue(sse(answer([{"text": "Hello"}], finish=None),
                     answer([{"text": " there"}], finish=None),
                     answer([{"text": "", "thoughtSignature": SIG_A}])))
    model = gemini(server)
    chunks = await collect(model, ask(stream=True))
    final = chunks[-1]
    assert isinstance(final, Completed)
    assert final.response.message.text == "Hello there"
    server.queue(Canned.json(answer([{"text": "ok"}])))
    await complete(model, ModelRequest(messages=(Message.user("Hi"), final.response.message)))
    assert server.requests[1].body["contents"][1]["parts"] == [
        {"text": "Hello there", "thoughtSignature": SIG_A}]


async def test_a_stream_request_answered_with_json_is_parsed_whole(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"text": "whole"}])))
    chunks = await collect(gemini(server), ask(stream=True))
    assert len(chunks) == 1 and isinstance(chunks[0], Completed)
    assert chunks[0].response.message.text == "whole"


async def test_a_stream_request_answered_with_a_json_array_merges_the_chunks(
        server: LoopbackServer) -> None:
    server.queue(Canned.json([answer([{"text": "a"}], finish=None), answer([{"text": "b"}])]))
    response = await complete(gemini(server), ask(stream=True))
    assert response.message.text == "ab"


async def test_an_error_inside_the_stream_is_raised_as_its_class(
        server: LoopbackServer) -> None:
    server.queue(sse(answer([{"text": "par"}], finish=None),
                     gerror(500, "INTERNAL", "An internal error has occurred.")))
    with pytest.raises(ServerError, match="INTERNAL"):
        await collect(gemini(server), ask(stream=True))


async def test_malformed_json_in_a_stream_is_a_malformed_response(
        server: LoopbackServer) -> None:
    server.queue(Canned(200, ["data: {not json\n\n"], {"content-type": "text/event-stream"}))
    with pytest.raises(MalformedResponseError, match="stream chunk is not JSON"):
        await collect(gemini(server), ask(stream=True))


async def test_a_stream_that_ends_before_its_first_chunk_is_a_malformed_response(
        server: LoopbackServer) -> None:
    server.queue(Canned(200, [": keep-alive\n\n"], {"content-type": "text/event-stream"}))
    with pytest.raises(MalformedResponseError, match="before its first chunk"):
        await collect(gemini(server, retry=RetryPolicy(max_retries=0)), ask(stream=True))


async def test_a_stalled_stream_fails_with_a_timeout_after_the_idle_limit(
        server: LoopbackServer) -> None:
    release = threading.Event()
    server.queue(Canned.sse([answer([{"text": "Hel"}], finish=None), release], done=False))
    model = gemini(server, timeouts=Timeouts(read=0.2), retry=RetryPolicy(max_retries=0))
    seen: list[StreamChunk] = []
    try:
        with pytest.raises(ProviderTimeout, match="stalled"):
            async for chunk in model.stream(ask(stream=True)):
                seen.append(chunk)
    finally:
        release.set()
    assert seen == [TextChunk("Hel")]


async def test_closing_a_stream_early_releases_the_connection_cleanly(
        server: LoopbackServer) -> None:
    release = threading.Event()
    server.queue(Canned.sse([answer([{"text": "Hel"}], finish=None), release], done=False))
    model = gemini(server)
    stream = model.stream(ask(stream=True))
    try:
        assert await anext(stream) == TextChunk("Hel")
        assert isinstance(stream, AsyncGenerator)
        await stream.aclose()  # what cancelling a run does to the adapter's generator
    finally:
        release.set()
    server.queue(Canned.json(answer([{"text": "again"}])))
    assert (await complete(model, ask())).message.text == "again"
    await model.aclose()


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "body", "cls", "words"), [
    (401, gerror(401, "UNAUTHENTICATED", "Request had invalid authentication credentials."),
     AuthError, "check the API key"),
    (400, gerror(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                 details=[{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                           "reason": "API_KEY_INVALID"}]),
     AuthError, "API key not valid"),
    (403, gerror(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."),
     PermissionDeniedError, "PERMISSION_DENIED"),
    (404, gerror(404, "NOT_FOUND", "models/gemini-nope is not found for API version v1beta"),
     NotFoundError, "check base_url and model"),
    (400, gerror(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not "
                 "specified"), BadRequestError, "INVALID_ARGUMENT"),
    (400, gerror(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum "
                 "number of tokens allowed (1048576)."), ContextOverflowError, "no longer fits"),
    (500, gerror(500, "INTERNAL", "An internal error has occurred."), ServerError, "INTERNAL"),
    (500, "<html>oops</html>", ServerError, "oops"),
])
async def test_each_error_class_is_named(server: LoopbackServer, status: int, body: Any,
                                         cls: type[ProviderError], words: str) -> None:
    server.queue(Canned.json(body, status) if isinstance(body, dict) else Canned(status, body))
    with pytest.raises(cls, match=words) as info:
        await complete(gemini(server), ask())
    assert info.value.status == status and info.value.provider == "gemini"
    if cls is BadRequestError:
        assert type(info.value) is BadRequestError
    assert len(server.requests) == 1  # none of these is retried


@pytest.mark.parametrize(("message", "numbers"), [
    ("The input token count (1200000) exceeds the maximum number of tokens allowed "
     "(1048576).", (1200000, 1048576)),
    ("the input is too long for the context window", (None, None)),
])
async def test_an_overflow_states_the_prompt_and_the_window_as_gemini_words_them(
        server: LoopbackServer, message: str, numbers: tuple[int | None, int | None]) -> None:
    server.queue(Canned.json(gerror(400, "INVALID_ARGUMENT", message), 400))
    with pytest.raises(ContextOverflowError) as caught:
        await complete(gemini(server), ask())
    assert (caught.value.prompt_tokens, caught.value.window) == numbers


async def test_rate_limit_is_retried_honouring_retry_after(
        server: LoopbackServer, sleep: FakeSleep) -> None:
    server.queue(Canned.json(gerror(429, "RESOURCE_EXHAUSTED", "Quota exceeded."), 429,
                             **{"retry-after": "7"}),
                 Canned.json(answer([{"text": "ok"}])))
    chunks = await collect(gemini(server, sleep), ask())
    assert isinstance(chunks[0], Retrying) and "RESOURCE_EXHAUSTED" in chunks[0].error
    assert sleep.waits == [7.0]
    assert isinstance(chunks[-1], Completed) and len(server.requests) == 2


async def test_rate_limit_without_a_header_waits_the_retry_info_delay(
        server: LoopbackServer, sleep: FakeSleep) -> None:
    server.queue(Canned.json(gerror(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", details=[
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}]), 429),
        Canned.json(answer([{"text": "ok"}])))
    await complete(gemini(server, sleep), ask())
    assert sleep.waits == [37.0]


async def test_a_retry_delay_beyond_the_cap_fails_at_once_naming_the_wait(
        server: LoopbackServer, sleep: FakeSleep) -> None:
    server.queue(Canned.json(gerror(429, "RESOURCE_EXHAUSTED", "Quota exceeded."), 429,
                             **{"retry-after": "3600"}))
    with pytest.raises(RateLimitError, match="3600s") as info:
        await complete(gemini(server, sleep, retry=RetryPolicy(retry_after_cap=60)), ask())
    assert info.value.retry_after == 3600
    assert sleep.waits == [] and len(server.requests) == 1


async def test_unavailable_is_retried_with_backoff_then_fails_as_overloaded(
        server: LoopbackServer, sleep: FakeSleep) -> None:
    busy = gerror(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
    server.queue(*(Canned.json(busy, 503) for _ in range(3)))
    with pytest.raises(OverloadedError, match="UNAVAILABLE"):
        await complete(gemini(server, sleep, retry=RetryPolicy(max_retries=2)), ask())
    assert len(sleep.waits) == 2 and len(server.requests) == 3


async def test_unavailable_then_an_answer_succeeds(server: LoopbackServer,
                                                   sleep: FakeSleep) -> None:
    server.queue(Canned.json(gerror(503, "UNAVAILABLE", "overloaded"), 503),
                 Canned.json(answer([{"text": "ok"}])))
    response = await complete(gemini(server, sleep), ask(stream=True))
    assert response.message.text == "ok" and len(sleep.waits) == 1


async def test_malformed_json_is_a_malformed_response(server: LoopbackServer) -> None:
    server.queue(Canned(200, b"{truncated", {"content-type": "application/json"}))
    with pytest.raises(MalformedResponseError, match="not JSON"):
        await complete(gemini(server), ask())


async def test_a_function_call_without_a_name_is_a_malformed_response(
        server: LoopbackServer) -> None:
    server.queue(Canned.json(answer([{"functionCall": {"args": {}}}])))
    with pytest.raises(MalformedResponseError, match="without a name"):
        await complete(gemini(server), ask())


# --- an agent run -------------------------------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"Sunny in {city}"


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agent_runs_one_tool_call_through_gemini(server: LoopbackServer,
                                                          streamed: bool) -> None:
    first = answer([call_part("get_weather", {"city": "Paris"}, SIG_A)],
                   usage={"promptTokenCount": 30, "candidatesTokenCount": 5})
    second = answer([{"text": "It is sunny in Paris."}],
                    usage={"promptTokenCount": 50, "candidatesTokenCount": 7})
    server.queue(*((sse(first), sse(second)) if streamed
                   else (Canned.json(first), Canned.json(second))))
    agent = Agent(gemini(server), tools=[get_weather], system_prompt="Be brief.")
    if streamed:
        events = [e async for e in agent.stream("Weather in Paris?")]
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
            "It is sunny in Paris.")
        finished = events[-1]
        assert isinstance(finished, RunFinished)
        result = finished.result
    else:
        result = await agent.run("Weather in Paris?")
    assert result.text == "It is sunny in Paris."
    assert result.stop_cause == StopCause.COMPLETED
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (80, 12)
    assert server.requests[0].body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert server.requests[1].body["contents"][2]["parts"][0] == {"functionResponse": {
        "name": "get_weather", "response": {"output": "Sunny in Paris"}}}
    model_turn = server.requests[1].body["contents"][1]
    assert model_turn["parts"][0]["thoughtSignature"] == SIG_A
    expected = ":streamGenerateContent?alt=sse" if streamed else ":generateContent"
    assert all(r.path.endswith(expected) for r in server.requests)
