"""Ollama's own API (``kind = "ollama"``): what this wire does beyond the contract suite.

The window sent as ``options.num_ctx`` (configured, or asked of ``/api/show``), a missing
model named with ``ollama pull``, images (refused before any request for a model without
vision), tool calls and results, thinking, ``keep_alive``; the configuration and `tether
doctor` for the kind. Against a real HTTP server on 127.0.0.1 speaking the wire. No
recorded traffic of a real Ollama exists among the shared fixtures (docs/providers.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.providers.helpers import ask, collect, final
from tests.servers.http import Canned, LoopbackServer
from tests.test_cli_first_hour import tether
from tether import Agent, tool
from tether.config.build import build_provider
from tether.config.schema import ProviderConfig
from tether.conversation import Conversation
from tether.errors import BadRequestError, NotFoundError, OutputFailure
from tether.events import RunFinished
from tether.messages import Image, Message, Reasoning, Text, ToolCall, ToolResult
from tether.providers.base import ModelRequest, ReasoningChunk
from tether.providers.ollama import DEFAULT_NUM_CTX, Ollama

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def line(content: str = "", done: bool = False, **message: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"model": "m", "message": {"role": "assistant", "content": content,
                                                      **message}, "done": done}
    if done:
        item.update(done_reason="stop", prompt_eval_count=7, eval_count=3)
    return item


def answer(text: str = "Hello", **message: Any) -> Canned:
    return Canned.json(line(text, done=True, **message))


def stream(*items: dict[str, Any]) -> Canned:
    return Canned(200, [json.dumps(i) + "\n" for i in items],
                  {"content-type": "application/x-ndjson"})


def shown(context_length: int = 32768, capabilities: tuple[str, ...] = ("completion", "tools")
          ) -> Canned:
    return Canned.json({"model_info": {"general.architecture": "qwen2",
                                       "qwen2.context_length": context_length},
                        "capabilities": list(capabilities)})


def chats(server: LoopbackServer) -> list[Any]:
    return [r.body for r in server.requests if r.path == "/api/chat"]


# --- the window ---------------------------------------------------------------------------


async def test_a_configured_window_is_sent_as_num_ctx_with_every_request_and_nothing_asked(
        server: LoopbackServer) -> None:
    server.queue(answer(), answer())
    model = Ollama(server.url, "m", num_ctx=2048)
    for _ in range(2):
        await collect(model, ask())
    assert [r.path for r in server.requests] == ["/api/chat", "/api/chat"]
    assert [b["options"]["num_ctx"] for b in chats(server)] == [2048, 2048]
    assert chats(server)[0]["stream"] is False
    assert await model.context_window() == 2048
    await model.aclose()


async def test_without_a_configured_window_the_models_length_is_asked_once_and_capped(
        server: LoopbackServer) -> None:
    server.queue(shown(131072), answer(), answer())
    model = Ollama(server.url, "m")
    await collect(model, ask())
    await collect(model, ask())
    assert [r.path for r in server.requests] == ["/api/show", "/api/chat", "/api/chat"]
    assert server.requests[0].body == {"model": "m"}
    assert [b["options"]["num_ctx"] for b in chats(server)] == [DEFAULT_NUM_CTX] * 2
    assert await model.context_window() == DEFAULT_NUM_CTX
    await model.aclose()


async def test_a_model_trained_on_a_short_window_gets_its_own_length(
        server: LoopbackServer) -> None:
    server.queue(shown(2048), answer())
    model = Ollama(server.url, "m")
    assert await model.context_window() == 2048
    await collect(model, ask())
    assert chats(server)[0]["options"]["num_ctx"] == 2048
    await model.aclose()


async def test_another_model_on_the_same_server_asks_for_its_own_window(
        server: LoopbackServer) -> None:
    server.queue(shown(4096), answer(), shown(16384), answer())
    model = Ollama(server.url, "small")
    await collect(model, ask())
    other = model.with_model("large")
    await collect(other, ask())
    assert [(r.path, r.body["model"]) for r in server.requests] == [
        ("/api/show", "small"), ("/api/chat", "small"), ("/api/show", "large"),
        ("/api/chat", "large")]
    assert [b["options"]["num_ctx"] for b in chats(server)] == [4096, 8192]
    await model.aclose()


async def test_a_conversation_fitted_to_a_2048_token_window_reaches_the_model_whole(
        server: LoopbackServer) -> None:
    # The measurement of docs/local.md: what the fitter kept is what the request carries,
    # with the window the server is told to use, so Ollama cuts nothing from its start.
    server.queue(answer("fine"))
    history: list[Message] = []
    for i in range(60):
        history += [Message.user(f"question {i}: " + "lorem ipsum dolor " * 12),
                    Message("assistant", (Text(f"answer {i}: " + "sit amet " * 10),))]
    model = Ollama(server.url, "m", num_ctx=2048)
    result = await Agent(model).run("and now?", conversation=Conversation(history))
    assert result.text == "fine"
    (body,) = chats(server)
    assert body["options"]["num_ctx"] == 2048
    sent = json.dumps(body["messages"])
    assert "and now?" in sent and "question 59" in sent and "question 0:" not in sent
    # Four characters a token at most for this text: what went fits the window.
    assert len(sent) // 4 < 2048
    await model.aclose()


# --- a missing model ----------------------------------------------------------------------


async def test_a_model_that_is_not_pulled_is_an_error_naming_ollama_pull(
        server: LoopbackServer) -> None:
    server.queue(Canned.json({"error": "model 'qwen3:4b' not found"}, 404))
    model = Ollama(server.url, "qwen3:4b")
    with pytest.raises(NotFoundError, match=r"ollama pull qwen3:4b"):
        await collect(model, ask())
    assert [r.path for r in server.requests] == ["/api/show"]
    await model.aclose()


async def test_a_chat_answered_model_not_found_names_ollama_pull_too(
        server: LoopbackServer) -> None:
    server.queue(Canned.json({"error": 'model "llama3.2" not found, try pulling it first'},
                             404))
    model = Ollama(server.url, "llama3.2", num_ctx=4096)
    with pytest.raises(NotFoundError, match=r"`ollama pull llama3.2`"):
        await collect(model, ask())
    await model.aclose()


# --- images -------------------------------------------------------------------------------


def with_image(stream: bool = False) -> ModelRequest:
    return ModelRequest((Message("user", (Text("what is it?"), Image("image/png", PNG))),),
                        stream=stream)


async def test_an_image_goes_as_base64_in_the_messages_images(server: LoopbackServer) -> None:
    server.queue(shown(capabilities=("completion", "vision")), answer("a picture"))
    model = Ollama(server.url, "llava", num_ctx=4096)
    response = final(await collect(model, with_image())).response
    assert response.message.text == "a picture"
    (body,) = chats(server)
    (user,) = body["messages"]
    assert user["content"] == "what is it?"
    assert user["images"] == [Image("image/png", PNG).base64()]
    await model.aclose()


async def test_an_image_for_a_model_without_vision_is_refused_before_any_chat_request(
        server: LoopbackServer) -> None:
    server.queue(shown(capabilities=("completion", "tools")))
    model = Ollama(server.url, "m", num_ctx=4096)
    with pytest.raises(BadRequestError, match="does not take images"):
        await collect(model, with_image())
    assert [r.path for r in server.requests] == ["/api/show"]
    await model.aclose()


# --- tools, thinking, settings ------------------------------------------------------------


async def test_a_tool_call_runs_and_its_result_goes_back_naming_the_tool(
        server: LoopbackServer) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    server.queue(stream(line(tool_calls=[{"function": {"name": "add",
                                                       "arguments": {"a": 2, "b": 3}}}]),
                        line(done=True)),
                 stream(line("5"), line(done=True)))
    model = Ollama(server.url, "m", num_ctx=4096)
    events = [e async for e in Agent(model, tools=[add]).stream("add 2 and 3")]
    assert isinstance(events[-1], RunFinished) and events[-1].result.text == "5"
    first, second = chats(server)
    assert first["tools"][0]["function"]["name"] == "add" and first["stream"] is True
    assistant, result = second["messages"][-2:]
    assert assistant["tool_calls"] == [{"function": {"name": "add",
                                                     "arguments": {"a": 2, "b": 3}}}]
    assert result == {"role": "tool", "content": "5", "tool_name": "add"}
    await model.aclose()


async def test_thinking_streams_as_reasoning_and_goes_back_to_this_wire_only(
        server: LoopbackServer) -> None:
    server.queue(stream(line(thinking="let me see"), line("yes"), line(done=True)))
    model = Ollama(server.url, "m", num_ctx=4096, think=True, keep_alive="30m")
    chunks = await collect(model, ask(stream=True))
    assert ReasoningChunk("let me see") in chunks
    message = final(chunks).response.message
    assert Reasoning("let me see", "ollama") in message.parts
    (body,) = chats(server)
    assert body["think"] is True and body["keep_alive"] == "30m"
    replayed = model.request_body(ModelRequest((Message.user("q"), message,
                                                Message.user("go on"))))
    assert replayed["messages"][1] == {"role": "assistant", "thinking": "let me see",
                                       "content": "yes"}
    foreign = Message("assistant", (Reasoning("secret", "anthropic"), Text("ok")))
    assert "thinking" not in model.request_body(
        ModelRequest((Message.user("q"), foreign)))["messages"][1]
    await model.aclose()


async def test_usage_is_the_prompt_and_eval_counts_and_a_cut_answer_is_max_tokens(
        server: LoopbackServer) -> None:
    server.queue(Canned.json({**line("Hel", done=True), "done_reason": "length"}))
    model = Ollama(server.url, "m", num_ctx=4096)
    response = final(await collect(model, ask(max_output_tokens=5))).response
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 3)
    assert response.stop_reason == "max_tokens"
    assert chats(server)[0]["options"]["num_predict"] == 5
    await model.aclose()


def test_a_tool_result_and_a_call_with_broken_arguments_still_go_back() -> None:
    body = Ollama("http://127.0.0.1:1", "m", num_ctx=4096).request_body(ModelRequest((
        Message.user("q"), Message("assistant", (ToolCall("c1", "add", "{not json"),)),
        Message("user", (ToolResult("c1", "add", "bad arguments", is_error=True),)))))
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == {
        "_raw": "{not json"}
    assert body["messages"][2]["tool_name"] == "add"


# --- configuration and the command line -------------------------------------------------


def test_kind_ollama_builds_the_adapter_with_the_configured_window_as_num_ctx() -> None:
    model = build_provider("o", ProviderConfig(kind="ollama", model="qwen2.5:7b",
                                               base_url="http://127.0.0.1:11434/v1",
                                               context_window=16384, keep_alive="1h"))
    assert isinstance(model, Ollama)
    assert model.num_ctx == 16384 and model.base_url == "http://127.0.0.1:11434"
    body = model.request_body(ModelRequest((Message.user("hi"),)))
    assert body["options"] == {"num_ctx": 16384} and body["keep_alive"] == "1h"


def test_ollama_settings_on_another_kind_are_refused_naming_the_key() -> None:
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match=r"providers\.x\.keep_alive"):
        build_provider("x", ProviderConfig(kind="openai-chat", model="m", keep_alive="5m"))


def ollama_workspace(tmp_path: Path, url: str, model: str) -> Path:
    (tmp_path / "tether.toml").write_text(f"""
default_provider = "o"
[providers.o]
kind = "ollama"
base_url = "{url}"
model = "{model}"
context_window = 4096
max_retries = 0
""")
    return tmp_path


TAGS = {"models": [{"name": "qwen2.5:7b", "model": "qwen2.5:7b", "size": 4683087332},
                   {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189}]}


def test_doctor_says_which_models_are_pulled(tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(Canned.json(TAGS))
    out = tether(ollama_workspace(tmp_path, server.url, "llama3.2"), "doctor", "--provider", "o")
    assert "model 'llama3.2' pulled" in out.stdout and "qwen2.5:7b" in out.stdout, out.stdout
    assert server.requests[0].path == "/api/tags"


def test_doctor_names_ollama_pull_for_a_model_that_is_not_pulled(
        tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(Canned.json(TAGS))
    out = tether(ollama_workspace(tmp_path, server.url, "qwen3:4b"), "doctor", "--provider", "o")
    assert out.returncode == 1
    assert "`ollama pull qwen3:4b`" in out.stdout, out.stdout


def test_run_against_ollama_sends_num_ctx(tmp_path: Path, server: LoopbackServer) -> None:
    server.queue(stream(line("Paris"), line(done=True)))
    out = tether(ollama_workspace(tmp_path, server.url, "m"), "run", "--no-tools",
                 "Capital of France?")
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout
    assert chats(server)[0]["options"]["num_ctx"] == 4096


async def test_call_ids_a_hostile_server_repeats_are_made_unique_and_each_call_answered(
        server: LoopbackServer) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    same = {"id": "call_1", "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}
    other = {"id": "call_1", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
    server.queue(answer("", tool_calls=[same, other]), answer("done"))
    model = Ollama(server.url, "m", num_ctx=4096)
    result = await Agent(model, tools=[add]).run("add twice")
    ids = [r.call_id for r in result.tool_calls]
    assert len(set(ids)) == 2 and result.text == "done"
    _, second = chats(server)
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in results] == ["2", "4"]
    await model.aclose()


async def test_a_shaping_turn_offers_the_answering_tool_and_sends_no_format(
        server: LoopbackServer) -> None:
    # `format` would hold the model to the schema's JSON, leaving it no way to write a tool
    # call: the answer comes through the answering tool, as on every wire (docs/providers.md).
    from tether import OutputSpec

    server.queue(answer("Paris"))  # what the server answers does not matter here
    spec = OutputSpec("report", "The city.", {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"]})
    agent = Agent(Ollama(server.url, "m", num_ctx=4096))
    with pytest.raises(OutputFailure):  # it answered in words, then nothing more was queued
        await agent.prepare("Which city?", output=spec).output()
    body = chats(server)[0]
    assert "format" not in body
    [offered] = body["tools"]  # the answering tool alone
    assert offered["function"]["name"].startswith("report_")
