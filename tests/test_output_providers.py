"""Structured output works the same through every provider adapter, over its real wire.

Each test runs ``agent.prepare(...).output()`` against a loopback server speaking one wire
protocol; the server answers by calling whichever answering tool it was offered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.servers.http import Canned, LoopbackServer, Recorded
from tether import Agent, OutputSpec
from tether.providers import Anthropic, Gemini, OpenAIChat, OpenAIResponses
from tether.providers.base import Provider

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "celsius": {"type": "number"}},
          "required": ["city", "celsius"]}
SPEC = OutputSpec("report", "The city and its temperature.", SCHEMA)
ANSWER = {"city": "Paris", "celsius": 21.5}


def openai_chat(request: Recorded) -> tuple[str, Canned]:
    name = request.body["tools"][0]["function"]["name"]
    return name, Canned.json({
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": name, "arguments": json.dumps(ANSWER)}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}})


def anthropic(request: Recorded) -> tuple[str, Canned]:
    name = request.body["tools"][0]["name"]
    return name, Canned.json({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": name, "input": ANSWER}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}})


def responses(request: Recorded) -> tuple[str, Canned]:
    name = request.body["tools"][0]["name"]
    return name, Canned.json({
        "id": "resp_1", "object": "response", "status": "completed", "model": "gpt",
        "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name,
                    "arguments": json.dumps(ANSWER), "status": "completed"}],
        "usage": {"input_tokens": 10, "output_tokens": 5}})


def gemini(request: Recorded) -> tuple[str, Canned]:
    name = request.body["tools"][0]["functionDeclarations"][0]["name"]
    return name, Canned.json({
        "candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": name, "args": ANSWER}}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5}})


def forced_choice(wire: str, body: dict[str, Any], name: str) -> bool:
    """Whether the request asks the provider to call exactly the answering tool."""
    if wire == "openai-chat":
        return body.get("tool_choice") in ({"type": "function", "function": {"name": name}},
                                           "required") and len(body["tools"]) == 1
    if wire == "anthropic":
        return body.get("tool_choice") == {"type": "tool", "name": name}
    if wire == "openai-responses":
        return body.get("tool_choice") == {"type": "function", "name": name}
    config = body["toolConfig"]["functionCallingConfig"]
    return bool(config == {"mode": "ANY", "allowedFunctionNames": [name]})


ADAPTERS: dict[str, tuple[Callable[[str], Provider], Callable[[Recorded], tuple[str, Canned]]]] = {
    "openai-chat": (lambda url: OpenAIChat(url + "/v1", "m", api_key="k", profile="openai"),
                    openai_chat),
    "anthropic": (lambda url: Anthropic(url, "claude", api_key="k"), anthropic),
    "openai-responses": (lambda url: OpenAIResponses(url + "/v1", "gpt", api_key="k"),
                         responses),
    "gemini": (lambda url: Gemini(url + "/v1beta", "gemini-2.5-flash", api_key="k"), gemini),
}




@pytest.mark.parametrize("wire", sorted(ADAPTERS))
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream-asked"])
async def test_a_shaping_turn_answers_through_the_adapter(wire: str, streamed: bool,
                                                          server: LoopbackServer) -> None:
    make, respond = ADAPTERS[wire]
    offered: list[str] = []

    def answer(request: Recorded) -> Canned:
        name, canned = respond(request)
        offered.append(name)
        return canned

    server.queue(answer)
    provider = make(server.url)
    reservation = SPEC.reserve()
    run = Agent(provider).prepare("Weather in Paris?", output=reservation)
    if streamed:
        # A streamed request answered with one JSON body is parsed the same way.
        async for _ in run.stream():
            pass
    report = await run.output()
    await provider.aclose()
    assert report.value == ANSWER
    assert offered == [reservation.tool_name]
    assert forced_choice(wire, server.requests[0].body, reservation.tool_name)
