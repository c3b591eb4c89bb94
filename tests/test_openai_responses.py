"""OpenAIResponses against a real HTTP server on 127.0.0.1: wire mapping, streams, errors."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.providers.helpers import FakeSleep, ask, collect
from tests.servers.http import Canned, LoopbackServer
from tether import Agent, tool
from tether.errors import (
    AuthError,
    BadRequestError,
    ConfigError,
    ContextOverflowError,
    MalformedResponseError,
    NotFoundError,
    PermissionDeniedError,
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    ServerError,
)
from tether.messages import Image, Message, Reasoning, Text, ToolCall, ToolResult
from tether.providers import NamedToolChoice, OpenAIResponses, Provider
from tether.providers.base import (
    Completed,
    ModelRequest,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
    complete,
)
from tether.providers.http.retry import RetryPolicy
from tether.providers.http.transport import Timeouts
from tether.tools.spec import ToolSpec

WEATHER = ToolSpec("get_weather", "Weather for a city.",
                   {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]})


def provider(srv: LoopbackServer, model: str = "gpt-5-mini", **kw: Any) -> OpenAIResponses:
    kw.setdefault("sleep", FakeSleep())
    return OpenAIResponses(f"{srv.url}/v1", model=model, api_key="sk-test", **kw)


# --- wire fixtures ---------------------------------------------------------------------------


def message_item(text: str, id: str = "msg_1") -> dict[str, Any]:
    return {"type": "message", "id": id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call_item(name: str, arguments: str, call_id: str, id: str) -> dict[str, Any]:
    return {"type": "function_call", "id": id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}


def reasoning_item(id: str = "rs_1", encrypted: str | None = "ENC",
                   summary: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": id, "summary": (
        [{"type": "summary_text", "text": summary}] if summary else [])}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def response(*output: dict[str, Any], status: str = "completed",
             incomplete: str | None = None, usage: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    return {
        "id": "resp_1", "object": "response", "model": "gpt-5-mini-2025-08-07",
        "status": status, "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "output": list(output),
        "usage": usage if usage is not None else {
            "input_tokens": 50, "input_tokens_details": {"cached_tokens": 12},
            "output_tokens": 81, "output_tokens_details": {"reasoning_tokens": 64},
            "total_tokens": 131},
    }


def sse(*events: dict[str, Any] | threading.Event) -> Canned:
    return Canned.sse([e if isinstance(e, threading.Event) else (e["type"], e) for e in events],
                      named=True, done=False)


def ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def completed(resp: dict[str, Any]) -> dict[str, Any]:
    return ev("response.completed", response=resp)


# --- non-streamed answers --------------------------------------------------------------------


async def test_a_text_answer_becomes_an_assistant_message_with_usage(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("Paris."))))
    result = await complete(provider(server), ask("Capital of France?"))
    assert result.message == Message("assistant", (Text("Paris."),))
    assert result.stop_reason == "end_turn"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (50, 81)
    assert result.usage.cache_read_tokens == 12
    assert result.usage.details == {"reasoning_tokens": 64}
    assert result.usage.requests == 1
    assert (result.model, result.id) == ("gpt-5-mini-2025-08-07", "resp_1")


async def test_the_request_posts_to_responses_with_a_bearer_key(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    await complete(provider(server, model="gpt-4o"), ask("Hi", system="Be brief."))
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body == {
        "model": "gpt-4o", "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "store": False, "stream": False,
    }


async def test_two_function_calls_in_one_turn_use_call_ids_and_keep_item_ids(
        server: LoopbackServer):
    server.queue(Canned.json(response(
        reasoning_item(),
        call_item("get_weather", '{"city":"Paris"}', "call_a", "fc_a"),
        call_item("get_weather", '{"city":"Rome"}', "call_b", "fc_b"))))
    result = await complete(provider(server), ask(tools=[WEATHER]))
    assert result.stop_reason == "tool_calls"
    assert result.message.tool_calls == [
        ToolCall("call_a", "get_weather", '{"city":"Paris"}', {"id": "fc_a"}),
        ToolCall("call_b", "get_weather", '{"city":"Rome"}', {"id": "fc_b"}),
    ]


@pytest.mark.parametrize(("status", "reason", "stop"), [
    ("incomplete", "max_output_tokens", "max_tokens"),
    ("incomplete", "content_filter", "content_filter"),
    ("cancelled", None, "other"),
])
async def test_status_and_incomplete_details_give_the_stop_reason(
        server: LoopbackServer, status: str, reason: str | None, stop: str):
    server.queue(Canned.json(response(message_item("Par"), status=status, incomplete=reason)))
    result = await complete(provider(server), ask())
    assert (result.stop_reason, result.message.text) == (stop, "Par")
    assert result.raw_stop_reason == (reason or status)


async def test_a_refusal_is_kept_as_text_and_stops_as_content_filter(server: LoopbackServer):
    server.queue(Canned.json(response({"type": "message", "id": "msg_1", "role": "assistant",
                                       "content": [{"type": "refusal",
                                                    "refusal": "I can't help with that."}]})))
    result = await complete(provider(server), ask())
    assert (result.stop_reason, result.message.text) == ("content_filter",
                                                         "I can't help with that.")


async def test_reasoning_items_become_reasoning_parts_of_this_provider(server: LoopbackServer):
    server.queue(Canned.json(response(reasoning_item("rs_9", "ENC9", "Thinking about Paris."),
                                      message_item("Paris.", "msg_9"))))
    result = await complete(provider(server), ask())
    assert result.message.parts == (
        Reasoning("Thinking about Paris.", "openai-responses", provider_data={
            "id": "rs_9", "encrypted_content": "ENC9", "message_ids": ["msg_9"],
            "summary": [{"type": "summary_text", "text": "Thinking about Paris."}]}),
        Text("Paris."),
    )


async def test_a_response_without_usage_still_counts_one_request(server: LoopbackServer):
    resp = response(message_item("ok"))
    del resp["usage"]
    server.queue(Canned.json(resp))
    assert (await complete(provider(server), ask())).usage.requests == 1


# --- the request body ------------------------------------------------------------------------


async def test_the_conversation_maps_to_input_items_in_order(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("done"))))
    messages = (
        Message("user", (Text("What is in these?"), Image("image/png", data=b"\x89PNG"),
                         Image(url="https://example.com/cat.jpg"))),
        Message("assistant", (Text("Let me look."),
                              ToolCall("call_1", "get_weather", '{"city":"Paris"}',
                                       {"id": "fc_1"}))),
        Message("tool", (ToolResult("call_1", "get_weather", "Sunny"),)),
    )
    request = ModelRequest(messages, system="You see images.", tools=[WEATHER],
                           tool_choice="auto", max_output_tokens=300, temperature=0.2)
    await complete(provider(server, model="gpt-4.1"), request)
    body = server.requests[0].body
    assert body["instructions"] == "You see images."
    assert body["input"] == [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is in these?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw=="},
            {"type": "input_image", "image_url": "https://example.com/cat.jpg"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        # No reasoning was replayed, so the item id stays home (the API would ask for it).
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
    ]
    assert body["tools"] == [{"type": "function", "name": "get_weather",
                              "description": "Weather for a city.",
                              "parameters": WEATHER.schema_json, "strict": False}]
    assert (body["tool_choice"], body["max_output_tokens"], body["temperature"]) == (
        "auto", 300, 0.2)
    assert "include" not in body


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    (NamedToolChoice("get_weather"), {"type": "function", "name": "get_weather"}),
])
async def test_tool_choice_modes_map_to_the_wire(server: LoopbackServer, choice: ToolChoice,
                                                 wire: Any):
    server.queue(Canned.json(response(message_item("ok"))))
    await complete(provider(server), ask(tools=[WEATHER], tool_choice=choice))
    assert server.requests[0].body["tool_choice"] == wire


async def test_without_tools_no_tool_choice_is_sent(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    await complete(provider(server), ask(tool_choice="none"))
    assert "tools" not in server.requests[0].body
    assert "tool_choice" not in server.requests[0].body


@pytest.mark.parametrize(("model", "setting", "asked"), [
    ("gpt-5-mini", None, True), ("o4-mini", None, True), ("openai/gpt-5", None, True),
    ("gpt-4o", None, False), ("gpt-4o", True, True), ("gpt-5", False, False),
])
async def test_encrypted_reasoning_is_asked_of_reasoning_models_only(
        server: LoopbackServer, model: str, setting: bool | None, asked: bool):
    server.queue(Canned.json(response(message_item("ok"))))
    await complete(provider(server, model=model, encrypted_reasoning=setting), ask())
    body = server.requests[0].body
    assert ("include" in body) is asked
    if asked:
        assert body["include"] == ["reasoning.encrypted_content"]


async def test_reasoning_settings_are_sent_as_given(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    await complete(provider(server, reasoning={"effort": "low", "summary": "auto"}), ask())
    assert server.requests[0].body["reasoning"] == {"effort": "low", "summary": "auto"}


def _turn_with(reasoning: Reasoning) -> tuple[Message, ...]:
    return (
        Message.user("Weather in Paris?"),
        Message("assistant", (reasoning, ToolCall("call_1", "get_weather", '{"city":"Paris"}',
                                                  {"id": "fc_1"}))),
        Message("tool", (ToolResult("call_1", "get_weather", "Sunny"),)),
    )


async def test_own_reasoning_is_replayed_with_the_ids_of_what_followed(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    own = Reasoning("", "openai-responses", provider_data={
        "id": "rs_1", "encrypted_content": "ENC", "summary": []})
    await complete(provider(server), ModelRequest(_turn_with(own)))
    assert server.requests[0].body["input"][1:3] == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city":"Paris"}', "id": "fc_1"},
    ]


async def test_reasoning_of_another_provider_is_never_sent(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    foreign = Reasoning("I think...", "anthropic", signature="sig", provider_data={
        "id": "rs_1", "encrypted_content": "ENC"})
    await complete(provider(server), ModelRequest(_turn_with(foreign)))
    wire = server.requests[0].body["input"]
    assert [i.get("type", "message") for i in wire] == [
        "message", "function_call", "function_call_output"]
    assert "id" not in wire[1]


async def test_reasoning_without_encrypted_content_is_replayed_only_when_stored(
        server: LoopbackServer):
    bare = Reasoning("", "openai-responses", provider_data={"id": "rs_1", "summary": []})
    server.queue(Canned.json(response(message_item("ok"))),
                 Canned.json(response(message_item("ok"))))
    await complete(provider(server), ModelRequest(_turn_with(bare)))
    await complete(provider(server, store=True), ModelRequest(_turn_with(bare)))
    stateless, stored = (r.body for r in server.requests)
    assert [i.get("type") for i in stateless["input"]][1:] == [
        "function_call", "function_call_output"]
    assert stored["input"][1] == {"type": "reasoning", "id": "rs_1", "summary": []}
    assert stored["store"] is True


async def test_a_parsed_answer_round_trips_with_its_message_id(server: LoopbackServer):
    server.queue(Canned.json(response(reasoning_item("rs_1", "ENC"),
                                      message_item("Paris.", "msg_1"))),
                 Canned.json(response(message_item("ok"))))
    model = provider(server)
    first = await complete(model, ask("Capital?"))
    await complete(model, ModelRequest((Message.user("Capital?"), first.message,
                                        Message.user("And Italy?"))))
    assert server.requests[1].body["input"][1:3] == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Paris.", "annotations": []}]},
    ]


async def test_reasoning_with_nothing_after_it_is_not_replayed(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    lone = Reasoning("", "openai-responses", provider_data={
        "id": "rs_1", "encrypted_content": "ENC", "summary": []})
    await complete(provider(server), ModelRequest((
        Message.user("Hi"), Message("assistant", (lone,)), Message.user("Again"))))
    assert [i["role"] for i in server.requests[0].body["input"]] == ["user", "user"]


async def test_an_image_without_data_or_url_is_a_named_error(server: LoopbackServer):
    with pytest.raises(BadRequestError, match="neither data nor url"):
        await complete(provider(server), ModelRequest((Message("user", (Image(),)),)))
    assert server.requests == []


# --- streaming -------------------------------------------------------------------------------


def created() -> dict[str, Any]:
    return ev("response.created", response={**response(), "status": "in_progress",
                                            "output": [], "usage": None})


async def test_text_deltas_stream_as_they_arrive_then_complete(server: LoopbackServer):
    final = response(message_item("The capital is Paris.", "msg_1"))
    server.queue(sse(
        created(),
        ev("response.output_item.added", output_index=0,
           item={"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        ev("response.output_text.delta", item_id="msg_1", output_index=0, delta="The capital"),
        ev("response.output_text.delta", item_id="msg_1", output_index=0, delta=" is Paris."),
        ev("response.output_text.done", item_id="msg_1", output_index=0,
           text="The capital is Paris."),
        ev("response.output_item.done", output_index=0, item=message_item(
            "The capital is Paris.", "msg_1")),
        completed(final)))
    chunks = await collect(provider(server), ask(stream=True))
    assert chunks[:2] == [TextChunk("The capital"), TextChunk(" is Paris.")]
    assert isinstance(chunks[-1], Completed) and len(chunks) == 3
    done = chunks[-1].response
    assert (done.message.text, done.stop_reason, done.usage.output_tokens) == (
        "The capital is Paris.", "end_turn", 81)
    assert server.requests[0].body["stream"] is True


async def test_function_call_arguments_split_across_deltas_stream_per_call(
        server: LoopbackServer):
    final = response(call_item("get_weather", '{"city":"Paris"}', "call_a", "fc_a"),
                     call_item("get_weather", '{"city":"Rome"}', "call_b", "fc_b"))
    server.queue(sse(
        created(),
        ev("response.output_item.added", output_index=0, item={
            "type": "function_call", "id": "fc_a", "call_id": "call_a", "name": "get_weather",
            "arguments": ""}),
        ev("response.function_call_arguments.delta", item_id="fc_a", output_index=0,
           delta='{"ci'),
        ev("response.function_call_arguments.delta", item_id="fc_a", output_index=0,
           delta='ty":"Paris"}'),
        ev("response.function_call_arguments.done", item_id="fc_a", output_index=0,
           arguments='{"city":"Paris"}'),
        ev("response.output_item.added", output_index=1, item={
            "type": "function_call", "id": "fc_b", "call_id": "call_b", "name": "get_weather",
            "arguments": ""}),
        # This server sends no deltas, only the finished arguments.
        ev("response.function_call_arguments.done", item_id="fc_b", output_index=1,
           arguments='{"city":"Rome"}'),
        completed(final)))
    chunks = await collect(provider(server), ask(tools=[WEATHER], stream=True))
    assert chunks[:-1] == [
        ToolCallChunk(0, "call_a", "get_weather", ""),
        ToolCallChunk(0, None, None, '{"ci'),
        ToolCallChunk(0, None, None, 'ty":"Paris"}'),
        ToolCallChunk(1, "call_b", "get_weather", ""),
        ToolCallChunk(1, None, None, '{"city":"Rome"}'),
    ]
    done = chunks[-1]
    assert isinstance(done, Completed)
    assert [(c.id, c.parsed_arguments()) for c in done.response.message.tool_calls] == [
        ("call_a", {"city": "Paris"}), ("call_b", {"city": "Rome"})]
    assert done.response.stop_reason == "tool_calls"


async def test_reasoning_summary_deltas_stream_as_reasoning(server: LoopbackServer):
    final = response(reasoning_item("rs_1", "ENC", "Paris is the capital."),
                     message_item("Paris.", "msg_1"))
    server.queue(sse(
        created(),
        ev("response.output_item.added", output_index=0,
           item={"type": "reasoning", "id": "rs_1", "summary": []}),
        ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0,
           summary_index=0, delta="Paris is "),
        ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0,
           summary_index=0, delta="the capital."),
        ev("response.output_text.delta", item_id="msg_1", output_index=1, delta="Paris."),
        completed(final)))
    chunks = await collect(provider(server), ask(stream=True))
    assert chunks[:3] == [ReasoningChunk("Paris is "), ReasoningChunk("the capital."),
                          TextChunk("Paris.")]
    done = chunks[-1]
    assert isinstance(done, Completed)
    reasoning = done.response.message.parts[0]
    assert isinstance(reasoning, Reasoning) and reasoning.text == "Paris is the capital."


async def test_a_final_response_without_output_is_rebuilt_from_the_stream(
        server: LoopbackServer):
    final = response()  # empty output, as some compatible servers send it
    server.queue(sse(
        ev("response.output_item.added", output_index=0,
           item={"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        ev("response.output_text.delta", item_id="msg_1", output_index=0, delta="Hel"),
        ev("response.output_text.delta", item_id="msg_1", output_index=0, delta="lo"),
        ev("response.output_item.added", output_index=1, item={
            "type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
            "arguments": ""}),
        ev("response.function_call_arguments.delta", item_id="fc_1", output_index=1,
           delta='{"city":"Oslo"}'),
        completed(final)))
    done = (await collect(provider(server), ask(stream=True)))[-1]
    assert isinstance(done, Completed)
    assert done.response.message.parts == (
        Text("Hello"), ToolCall("call_1", "get_weather", '{"city":"Oslo"}', {"id": "fc_1"}))


async def test_an_incomplete_stream_ends_with_max_tokens(server: LoopbackServer):
    final = response(message_item("Par"), status="incomplete", incomplete="max_output_tokens")
    server.queue(sse(ev("response.output_text.delta", item_id="msg_1", output_index=0,
                        delta="Par"),
                     ev("response.incomplete", response=final)))
    done = (await collect(provider(server), ask(stream=True)))[-1]
    assert isinstance(done, Completed)
    assert (done.response.stop_reason, done.response.message.text) == ("max_tokens", "Par")


async def test_a_stream_request_answered_with_json_is_read_as_json(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("Plain JSON."))))
    chunks = await collect(provider(server), ask(stream=True))
    assert len(chunks) == 1 and isinstance(chunks[0], Completed)
    assert chunks[0].response.message.text == "Plain JSON."


async def test_a_stream_that_ends_before_completion_is_malformed(server: LoopbackServer):
    server.queue(sse(created(), ev("response.output_text.delta", item_id="msg_1",
                                   output_index=0, delta="Par")))
    with pytest.raises(MalformedResponseError, match=r"ended before response\.completed"):
        await collect(provider(server), ask(stream=True))


# --- errors ----------------------------------------------------------------------------------


def error_body(message: str, code: str | None = None,
               kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@pytest.mark.parametrize(("status", "body", "error"), [
    (401, error_body("Incorrect API key provided.", "invalid_api_key"), AuthError),
    (403, error_body("Project does not have access to model gpt-5."), PermissionDeniedError),
    (404, error_body("The model 'gpt-9' does not exist.", "model_not_found"), NotFoundError),
    (400, error_body("Your input exceeds the limit of this model.", "context_length_exceeded"),
     ContextOverflowError),
    (400, error_body("Invalid value for 'tool_choice'.", "invalid_value"), BadRequestError),
    (500, error_body("The server had an error.", None, "server_error"), ServerError),
])
async def test_http_errors_map_to_the_taxonomy(server: LoopbackServer, status: int,
                                               body: dict[str, Any], error: type):
    server.queue(Canned.json(body, status))
    sleep = FakeSleep()
    with pytest.raises(ProviderError) as caught:
        await complete(provider(server, sleep=sleep), ask())
    assert type(caught.value) is error
    assert caught.value.status == status
    assert body["error"]["message"] in str(caught.value)
    assert (len(server.requests), sleep.waits) == (1, [])  # none of these is retried


@pytest.mark.parametrize(("message", "numbers"), [
    ("This model's maximum context length is 128000 tokens. However, your messages resulted "
     "in 130000 tokens.", (130000, 128000)),
    ("Your input exceeds the context window of this model.", (None, None)),
])
async def test_an_overflow_states_the_prompt_and_the_window_as_openai_words_them(
        server: LoopbackServer, message: str, numbers: tuple[int | None, int | None]) -> None:
    server.queue(Canned.json(error_body(message, "context_length_exceeded"), 400))
    with pytest.raises(ContextOverflowError) as caught:
        await complete(provider(server), ask())
    assert (caught.value.prompt_tokens, caught.value.window) == numbers


async def test_a_429_is_retried_after_the_wait_the_server_asked_for(server: LoopbackServer):
    server.queue(Canned.json(error_body("Rate limit reached.", "rate_limit_exceeded"), 429,
                             **{"retry-after": "3"}),
                 Canned.json(response(message_item("ok"))))
    sleep = FakeSleep()
    chunks = await collect(provider(server, sleep=sleep), ask())
    assert sleep.waits == [3.0]
    assert isinstance(chunks[0], Retrying) and chunks[0].wait_secs == 3.0
    assert isinstance(chunks[-1], Completed) and chunks[-1].response.message.text == "ok"


async def test_a_retry_after_beyond_the_cap_fails_fast_naming_the_wait(server: LoopbackServer):
    server.queue(Canned.json(error_body("Slow down.", "rate_limit_exceeded"), 429,
                             **{"retry-after": "600"}))
    sleep = FakeSleep()
    with pytest.raises(RateLimitError, match="600s"):
        await complete(provider(server, sleep=sleep,
                                retry=RetryPolicy(retry_after_cap=30)), ask())
    assert sleep.waits == []


async def test_a_spent_quota_is_not_retried(server: LoopbackServer):
    server.queue(Canned.json(error_body("You exceeded your current quota.",
                                        "insufficient_quota"), 429))
    sleep = FakeSleep()
    with pytest.raises(RateLimitError, match="billing"):
        await complete(provider(server, sleep=sleep), ask())
    assert (len(server.requests), sleep.waits) == (1, [])


async def test_a_503_is_retried_with_backoff_then_succeeds(server: LoopbackServer):
    server.queue(Canned.json(error_body("Overloaded.", None, "server_error"), 503),
                 Canned.json(response(message_item("ok"))))
    sleep = FakeSleep()
    result = await complete(provider(server, sleep=sleep), ask(stream=True))
    assert result.message.text == "ok"
    assert len(sleep.waits) == 1 and 0 < sleep.waits[0] <= RetryPolicy().base_delay
    assert len(server.requests) == 2


@pytest.mark.parametrize(("code", "error"), [
    ("server_error", ServerError),
    ("context_length_exceeded", ContextOverflowError),
    ("rate_limit_exceeded", RateLimitError),
    ("invalid_prompt", BadRequestError),
])
async def test_response_failed_mid_stream_raises_the_typed_error(
        server: LoopbackServer, code: str, error: type):
    failed = {**response(), "status": "failed", "output": [],
              "error": {"code": code, "message": "It went wrong."}}
    server.queue(sse(created(), ev("response.output_text.delta", item_id="msg_1",
                                   output_index=0, delta="Par"),
                     ev("response.failed", response=failed)))
    seen: list[StreamChunk] = []
    with pytest.raises(ProviderError) as caught:
        async for chunk in provider(server).stream(ask(stream=True)):
            seen.append(chunk)
    assert type(caught.value) is error
    assert "It went wrong." in str(caught.value) and code in str(caught.value)
    assert seen == [TextChunk("Par")]


async def test_an_error_event_in_the_stream_raises_the_typed_error(server: LoopbackServer):
    server.queue(sse(created(), ev("error", code="rate_limit_exceeded",
                                   message="Too many tokens per minute.", param=None)))
    # No retries: an error before any content would otherwise be retried (it is retryable).
    with pytest.raises(RateLimitError, match="Too many tokens per minute"):
        await collect(provider(server, retry=RetryPolicy(max_retries=0)), ask(stream=True))


async def test_a_failed_non_streamed_response_raises_the_typed_error(server: LoopbackServer):
    server.queue(Canned.json({**response(), "status": "failed", "output": [],
                              "error": {"code": "server_error", "message": "Boom."}}))
    with pytest.raises(ServerError, match="Boom"):
        await complete(provider(server), ask())


async def test_a_body_that_is_not_json_is_a_malformed_response(server: LoopbackServer):
    server.queue(Canned(200, b"<html>gateway</html>", {"content-type": "application/json"}))
    with pytest.raises(MalformedResponseError, match="not JSON"):
        await complete(provider(server), ask())


async def test_a_json_object_that_is_not_a_response_is_malformed(server: LoopbackServer):
    server.queue(Canned.json({"choices": []}))
    with pytest.raises(MalformedResponseError, match="no output list"):
        await complete(provider(server), ask())


async def test_a_stream_event_that_is_not_json_is_a_malformed_response(server: LoopbackServer):
    server.queue(Canned(200, ["event: response.created\ndata: {not json\n\n"],
                        {"content-type": "text/event-stream"}))
    with pytest.raises(MalformedResponseError, match="stream event is not JSON"):
        await collect(provider(server), ask(stream=True))


async def test_a_stalled_stream_times_out_as_idle(server: LoopbackServer):
    stall = threading.Event()
    server.queue(sse(created(), ev("response.output_text.delta", item_id="msg_1",
                                   output_index=0, delta="Par"), stall))
    seen: list[StreamChunk] = []
    try:
        with pytest.raises(ProviderTimeout, match="stalled"):
            async for chunk in provider(server, timeouts=Timeouts(read=0.2)).stream(
                    ask(stream=True)):
                seen.append(chunk)
    finally:
        stall.set()
    assert seen == [TextChunk("Par")]


# --- construction ----------------------------------------------------------------------------


def test_with_model_returns_a_copy_for_another_model(server: LoopbackServer):
    original = provider(server, model="gpt-5-mini", store=True)
    other = original.with_model("gpt-5")
    assert (other.model, other.base_url, other.store, other.name) == (
        "gpt-5", original.base_url, True, "openai-responses")
    assert original.model == "gpt-5-mini"
    assert isinstance(other, Provider)


async def test_with_model_keeps_the_key(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    await complete(provider(server).with_model("gpt-5"), ask())
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"
    assert server.requests[0].body["model"] == "gpt-5"


def test_a_missing_key_variable_is_a_config_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TETHER_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="TETHER_TEST_NO_SUCH_KEY"):
        OpenAIResponses(model="gpt-5", api_key_env="TETHER_TEST_NO_SUCH_KEY")


async def test_a_keyless_local_server_gets_no_authorization(server: LoopbackServer):
    server.queue(Canned.json(response(message_item("ok"))))
    model = OpenAIResponses(f"{server.url}/v1", model="gpt-oss-20b", api_key_env=None,
                            headers={"x-team": "a"})
    await complete(model, ask())
    await model.aclose()
    assert "authorization" not in server.requests[0].headers
    assert server.requests[0].headers["x-team"] == "a"


# --- an agent run through the adapter --------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"Sunny, 22C in {city}"


async def test_an_agent_run_with_one_tool_call(server: LoopbackServer):
    server.queue(
        Canned.json(response(reasoning_item("rs_1", "ENC"),
                             call_item("get_weather", '{"city":"Paris"}', "call_1", "fc_1"))),
        Canned.json(response(message_item("It is sunny in Paris."))))
    agent = Agent(provider(server), tools=[get_weather], system_prompt="Use tools.")
    result = await agent.run("Weather in Paris?")
    assert result.text == "It is sunny in Paris."
    assert [(r.name, r.input, r.status) for r in result.tool_calls] == [
        ("get_weather", {"city": "Paris"}, "ok")]
    assert result.usage.requests == 2
    second = server.requests[1].body
    assert second["instructions"] == "Use tools."
    assert second["input"][1:] == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city":"Paris"}', "id": "fc_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 22C in Paris"},
    ]


async def test_a_streamed_agent_run_with_one_tool_call(server: LoopbackServer):
    call = call_item("get_weather", '{"city":"Oslo"}', "call_1", "fc_1")
    server.queue(
        sse(created(),
            ev("response.output_item.added", output_index=0, item={**call, "arguments": ""}),
            ev("response.function_call_arguments.delta", item_id="fc_1", output_index=0,
               delta='{"city":'),
            ev("response.function_call_arguments.delta", item_id="fc_1", output_index=0,
               delta='"Oslo"}'),
            completed(response(call))),
        sse(ev("response.output_text.delta", item_id="msg_1", output_index=0, delta="Sunny "),
            ev("response.output_text.delta", item_id="msg_1", output_index=0,
               delta="in Oslo."),
            completed(response(message_item("Sunny in Oslo.")))))
    agent = Agent(provider(server), tools=[get_weather])
    deltas: list[str] = []
    result = None
    async for event in agent.stream("Weather in Oslo?"):
        if event.kind == "text_delta":
            deltas.append(event.text)
        if event.kind == "run_finished":
            result = event.result
    assert result is not None and result.text == "Sunny in Oslo."
    assert deltas == ["Sunny ", "in Oslo."]
    assert [r.output for r in result.tool_calls] == ["Sunny, 22C in Oslo"]
    assert all(r.body["stream"] is True for r in server.requests)
    assert server.requests[1].body["input"][-1] == {
        "type": "function_call_output", "call_id": "call_1", "output": "Sunny, 22C in Oslo"}

