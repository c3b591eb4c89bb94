"""OpenAIChat against a real Chat Completions server on 127.0.0.1 (JSON and SSE)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.providers.helpers import FakeSleep
from tests.servers.http import Canned, LoopbackServer
from tether import Agent, tool
from tether.errors import (
    AuthError,
    BadRequestError,
    ConfigError,
    ContextOverflowError,
    MalformedResponseError,
    ModelOutputParseError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    ServerError,
)
from tether.events import ProviderRetry, RunFinished, TextDelta, ToolFinished
from tether.messages import Image, Message, Reasoning, Text, ToolCall, ToolResult
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
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
from tether.providers.openai_chat import OpenAIChat, is_fence_debris
from tether.providers.parse_retry import PARSE_RETRY_TEMPERATURE, warmer_after_parse_error
from tether.providers.profiles import OpenAICompatProfile
from tether.tools.spec import ToolSpec

ADD = ToolSpec("add", "Add two integers.", {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"]})
MUL = ToolSpec("mul", "Multiply two integers.", ADD.schema_json)


def chat(server: LoopbackServer, sleep: FakeSleep | None = None, **kw: Any) -> OpenAIChat:
    return OpenAIChat(base_url=f"{server.url}/v1", model="qwen", sleep=sleep or FakeSleep(),
                      **kw)


def ask(text: str = "What is 2+3?", *, stream: bool = False, **kw: Any) -> ModelRequest:
    return ModelRequest(messages=(Message.user(text),), stream=stream, **kw)


def completion(content: str | None = None, calls: list[dict[str, Any]] | None = None,
               finish: str = "stop", usage: dict[str, Any] | None = None,
               **message: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content, **message}
    if calls is not None:
        msg["tool_calls"] = calls
    out: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion", "model": "qwen",
                           "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = usage
    return out


def wire_call(name: str, arguments: str, id: str | None = "call_1") -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if id is not None:
        call["id"] = id
    return call


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None,
          usage: dict[str, Any] | None = None, choices: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "qwen",
                           "choices": [{"index": 0, "delta": delta or {},
                                        "finish_reason": finish}] if choices else []}
    if usage is not None:
        out["usage"] = usage
    return out


def tc_delta(index: int, arguments: str, id: str | None = None,
             name: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        d["id"] = id
        d["type"] = "function"
    if name is not None:
        d["function"]["name"] = name
    return {"tool_calls": [d]}


USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25,
         "prompt_tokens_details": {"cached_tokens": 8}}


async def collect(model: OpenAIChat, request: ModelRequest) -> tuple[list[StreamChunk],
                                                                    ModelResponse]:
    chunks = [c async for c in model.stream(request)]
    last = chunks[-1]
    assert isinstance(last, Completed)
    return chunks[:-1], last.response


# --- answers ------------------------------------------------------------------------------


async def test_json_answer_becomes_one_completed_message_with_usage(server: LoopbackServer):
    server.queue(Canned.json(completion("The sum is 5.", usage=USAGE)))
    chunks, response = await collect(chat(server), ask())
    assert chunks == []
    assert response.message == Message("assistant", (Text("The sum is 5."),))
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.cache_read_tokens, response.usage.requests) == (20, 5, 8, 1)
    assert response.id == "chatcmpl-1"
    assert server.requests[0].path == "/v1/chat/completions"


async def test_streamed_text_arrives_as_deltas_and_assembles_the_message(server: LoopbackServer):
    server.queue(Canned.sse([
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "The sum"}), chunk({"content": " is 5."}),
        chunk(finish="stop"), chunk(usage=USAGE, choices=False),
    ]))
    chunks, response = await collect(chat(server), ask(stream=True))
    assert chunks == [TextChunk("The sum"), TextChunk(" is 5.")]
    assert response.message.parts == (Text("The sum is 5."),)
    assert response.stop_reason == "end_turn"
    assert response.usage.input_tokens == 20 and response.usage.output_tokens == 5


async def test_tool_call_arguments_split_across_chunks_are_joined(server: LoopbackServer):
    server.queue(Canned.sse([
        chunk(tc_delta(0, "", id="call_x", name="add")),
        chunk(tc_delta(0, '{"a": ')), chunk(tc_delta(0, "2, ")), chunk(tc_delta(0, '"b": 3}')),
        chunk(finish="tool_calls"),
    ]))
    chunks, response = await collect(chat(server), ask(stream=True, tools=[ADD]))
    assert chunks[0] == ToolCallChunk(0, "call_x", "add", "")
    assert all(isinstance(c, ToolCallChunk) and c.id is None for c in chunks[1:])
    assert response.message.parts == (ToolCall("call_x", "add", '{"a": 2, "b": 3}'),)
    assert response.stop_reason == "tool_calls"


async def test_two_calls_in_one_turn_with_interleaved_fragments_stay_apart(
        server: LoopbackServer):
    server.queue(Canned.sse([
        chunk(tc_delta(0, '{"a":', id="c1", name="add")),
        chunk(tc_delta(1, '{"a":', id="c2", name="mul")),
        chunk(tc_delta(0, ' 2, "b": 3}')),
        chunk(tc_delta(1, ' 4, "b": 5}')),
        chunk(finish="tool_calls"),
    ]))
    _, response = await collect(chat(server), ask(stream=True, tools=[ADD, MUL]))
    assert response.message.tool_calls == [
        ToolCall("c1", "add", '{"a": 2, "b": 3}'), ToolCall("c2", "mul", '{"a": 4, "b": 5}')]


async def test_two_calls_in_one_json_answer_keep_their_order(server: LoopbackServer):
    server.queue(Canned.json(completion(None, [wire_call("add", '{"a":1,"b":2}', "c1"),
                                               wire_call("mul", '{"a":3,"b":4}', "c2")],
                                        finish="tool_calls")))
    _, response = await collect(chat(server), ask(tools=[ADD, MUL]))
    assert [(c.id, c.name) for c in response.message.tool_calls] == [("c1", "add"), ("c2", "mul")]


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
async def test_usage_a_server_did_not_report_is_unknown_not_zero(server: LoopbackServer,
                                                                 streamed: bool):
    server.queue(Canned.sse([chunk({"content": "hi"}), chunk(finish="stop")]) if streamed
                 else Canned.json(completion("hi")))
    _, response = await collect(chat(server), ask(stream=streamed))
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (None, None, None)
    assert (usage.requests, usage.unreported_requests) == (1, 1)


async def test_a_stream_asks_for_usage_even_on_a_server_no_profile_names(
        server: LoopbackServer):
    # The README's example names no profile: its streamed runs counted 0 tokens.
    server.queue(Canned.sse([chunk({"content": "hi"}), chunk(finish="stop"),
                             chunk(usage=USAGE, choices=False)]))
    model = chat(server)
    assert model.profile.name == "generic"
    _, response = await collect(model, ask(stream=True))
    assert server.requests[0].body["stream_options"] == {"include_usage": True}
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20, 5)


@pytest.mark.parametrize("status", [400, 422])
async def test_a_server_that_refuses_stream_options_is_asked_again_without_them_for_good(
        server: LoopbackServer, sleep: FakeSleep, status: int):
    refusal = error_body("Unrecognized request argument supplied: stream_options",
                         code=status, type="invalid_request_error")
    plain = Canned.sse([chunk({"content": "hi"}), chunk(finish="stop")])
    server.queue(Canned.json(refusal, status), plain, plain)
    model = chat(server, sleep, retry=RetryPolicy(max_retries=0))
    chunks, response = await collect(model, ask(stream=True))
    assert response.message.text == "hi"
    assert response.usage.input_tokens is None  # the server reports none: unknown
    (notice,) = [c for c in chunks if isinstance(c, Retrying)]
    assert "stream_options" in notice.error and notice.usage.requests == 0
    await collect(model, ask(stream=True))  # the next request leaves them out at once
    sent = list(server.bodies())
    assert "stream_options" in sent[0] and "stream_options" not in sent[1]
    assert "stream_options" not in sent[2] and len(sent) == 3


async def test_a_refusal_that_is_not_about_stream_options_is_not_resent(
        server: LoopbackServer, sleep: FakeSleep):
    server.queue(Canned.json(error_body("model not loaded", code=400), 400))
    with pytest.raises(BadRequestError, match="model not loaded"):
        await collect(chat(server, sleep), ask(stream=True))
    assert len(server.requests) == 1


async def test_empty_content_beside_tool_calls_adds_no_text_part(server: LoopbackServer):
    server.queue(Canned.json(completion("", [wire_call("add", '{"a":2,"b":3}')],
                                        finish="tool_calls")))
    server.queue(Canned.sse([chunk({"content": ""}),
                             chunk(tc_delta(0, '{"a":2,"b":3}', id="c", name="add")),
                             chunk(finish="tool_calls")]))
    model = chat(server)
    _, whole = await collect(model, ask(tools=[ADD]))
    _, streamed = await collect(model, ask(stream=True, tools=[ADD]))
    for response in (whole, streamed):
        assert [p.kind for p in response.message.parts] == ["tool_call"]
        assert response.message.text == ""


@pytest.mark.parametrize(("text", "debris"), [
    ("```json\n", True), ("```", True), ("\n```\n", True), ("```json\n```", True),
    ("  \n", True), ("", True), ("``", True),
    ("`ls`", False), ("json", False), ("Let me add them.", False),
    ("Here:\n```json\n", False), ("`" * 40 + "!", False),
])
def test_fence_debris_is_only_whitespace_backticks_and_a_language_word(text: str,
                                                                        debris: bool):
    assert is_fence_debris(text) is debris


async def test_code_fence_debris_beside_forced_tool_calls_is_dropped(server: LoopbackServer):
    # llama-server with tool_choice "required" answers content "```json\n" beside the call.
    server.queue(Canned.json(completion("```json\n", [wire_call("add", '{"a":2,"b":3}')],
                                        finish="tool_calls")))
    server.queue(Canned.sse([chunk({"content": "```json\n"}),
                             chunk(tc_delta(0, '{"a":2,"b":3}', id="c", name="add")),
                             chunk(finish="tool_calls")]))
    model = chat(server, profile="llama-server")
    _, whole = await collect(model, ask(tools=[ADD], tool_choice="required"))
    _, streamed = await collect(model, ask(stream=True, tools=[ADD], tool_choice="required"))
    for response in (whole, streamed):
        assert [p.kind for p in response.message.parts] == ["tool_call"]
        assert response.message.text == ""


async def test_real_text_beside_tool_calls_is_kept(server: LoopbackServer):
    server.queue(Canned.json(completion("Adding:\n```json\n",
                                        [wire_call("add", '{"a":2,"b":3}')],
                                        finish="tool_calls")))
    _, response = await collect(chat(server), ask(tools=[ADD]))
    assert [p.kind for p in response.message.parts] == ["text", "tool_call"]
    assert response.message.text == "Adding:\n```json\n"


async def test_fence_debris_without_tool_calls_stays_the_answer(server: LoopbackServer):
    server.queue(Canned.json(completion("```")))
    _, response = await collect(chat(server), ask())
    assert response.message.text == "```"


async def test_stop_beside_tool_calls_still_means_tool_calls(server: LoopbackServer):
    # Ollama says "stop" when the model called tools.
    server.queue(Canned.json(completion(None, [wire_call("add", "{}")], finish="stop")))
    _, response = await collect(chat(server), ask(tools=[ADD]))
    assert response.stop_reason == "tool_calls"
    assert response.raw_stop_reason == "stop"


async def test_missing_call_ids_are_generated_unique_and_stable(server: LoopbackServer):
    answer = completion(None, [wire_call("add", "{}", id=None), wire_call("mul", "{}", id="")],
                        finish="tool_calls")
    server.queue(Canned.json(answer), Canned.json(answer))
    model = chat(server)
    _, first = await collect(model, ask(tools=[ADD, MUL]))
    _, again = await collect(model, ask(tools=[ADD, MUL]))
    ids = [c.id for c in first.message.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert ids == [c.id for c in again.message.tool_calls]


async def test_duplicate_and_numeric_call_ids_are_made_unique_strings(server: LoopbackServer):
    server.queue(Canned.json(completion(None, [wire_call("add", "{}", id="x"),
                                               wire_call("mul", "{}", id="x"),
                                               {**wire_call("add", "{}"), "id": 7}],
                                        finish="tool_calls")))
    _, response = await collect(chat(server), ask(tools=[ADD, MUL]))
    ids = [c.id for c in response.message.tool_calls]
    assert ids[0] == "x" and ids[2] == "7"
    assert len(set(ids)) == 3


async def test_streamed_calls_without_ids_get_generated_ids(server: LoopbackServer):
    server.queue(Canned.sse([
        chunk(tc_delta(0, '{"a":1,"b":2}', name="add")),
        chunk(tc_delta(1, '{"a":1,"b":2}', name="mul")),
        chunk(finish="tool_calls"),
    ]))
    chunks, response = await collect(chat(server), ask(stream=True, tools=[ADD, MUL]))
    ids = [c.id for c in response.message.tool_calls]
    assert len(set(ids)) == 2 and all(ids)
    assert [c.id for c in chunks if isinstance(c, ToolCallChunk)] == ids


async def test_an_index_reused_with_a_new_id_starts_a_new_call(server: LoopbackServer):
    server.queue(Canned.sse([
        chunk(tc_delta(0, '{"a":1,"b":2}', id="c1", name="add")),
        chunk(tc_delta(0, '{"a":3,"b":4}', id="c2", name="mul")),
        chunk(finish="tool_calls"),
    ]))
    _, response = await collect(chat(server), ask(stream=True, tools=[ADD, MUL]))
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
        ("c1", "add", '{"a":1,"b":2}'), ("c2", "mul", '{"a":3,"b":4}')]


async def test_arguments_sent_as_an_object_become_json_text(server: LoopbackServer):
    call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
    server.queue(Canned.json(completion(None, [call], finish="tool_calls")))
    _, response = await collect(chat(server), ask(tools=[ADD]))
    assert response.message.tool_calls[0].parsed_arguments() == {"a": 1}


async def test_a_stream_without_done_still_completes(server: LoopbackServer):
    server.queue(Canned.sse([chunk({"content": "ok"}), chunk(finish="stop")], done=False))
    _, response = await collect(chat(server), ask(stream=True))
    assert response.message.text == "ok"


async def test_a_stream_is_read_to_its_end_so_the_next_turn_reuses_the_connection(
        server: LoopbackServer):
    for _ in range(2):
        server.queue(Canned.sse([chunk({"content": "ok"}), chunk(finish="stop")]))
    model = chat(server)
    await collect(model, ask(stream=True))
    await collect(model, ask(stream=True))
    assert server.requests[0].peer == server.requests[1].peer
    assert not server.disconnected.is_set()
    await model.aclose()


async def test_a_stream_cut_before_the_model_finished_is_a_malformed_response(
        server: LoopbackServer):
    server.queue(Canned.sse([chunk({"content": "The sum"})], done=False))
    with pytest.raises(MalformedResponseError, match="before the model finished"):
        await collect(chat(server), ask(stream=True))


async def test_stream_asked_but_json_answered_is_read_as_a_whole_answer(server: LoopbackServer):
    server.queue(Canned.json(completion("whole", usage=USAGE)))
    chunks, response = await collect(chat(server), ask(stream=True))
    assert chunks == []
    assert response.message.text == "whole" and response.usage.output_tokens == 5


async def test_length_and_content_filter_map_to_their_stop_reasons(server: LoopbackServer):
    server.queue(Canned.json(completion("cut", finish="length")),
                 Canned.json(completion(None, refusal="I can't help with that.")))
    model = chat(server)
    _, cut = await collect(model, ask())
    _, refused = await collect(model, ask())
    assert cut.stop_reason == "max_tokens"
    assert refused.stop_reason == "content_filter"
    assert refused.message.text == "I can't help with that."


async def test_reasoning_content_streams_as_reasoning_and_is_kept(server: LoopbackServer):
    server.queue(Canned.sse([
        chunk({"reasoning_content": "2 plus 3"}), chunk({"reasoning_content": " is 5"}),
        chunk({"content": "5"}), chunk(finish="stop"),
    ]))
    chunks, response = await collect(chat(server), ask(stream=True))
    assert chunks == [ReasoningChunk("2 plus 3"), ReasoningChunk(" is 5"), TextChunk("5")]
    reasoning = response.message.parts[0]
    assert isinstance(reasoning, Reasoning)
    assert (reasoning.text, reasoning.provider) == ("2 plus 3 is 5", "openai-chat")
    assert response.message.text == "5"


async def test_reasoning_is_replayed_only_to_the_same_wire(server: LoopbackServer):
    mine = Reasoning("thinking", "openai-chat", provider_data={"field": "reasoning_content"})
    theirs = Reasoning("secret", "anthropic", signature="sig")
    history = (Message.user("hi"), Message("assistant", (mine, theirs, Text("hello"))),
               Message.user("again"))
    body = chat(server).request_body(ModelRequest(messages=history))
    assert body["messages"][1] == {"role": "assistant", "content": "hello",
                                   "reasoning_content": "thinking"}


# --- the request --------------------------------------------------------------------------


async def test_request_carries_system_tools_and_auto_choice(server: LoopbackServer):
    server.queue(Canned.json(completion("ok")))
    await complete(chat(server), ask(system="Be brief.", tools=[ADD], temperature=0.0,
                                     max_output_tokens=64))
    body = server.requests[0].body
    assert body["model"] == "qwen"
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "What is 2+3?"}]
    assert body["tools"] == [{"type": "function", "function": {
        "name": "add", "description": "Add two integers.", "parameters": ADD.schema_json}}]
    assert body["tool_choice"] == "auto"
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64
    assert "stream" not in body


async def test_no_tools_means_no_tools_and_no_tool_choice_fields(server: LoopbackServer):
    body = chat(server).request_body(ask(tool_choice="none"))
    assert "tools" not in body and "tool_choice" not in body


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    (NamedToolChoice("mul"), {"type": "function", "function": {"name": "mul"}}),
])
async def test_tool_choice_modes_reach_a_server_that_supports_them(
        server: LoopbackServer, choice: Any, wire: Any):
    body = chat(server, profile="openai").request_body(ask(tools=[ADD, MUL], tool_choice=choice))
    assert body["tool_choice"] == wire
    assert [t["function"]["name"] for t in body["tools"]] == ["add", "mul"]


async def test_named_choice_on_llama_server_offers_only_that_tool_with_required(
        server: LoopbackServer):
    body = chat(server, profile="llama-server").request_body(
        ask(tools=[ADD, MUL], tool_choice=NamedToolChoice("mul")))
    assert body["tool_choice"] == "required"
    assert [t["function"]["name"] for t in body["tools"]] == ["mul"]


async def test_required_on_ollama_falls_back_to_auto(server: LoopbackServer):
    model = chat(server, profile="ollama")
    assert model.request_body(ask(tools=[ADD], tool_choice="required"))["tool_choice"] == "auto"
    named = model.request_body(ask(tools=[ADD, MUL], tool_choice=NamedToolChoice("add")))
    assert named["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in named["tools"]] == ["add"]


async def test_stream_options_are_sent_only_where_the_profile_asks_for_them(
        server: LoopbackServer):
    silent = OpenAICompatProfile(name="silent", supports_stream_usage=False)
    generic = chat(server).request_body(ask(stream=True))
    llama = chat(server, profile="llama-server").request_body(ask(stream=True))
    assert generic["stream_options"] == llama["stream_options"] == {"include_usage": True}
    body = chat(server, profile=silent).request_body(ask(stream=True))
    assert body["stream"] is True and "stream_options" not in body
    assert "stream_options" not in chat(server).request_body(ask())


async def test_openai_gets_max_completion_tokens(server: LoopbackServer):
    body = chat(server, profile="openai").request_body(ask(max_output_tokens=100))
    assert body["max_completion_tokens"] == 100 and "max_tokens" not in body


async def test_images_become_image_url_parts(server: LoopbackServer):
    message = Message("user", (Text("What is this?"), Image("image/png", data=b"\x89PNG"),
                               Image(url="https://example.com/cat.jpg")))
    body = chat(server).request_body(ModelRequest(messages=(message,)))
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]}]


async def test_tool_calls_and_results_replay_as_assistant_and_tool_messages(
        server: LoopbackServer):
    history = (
        Message.user("sums"),
        Message("assistant", (ToolCall("c1", "add", '{"a":1,"b":2}'),
                              ToolCall("c2", "add", '{"a":3,"b":4}'))),
        Message("tool", (ToolResult("c1", "add", "3"),
                         ToolResult("c2", "add", "Error: boom", is_error=True))),
    )
    body = chat(server).request_body(ModelRequest(messages=history))
    assert body["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add",
                                                          "arguments": '{"a":1,"b":2}'}},
            {"id": "c2", "type": "function", "function": {"name": "add",
                                                          "arguments": '{"a":3,"b":4}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: boom"},
    ]


async def test_api_key_is_sent_as_a_bearer_token(server: LoopbackServer,
                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TETHER_TEST_KEY", "sk-test")
    server.queue(Canned.json(completion("ok")))
    await complete(chat(server, api_key_env="TETHER_TEST_KEY"), ask())
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"


def test_a_missing_api_key_variable_is_a_config_error_naming_it(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TETHER_NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="TETHER_NO_SUCH_KEY"):
        OpenAIChat(model="m", api_key_env="TETHER_NO_SUCH_KEY")


def test_a_missing_model_is_a_config_error():
    with pytest.raises(ConfigError, match="model is required"):
        OpenAIChat()


async def test_with_model_returns_a_copy_on_the_same_endpoint(server: LoopbackServer):
    server.queue(Canned.json(completion("ok")))
    base = chat(server)
    other = base.with_model("bigger")
    await complete(other, ask())
    assert (base.model, other.model) == ("qwen", "bigger")
    assert server.requests[0].body["model"] == "bigger"
    assert other.profile == base.profile
    await base.aclose()


# --- errors -------------------------------------------------------------------------------


def error_body(message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, **extra}}


@pytest.mark.parametrize(("status", "message", "kind"), [
    (401, "Incorrect API key provided", AuthError),
    (403, "You are not allowed to use this model", PermissionDeniedError),
    (404, "model 'qwen' not found, try pulling it first", NotFoundError),
    (400, "This model's maximum context length is 4096 tokens", ContextOverflowError),
    (400, "the request exceeds the available context size, try increasing it",
     ContextOverflowError),
    (400, "Invalid value for 'temperature'", BadRequestError),
    (500, "Internal server error", ServerError),
])
async def test_http_errors_map_to_the_typed_hierarchy_without_retry(
        server: LoopbackServer, sleep: FakeSleep, status: int, message: str,
        kind: type[ProviderError]):
    server.queue(Canned.json(error_body(message), status))
    with pytest.raises(kind) as caught:
        await complete(chat(server, sleep), ask())
    assert type(caught.value) is kind
    assert message in str(caught.value) and caught.value.status == status
    assert len(server.requests) == 1 and sleep.waits == []


@pytest.mark.parametrize(("body", "numbers"), [
    (error_body("This model's maximum context length is 4096 tokens. However, your messages "
                "resulted in 5000 tokens."), (5000, 4096)),
    (error_body("This model's maximum context length is 4096 tokens. However, you requested "
                "5000 tokens (4000 in the messages, 1000 in the completion)."), (4000, 4096)),
    (error_body("request (3000 tokens) exceeds the available context size (2048 tokens), try "
                "increasing it", type="exceed_context_size_error", n_prompt_tokens=3000,
                n_ctx=2048), (3000, 2048)),
    (error_body("too long", type="exceed_context_size_error", n_prompt_tokens=3000, n_ctx=2048),
     (3000, 2048)),
    (error_body("the request exceeds the available context size, try increasing it"),
     (None, None)),
])
async def test_an_overflow_states_the_prompt_and_the_window_as_the_server_words_them(
        server: LoopbackServer, body: dict[str, Any],
        numbers: tuple[int | None, int | None]) -> None:
    server.queue(Canned.json(body, 400))
    with pytest.raises(ContextOverflowError) as caught:
        await complete(chat(server), ask())
    assert (caught.value.prompt_tokens, caught.value.window) == numbers


async def test_llama_server_parse_error_is_retried_once_then_succeeds(
        server: LoopbackServer, sleep: FakeSleep):
    parse_error = error_body("The model produced output that does not match the expected "
                             "tool call format", code=500, type="server_error")
    server.queue(Canned.json(parse_error, 500), Canned.json(completion("ok")))
    chunks = [c async for c in chat(server, sleep).stream(ask())]
    assert isinstance(chunks[0], Retrying)
    assert isinstance(chunks[-1], Completed) and chunks[-1].response.message.text == "ok"
    assert len(server.requests) == 2 and len(sleep.waits) == 1


async def test_llama_server_parse_error_is_retried_only_once(server: LoopbackServer,
                                                             sleep: FakeSleep):
    parse_error = error_body("does not match the expected format")
    server.queue(Canned.json(parse_error, 500), Canned.json(parse_error, 500),
                 Canned.json(completion("never")))
    with pytest.raises(ModelOutputParseError):
        await complete(chat(server, sleep), ask())
    assert len(server.requests) == 2


LLAMA_PARSE_ERROR = error_body(
    "The model produced output that does not match the expected tool call format",
    code=500, type="server_error")


async def test_a_parse_error_retry_carries_a_raised_temperature(server: LoopbackServer,
                                                                sleep: FakeSleep):
    server.queue(Canned.json(LLAMA_PARSE_ERROR, 500), Canned.json(completion("ok")))
    response = await complete(chat(server, sleep), ask(temperature=0.0))
    assert response.message.text == "ok"
    assert [b["temperature"] for b in server.bodies()] == [0.0, PARSE_RETRY_TEMPERATURE]


@pytest.mark.parametrize(("asked", "retried"), [
    (None, PARSE_RETRY_TEMPERATURE), (0.2, PARSE_RETRY_TEMPERATURE), (1.2, 1.2)])
def test_the_parse_error_retry_temperature_is_at_least_the_floor(asked: float | None,
                                                                 retried: float):
    body: dict[str, Any] = {"model": "qwen"}
    if asked is not None:
        body["temperature"] = asked
    error = ModelOutputParseError("does not match the expected format")
    assert warmer_after_parse_error(error, body)["temperature"] == retried
    assert warmer_after_parse_error(ServerError("boom"), body) is body


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
async def test_a_parse_error_with_tools_offered_is_asked_again_without_them(
        server: LoopbackServer, sleep: FakeSleep, streamed: bool):
    # The 0.5B model "calls" a tool nobody offered when it means to answer in words; asked
    # again the same way at temperature 0 it would do so again.
    failed = (Canned.sse([LLAMA_PARSE_ERROR], done=False) if streamed
              else Canned.json(LLAMA_PARSE_ERROR, 500))
    answered = (Canned.sse([chunk({"content": "Paris."}), chunk(finish="stop")]) if streamed
                else Canned.json(completion("Paris.")))
    server.queue(failed, answered)
    chunks = [c async for c in chat(server, sleep, profile="llama-server").stream(
        ask("What is the capital of France?", stream=streamed, tools=[ADD],
            temperature=0.0))]
    assert isinstance(chunks[-1], Completed)
    assert chunks[-1].response.message == Message("assistant", (Text("Paris."),))
    first, retried = server.bodies()
    assert first["tools"] and first["tool_choice"] == "auto"
    assert "tools" not in retried and "tool_choice" not in retried
    assert retried["temperature"] == 0.0 and retried["messages"] == first["messages"]
    assert sleep.waits == [0.0]  # the server is not busy: nothing to wait for


@pytest.mark.parametrize("choice", ["required", NamedToolChoice("add")])
async def test_a_parse_error_when_a_call_is_required_keeps_the_tools_and_samples_warmer(
        server: LoopbackServer, sleep: FakeSleep, choice: Any):
    server.queue(Canned.json(LLAMA_PARSE_ERROR, 500),
                 Canned.json(completion(None, [wire_call("add", '{"a": 2, "b": 3}')],
                                        finish="tool_calls")))
    response = await complete(chat(server, sleep, profile="llama-server"),
                              ask(tools=[ADD], tool_choice=choice, temperature=0.0))
    assert response.message.tool_calls[0].name == "add"
    first, retried = server.bodies()
    assert retried["tools"] == first["tools"] and retried["tool_choice"] == first["tool_choice"]
    assert retried["temperature"] == PARSE_RETRY_TEMPERATURE


def test_a_parse_error_says_what_happened_and_what_to_try():
    error = OpenAIChat("http://127.0.0.1:1/v1", "qwen")._codec.classify(
        500, {}, '{"error": {"code": 500, "message": "The model produced output that does not '
                 'match the expected peg-native format", "type": "server_error"}}')
    assert isinstance(error, ModelOutputParseError) and error.retryable
    message = str(error)
    assert "could not read the model's output as an answer or as a call" in message
    assert "does not match the expected peg-native format" in message  # the server's words
    assert "Try rephrasing" in message and "fewer tools" in message and "larger model" in message


async def test_a_streamed_parse_error_before_any_content_is_retried_warmer(
        server: LoopbackServer, sleep: FakeSleep):
    # llama-server, streaming, answers 200 and then sends the parse error as an event.
    server.queue(Canned.sse([LLAMA_PARSE_ERROR], done=False),
                 Canned.sse([chunk({"role": "assistant", "content": ""}),
                             chunk({"content": "ok"}), chunk(finish="stop")]))
    chunks = [c async for c in chat(server, sleep).stream(ask(stream=True, temperature=0.0))]
    assert isinstance(chunks[0], Retrying) and chunks[0].attempt == 1
    assert "does not match the expected" in chunks[0].error
    assert chunks[1] == TextChunk("ok")
    assert isinstance(chunks[-1], Completed) and chunks[-1].response.message.text == "ok"
    assert [b["temperature"] for b in server.bodies()] == [0.0, PARSE_RETRY_TEMPERATURE]
    assert len(sleep.waits) == 1


async def test_a_second_streamed_parse_error_is_raised(server: LoopbackServer, sleep: FakeSleep):
    server.queue(Canned.sse([LLAMA_PARSE_ERROR], done=False),
                 Canned.sse([LLAMA_PARSE_ERROR], done=False),
                 Canned.sse([chunk({"content": "never"}), chunk(finish="stop")]))
    with pytest.raises(ModelOutputParseError, match="does not match the expected"):
        await collect(chat(server, sleep), ask(stream=True))
    assert len(server.requests) == 2 and len(sleep.waits) == 1


async def test_a_parse_error_is_retried_once_across_http_and_stream(server: LoopbackServer,
                                                                    sleep: FakeSleep):
    # One parse-error retry per request, whether it came as HTTP 500 or inside a 200.
    server.queue(Canned.json(LLAMA_PARSE_ERROR, 500),
                 Canned.sse([LLAMA_PARSE_ERROR], done=False))
    with pytest.raises(ModelOutputParseError):
        await collect(chat(server, sleep), ask(stream=True))
    assert len(server.requests) == 2 and len(sleep.waits) == 1


async def test_an_error_after_text_went_out_is_not_retried(server: LoopbackServer,
                                                           sleep: FakeSleep):
    server.queue(Canned.sse([chunk({"content": "The"}), LLAMA_PARSE_ERROR], done=False),
                 Canned.sse([chunk({"content": "never"}), chunk(finish="stop")]))
    seen: list[StreamChunk] = []
    with pytest.raises(ModelOutputParseError):
        async for c in chat(server, sleep).stream(ask(stream=True)):
            seen.append(c)
    assert seen == [TextChunk("The")]
    assert len(server.requests) == 1 and sleep.waits == []


@pytest.mark.parametrize("echoed", [True, False], ids=["echoed", "not-echoed"])
async def test_llama_server_goes_on_from_the_text_shown_when_it_cannot_read_what_followed(
        server: LoopbackServer, sleep: FakeSleep, echoed: bool):
    # The model's code had a brace llama-server took for the start of a tool call; the
    # text before it had streamed out.
    shown = "To declare a struct in Go, write "
    rest = "`type P struct { Name string }`."
    server.queue(Canned.sse([chunk({"content": "To declare a struct "}),
                             chunk({"content": "in Go, write "}), LLAMA_PARSE_ERROR],
                            done=False),
                 # llama-server sends the text it continues again; another server may not.
                 Canned.sse([chunk({"content": shown + "`type P" if echoed else "`type P"}),
                             chunk({"content": " struct { Name string }`."}),
                             chunk(finish="stop")]))
    chunks = [c async for c in chat(server, sleep, profile="llama-server").stream(
        ask("How do I declare a struct in Go?", stream=True, tools=[ADD], temperature=0.0))]
    texts = [c.text for c in chunks if isinstance(c, TextChunk)]
    assert "".join(texts) == shown + rest  # nothing shown twice
    assert isinstance(chunks[2], Retrying) and chunks[2].usage.unreported_requests == 1
    assert isinstance(chunks[-1], Completed)
    assert chunks[-1].response.message == Message("assistant", (Text(shown + rest),))
    first, continued = server.bodies()
    assert "tools" not in continued and "tool_choice" not in continued
    assert continued["messages"] == [*first["messages"],
                                     {"role": "assistant", "content": shown}]


async def test_an_answer_broken_off_twice_is_not_continued_again(server: LoopbackServer,
                                                                  sleep: FakeSleep):
    server.queue(Canned.sse([chunk({"content": "The"}), LLAMA_PARSE_ERROR], done=False),
                 Canned.sse([chunk({"content": " answer"}), LLAMA_PARSE_ERROR], done=False),
                 Canned.sse([chunk({"content": "never"}), chunk(finish="stop")]))
    seen: list[StreamChunk] = []
    with pytest.raises(ModelOutputParseError):
        async for c in chat(server, sleep, profile="llama-server").stream(
                ask(stream=True, tools=[ADD])):
            seen.append(c)
    assert [c.text for c in seen if isinstance(c, TextChunk)] == ["The", " answer"]
    assert len(server.requests) == 2


async def test_an_error_after_a_tool_call_delta_is_not_retried(server: LoopbackServer,
                                                               sleep: FakeSleep):
    server.queue(Canned.sse([chunk(tc_delta(0, '{"a":', id="c", name="add")),
                             error_body("busy", code=503)], done=False))
    with pytest.raises(OverloadedError, match="busy"):
        await collect(chat(server, sleep), ask(stream=True, tools=[ADD]))
    assert len(server.requests) == 1 and sleep.waits == []


async def test_retries_in_a_stream_and_over_http_share_one_budget(server: LoopbackServer,
                                                                  sleep: FakeSleep):
    # max_retries=2 is two retries for the request, not two per layer.
    server.queue(Canned.json(error_body("busy"), 503),
                 Canned.sse([error_body("busy", code=503)], done=False),
                 Canned.json(error_body("busy"), 503),
                 Canned.sse([chunk({"content": "never"}), chunk(finish="stop")]))
    chunks: list[StreamChunk] = []
    with pytest.raises(OverloadedError):
        async for c in chat(server, sleep, retry=RetryPolicy(max_retries=2)).stream(
                ask(stream=True)):
            chunks.append(c)
    assert [c.attempt for c in chunks if isinstance(c, Retrying)] == [1, 2]
    assert len(server.requests) == 3 and len(sleep.waits) == 2


async def test_an_agent_stream_reports_the_streamed_parse_error_retry(server: LoopbackServer,
                                                                      sleep: FakeSleep):
    server.queue(Canned.sse([LLAMA_PARSE_ERROR], done=False),
                 Canned.sse([chunk({"content": "The sum is 5."}), chunk(finish="stop")]))
    agent = Agent(model=chat(server, sleep), temperature=0.0)
    events = [e async for e in agent.stream("What is 2+3?")]
    retries = [e for e in events if isinstance(e, ProviderRetry)]
    assert len(retries) == 1 and retries[0].attempt == 1
    assert "does not match the expected" in retries[0].error
    assert isinstance(events[-1], RunFinished) and events[-1].result.text == "The sum is 5."
    assert [b["temperature"] for b in server.bodies()] == [0.0, PARSE_RETRY_TEMPERATURE]
    await agent.aclose()


async def test_429_with_retry_after_waits_that_long_then_succeeds(server: LoopbackServer,
                                                                  sleep: FakeSleep):
    server.queue(Canned.json(error_body("Rate limit reached"), 429, **{"retry-after": "2"}),
                 Canned.json(completion("ok")))
    response = await complete(chat(server, sleep), ask())
    assert response.message.text == "ok"
    assert sleep.waits == [2.0]


async def test_retry_after_beyond_the_cap_fails_fast_naming_the_wait(server: LoopbackServer,
                                                                     sleep: FakeSleep):
    server.queue(Canned.json(error_body("Rate limit reached"), 429, **{"retry-after": "3600"}))
    model = chat(server, sleep, retry=RetryPolicy(retry_after_cap=60))
    with pytest.raises(RateLimitError, match="3600s") as caught:
        await complete(model, ask())
    assert caught.value.retry_after == 3600
    assert "retry_after_cap_secs=60s" in str(caught.value)
    assert sleep.waits == [] and len(server.requests) == 1


async def test_503_is_retried_with_backoff(server: LoopbackServer, sleep: FakeSleep):
    server.queue(Canned.json(error_body("loading model"), 503),
                 Canned.json(error_body("loading model"), 503),
                 Canned.json(completion("ok")))
    response = await complete(chat(server, sleep, retry=RetryPolicy(base_delay=1.0)), ask())
    assert response.message.text == "ok"
    assert len(sleep.waits) == 2 and 0.5 <= sleep.waits[0] <= 1.0 and 1.0 <= sleep.waits[1] <= 2.0


async def test_503_beyond_the_retry_budget_raises_overloaded(server: LoopbackServer,
                                                             sleep: FakeSleep):
    server.queue(*[Canned.json(error_body("busy"), 503)] * 3)
    with pytest.raises(OverloadedError):
        await complete(chat(server, sleep, retry=RetryPolicy(max_retries=2)), ask())
    assert len(server.requests) == 3 and len(sleep.waits) == 2


async def test_a_body_that_is_not_json_is_a_malformed_response(server: LoopbackServer):
    server.queue(Canned(200, b"<html>proxy error</html>", {"content-type": "application/json"}))
    with pytest.raises(MalformedResponseError, match="not JSON"):
        await complete(chat(server), ask())


async def test_a_json_answer_without_choices_is_a_malformed_response(server: LoopbackServer):
    server.queue(Canned.json({"id": "x", "object": "chat.completion"}))
    with pytest.raises(MalformedResponseError, match="no choices"):
        await complete(chat(server), ask())


async def test_an_error_inside_a_200_answer_is_raised_as_its_kind(server: LoopbackServer):
    # OpenRouter reports upstream failures this way.
    server.queue(Canned.json(error_body("Provider returned error", code=429)))
    with pytest.raises(RateLimitError, match="Provider returned error"):
        await complete(chat(server, retry=RetryPolicy(max_retries=0)), ask())


async def test_a_retryable_error_inside_a_200_answer_is_retried(server: LoopbackServer,
                                                                sleep: FakeSleep):
    server.queue(Canned.json(error_body("Provider returned error", code=429)),
                 Canned.json(completion("ok")))
    chunks = [c async for c in chat(server, sleep).stream(ask())]
    assert isinstance(chunks[0], Retrying) and "Provider returned error" in chunks[0].error
    assert isinstance(chunks[-1], Completed) and chunks[-1].response.message.text == "ok"
    assert len(server.requests) == 2 and len(sleep.waits) == 1


async def test_an_error_event_mid_stream_is_raised_as_its_kind(server: LoopbackServer):
    server.queue(Canned.sse([chunk({"content": "The"}),
                             error_body("the request exceeds the available context size",
                                        code=400, type="exceed_context_size_error")]))
    with pytest.raises(ContextOverflowError):
        await collect(chat(server), ask(stream=True))


async def test_a_stream_event_that_is_not_json_is_a_malformed_response(server: LoopbackServer):
    server.queue(Canned(200, ["data: {not json\n\n"], {"content-type": "text/event-stream"}))
    with pytest.raises(MalformedResponseError, match="not JSON"):
        await collect(chat(server), ask(stream=True))


# --- time and cancellation ------------------------------------------------------------------


async def test_a_stalled_stream_hits_the_idle_timeout(server: LoopbackServer):
    stall = threading.Event()
    server.queue(Canned.sse([chunk({"content": "The"}), stall, chunk(finish="stop")]))
    model = chat(server, timeouts=Timeouts(read=0.2))
    seen: list[StreamChunk] = []
    try:
        with pytest.raises(ProviderTimeout, match="stalled"):
            async for c in model.stream(ask(stream=True)):
                seen.append(c)
    finally:
        stall.set()
    assert seen == [TextChunk("The")]
    await model.aclose()


async def test_cancelling_a_stream_closes_the_connection_and_the_client_stays_usable(
        server: LoopbackServer):
    stall = threading.Event()
    server.queue(Canned.sse([chunk({"content": "The"}), stall,
                             *[chunk({"content": " more"})] * 2000, chunk(finish="stop")]))
    model = chat(server)
    started = asyncio.Event()

    async def consume() -> None:
        async for c in model.stream(ask(stream=True)):
            if isinstance(c, TextChunk):
                started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stall.set()
    # The server sees the hang-up when it writes the rest of the stream.
    assert await asyncio.to_thread(server.disconnected.wait, 10)
    server.queue(Canned.json(completion("still here")))
    assert (await complete(model, ask())).message.text == "still here"
    await model.aclose()


# --- a whole agent run --------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call_then_answer(streamed: bool) -> list[Canned]:
    if streamed:
        return [
            Canned.sse([chunk({"role": "assistant", "content": ""}),
                        chunk(tc_delta(0, '{"a": 2', id="call_7", name="add")),
                        chunk(tc_delta(0, ', "b": 3}')), chunk(finish="tool_calls"),
                        chunk(usage=USAGE, choices=False)]),
            Canned.sse([chunk({"content": "The sum"}), chunk({"content": " is 5."}),
                        chunk(finish="stop"), chunk(usage=USAGE, choices=False)]),
        ]
    return [Canned.json(completion("", [wire_call("add", '{"a": 2, "b": 3}', "call_7")],
                                   finish="tool_calls", usage=USAGE)),
            Canned.json(completion("The sum is 5.", usage=USAGE))]


def assert_tool_round_trip(server: LoopbackServer) -> None:
    second = server.requests[1].body["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_7"
    assert second[-1] == {"role": "tool", "tool_call_id": "call_7", "content": "5"}


async def test_an_agent_run_with_one_tool_call_through_openai_chat(server: LoopbackServer):
    server.queue(*call_then_answer(streamed=False))
    agent = Agent(model=chat(server), tools=[add], system_prompt="Be brief.")
    result = await agent.run("What is 2+3?")
    assert result.text == "The sum is 5."
    assert str(result.stop_cause) == "completed" and result.turns == 2
    assert [(r.name, r.input, r.status) for r in result.tool_calls] == [
        ("add", {"a": 2, "b": 3}, "ok")]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (40, 10)
    assert all("stream" not in r.body for r in server.requests)
    assert_tool_round_trip(server)
    await agent.aclose()


async def test_an_agent_stream_with_one_tool_call_through_openai_chat(server: LoopbackServer):
    server.queue(*call_then_answer(streamed=True))
    agent = Agent(model=chat(server), tools=[add])
    events = [e async for e in agent.stream("What is 2+3?")]
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    finished = [e for e in events if isinstance(e, ToolFinished)]
    result = events[-1].result if isinstance(events[-1], RunFinished) else None
    assert deltas == "The sum is 5."
    assert [(f.tool, f.result.content) for f in finished] == [("add", "5")]
    assert result is not None and result.text == "The sum is 5."
    assert result.usage.output_tokens == 10
    assert all(r.body["stream"] is True for r in server.requests)
    assert_tool_round_trip(server)
    await agent.aclose()



async def _run(agent: Agent[Any], prompt: str, stream: bool) -> Any:
    """A run's result, not streamed (``run``) or streamed (``stream``)."""
    if not stream:
        return await agent.run(prompt)
    async for event in agent.stream(prompt):
        if isinstance(event, RunFinished):
            return event.result
    raise AssertionError("the stream ended without a result")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_refusal_beside_tool_calls_is_a_refusal_and_its_calls_do_not_run(
        server: LoopbackServer, stream: bool) -> None:
    """The attack: a model that refuses yet slips a call in beside the refusal. The answer
    is a refusal (content_filter): the run ends so, and the call never runs."""
    ran: list[str] = []

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    refusal = "I can't help with that."
    if stream:
        server.queue(Canned.sse([
            chunk({"refusal": refusal}),
            chunk(tc_delta(0, '{"path": "/etc/passwd"}', id="call_1", name="delete_file")),
            chunk(finish="tool_calls")]))
    else:
        server.queue(Canned.json(completion(
            None, calls=[wire_call("delete_file", '{"path": "/etc/passwd"}')],
            finish="tool_calls", refusal=refusal)))
    result = await _run(Agent(model=chat(server), tools=[delete_file]), "Clean up.", stream)
    assert ran == []
    assert result.stop_cause == "content_filter"
    assert result.text == refusal
    assert [r.status for r in result.tool_calls] != ["ok"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_control_tool_calls_without_a_refusal_run(server: LoopbackServer,
                                                        stream: bool) -> None:
    ran: list[str] = []

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    if stream:
        server.queue(Canned.sse([
            chunk(tc_delta(0, '{"path": "/tmp/x"}', id="call_1", name="delete_file")),
            chunk(finish="tool_calls")]), Canned.json(completion("done")))
    else:
        server.queue(Canned.json(completion(
            None, calls=[wire_call("delete_file", '{"path": "/tmp/x"}')],
            finish="tool_calls")), Canned.json(completion("done")))
    result = await _run(Agent(model=chat(server), tools=[delete_file]), "Clean up.", stream)
    assert ran == ["/tmp/x"] and result.stop_cause == "completed"
