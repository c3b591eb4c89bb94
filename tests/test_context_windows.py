"""Knowing the window: what each server says about it (loopback servers speaking each
server's own endpoints), the tokenizer, and the server's overflow error as the wire
carries it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.servers.http import Canned, LoopbackServer, Recorded
from tether import Agent, Conversation
from tether import events as ev
from tether.messages import Message, ToolCall, ToolResult
from tether.providers.openai_chat import OpenAIChat
from tether.providers.window import DEFAULT_WINDOWS, server_root
from tether.settings import ContextConfig


def _answer(prompt_tokens: int = 100) -> Canned:
    return Canned.json({"id": "r1", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"},
         "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}})


def _router(routes: dict[str, Callable[[Recorded], Canned] | Canned]
            ) -> Callable[[Recorded], Canned]:
    """One responder for every request: by method and path; chat completions answer."""
    def respond(request: Recorded) -> Canned:
        key = f"{request.method} {request.path.split('?')[0]}"
        if key in routes:
            route = routes[key]
            return route(request) if callable(route) else route
        if request.path.endswith("/chat/completions"):
            return _answer()
        return Canned.json({"error": "not found"}, 404)

    return respond


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


def _long_history(rounds: int = 16, size: int = 1500) -> Conversation:
    messages = [Message.user("Read the records.")]
    for i in range(rounds):
        messages.append(Message("assistant", (ToolCall(f"c{i}", "lookup", f'{{"n": {i}}}'),)))
        messages.append(Message("tool", (ToolResult(f"c{i}", "lookup", "z" * size),)))
    messages.append(Message.assistant("Done."))
    return Conversation(messages)


async def _run(server: LoopbackServer, profile: str, routes: dict[str, Any],
               conversation: Conversation | None = None, model: str = "qwen",
               ) -> tuple[list[ev.Event], list[Recorded]]:
    server.queue(*[_router(routes)] * 20)
    agent = Agent(OpenAIChat(f"{server.url}/v1", model, profile=profile))
    async with agent:
        events = [e async for e in agent.stream(
            "How many?", conversation=conversation or _long_history())]
    return events, list(server.requests)


def _fitted(events: list[ev.Event]) -> ev.ContextFitted:
    (fitted,) = [e for e in events if isinstance(e, ev.ContextFitted)]
    return fitted


def _chats(requests: list[Recorded]) -> list[Recorded]:
    return [r for r in requests if r.path.endswith("/chat/completions")]


async def test_llama_server_says_its_window_in_props_and_counts_with_its_tokenizer(
        server: LoopbackServer) -> None:
    counted: list[str] = []

    def tokenize(request: Recorded) -> Canned:
        counted.append(request.body["content"])
        return Canned.json({"tokens": list(range(len(request.body["content"]) // 4))})

    events, requests = await _run(server, "llama-server", {
        "GET /props": Canned.json({"default_generation_settings": {"n_ctx": 2048},
                                   "total_slots": 1}),
        "POST /tokenize": tokenize,
    })
    assert [f"{r.method} {r.path.split('?')[0]}" for r in requests] == [
        "GET /props", "POST /tokenize", "POST /v1/chat/completions"]
    # A router serves many models: the window is asked for the one the requests name.
    assert requests[0].path.endswith("?model=" + requests[-1].body["model"])
    fitted = _fitted(events)
    assert fitted.window == 2048 and fitted.dropped > 0
    assert counted and "result of lookup" in counted[0]
    sent = _chats(requests)[0].body["messages"]
    assert len(sent) < 34 and sent[-1] == {"role": "user", "content": "How many?"}


async def test_a_short_conversation_asks_the_server_nothing(server: LoopbackServer) -> None:
    events, requests = await _run(server, "llama-server", {}, Conversation())
    assert [r.path for r in requests] == ["/v1/chat/completions"]
    assert not any(isinstance(e, ev.ContextFitted) for e in events)


@pytest.mark.parametrize(("routes", "window"), [
    ({"GET /api/ps": Canned.json({"models": [{"name": "qwen", "model": "qwen",
                                               "context_length": 3072}]})}, 3072),
    ({"GET /api/ps": Canned.json({"models": []}),
      "POST /api/show": Canned.json({"parameters": "stop \"<|im_end|>\"\nnum_ctx 2560",
                                     "model_info": {"qwen2.context_length": 32768}})}, 2560),
    ({}, DEFAULT_WINDOWS["ollama"]),
], ids=["loaded", "modelfile", "default"])
async def test_ollama_says_the_loaded_window_else_the_modelfiles_else_its_default(
        server: LoopbackServer, routes: dict[str, Any], window: int) -> None:
    events, requests = await _run(server, "ollama", routes)
    assert _fitted(events).window == window
    assert requests[0].path == "/api/ps"
    # Ollama's OpenAI-compatible endpoint has no field for num_ctx; nothing is sent for it.
    assert "options" not in _chats(requests)[0].body


async def test_vllm_says_max_model_len_in_its_models_list(server: LoopbackServer) -> None:
    events, _ = await _run(server, "vllm", {"GET /v1/models": Canned.json(
        {"data": [{"id": "other", "max_model_len": 99999},
                  {"id": "qwen", "max_model_len": 2304}]})})
    assert _fitted(events).window == 2304


async def test_lm_studio_says_the_loaded_context_length(server: LoopbackServer) -> None:
    events, _ = await _run(server, "lmstudio", {"GET /api/v0/models/qwen": Canned.json(
        {"id": "qwen", "max_context_length": 32768, "loaded_context_length": 2200})})
    assert _fitted(events).window == 2200


@pytest.mark.parametrize("props", [
    Canned(200, b"<html>not json</html>", {"content-type": "text/html"}),
    Canned.json({"default_generation_settings": {"n_ctx": "lots"}}),
    Canned.json([1, 2, 3]),
    Canned.json({"error": "no"}, 500),
], ids=["html", "wrong_type", "a_list", "an_error"])
async def test_a_server_that_says_nothing_usable_gets_its_profiles_default(
        server: LoopbackServer, props: Canned) -> None:
    events, _ = await _run(server, "llama-server", {"GET /props": props,
                                                    "POST /tokenize": Canned.json({})})
    assert _fitted(events).window == DEFAULT_WINDOWS["llama-server"]


async def test_a_generic_server_is_not_asked_and_nothing_is_fitted_until_it_overflows(
        server: LoopbackServer) -> None:
    events, requests = await _run(server, "generic", {})
    assert [r.path for r in requests] == ["/v1/chat/completions"]
    assert not any(isinstance(e, ev.ContextFitted) for e in events)


async def test_llama_servers_overflow_error_fits_the_request_to_the_window_it_states(
        server: LoopbackServer) -> None:
    refused: list[int] = []

    def chat(request: Recorded) -> Canned:
        size = len(json.dumps(request.body["messages"]))
        if not refused:
            refused.append(size)
            return Canned.json({"error": {
                "code": 400, "type": "exceed_context_size_error",
                "message": "request (6702 tokens) exceeds the available context size "
                           "(2048 tokens), try increasing it",
                "n_prompt_tokens": 6702, "n_ctx": 2048}}, 400)
        return _answer(1500)

    events, requests = await _run(server, "generic", {"POST /v1/chat/completions": chat})
    fitted = _fitted(events)
    assert fitted.reason == "overflow" and fitted.window == 2048
    chats = _chats(requests)
    assert len(chats) == 2
    assert len(json.dumps(chats[1].body["messages"])) < refused[0] / 2
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.result.stop_cause == "completed"


def test_the_server_root_drops_the_openai_compatible_prefix() -> None:
    assert server_root("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080"
    assert server_root("http://h:11434/v1/") == "http://h:11434"
    assert server_root("http://h/llama") == "http://h/llama"


def test_a_configured_window_is_used_without_asking() -> None:
    agent = Agent(OpenAIChat("http://127.0.0.1:9/v1", "qwen", profile="llama-server"),
                  context=ContextConfig(window=4096))
    assert agent.context_fitter().window == 4096
