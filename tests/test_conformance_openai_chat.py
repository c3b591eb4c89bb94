"""The Chat Completions adapter against real recorded OpenAI traffic, replayed on 127.0.0.1.

For every recorded exchange sent to api.openai.com: the request is rebuilt as a
``ModelRequest`` from what was sent, the adapter's own request body must equal the recorded
one (less the fields tether has no setting for), and what it parsed from the recorded answer
(text, tool calls with their ids and arguments, stop reason, usage) must equal what the
recording says. Later exchanges of a cassette also check the round trip: the assistant turn
the adapter parsed, sent back, is exactly the turn the real client sent.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.servers.replay import CASSETTES, Interaction, ReplayServer, available, load
from tether import Agent, tool
from tether.events import RunFinished, TextDelta
from tether.messages import Message, Part, Text, ToolCall, ToolResult
from tether.providers.base import (
    Completed,
    ModelRequest,
    NamedToolChoice,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
)
from tether.providers.openai_chat import OpenAIChat, wire_messages
from tether.tools.spec import ToolSpec

if not available():
    pytest.skip(f"the recorded cassettes are not here ({CASSETTES}); the OpenAI Chat "
                "conformance suite needs ../shared/fixtures/cassettes", allow_module_level=True)

pytestmark = pytest.mark.conformance

NAMES = sorted(
    p.name for p in CASSETTES.iterdir()
    if (p.name.startswith("test_tool_choice_matrix[") and p.name.endswith("-openai].yaml"))
    or (p.name.startswith("test_openai__") and p.name.endswith(".yaml"))
)

HOST = "api.openai.com"

STOP = {"stop": "end_turn", "tool_calls": "tool_calls", "length": "max_tokens",
        "content_filter": "content_filter"}


def test_the_openai_chat_cassettes_are_all_found():
    assert len(NAMES) == 8, NAMES
    assert all(load(name, HOST) for name in NAMES)


# --- the recorded request as tether sees it ----------------------------------------------------


def model_request(body: dict[str, Any]) -> ModelRequest:
    tools = [ToolSpec(t["function"]["name"], t["function"].get("description", ""),
                      t["function"]["parameters"]) for t in body.get("tools", [])]
    wire_choice = body.get("tool_choice", "auto")
    choice: ToolChoice = (NamedToolChoice(wire_choice["function"]["name"])
                          if isinstance(wire_choice, dict) else wire_choice)
    system = None
    messages = body["messages"]
    if messages and messages[0]["role"] == "system":
        system, messages = messages[0]["content"], messages[1:]
    return ModelRequest(messages=tether_messages(messages), system=system, tools=tools,
                        tool_choice=choice, stream=bool(body.get("stream")))


def tether_messages(wire: list[dict[str, Any]]) -> tuple[Message, ...]:
    """Wire messages as the agent loop keeps them: consecutive tool messages in one."""
    out: list[Message] = []
    names: dict[str, str] = {}
    for m in wire:
        if m["role"] == "assistant":
            parts: list[Part] = []
            if m.get("content"):
                parts.append(Text(m["content"]))
            for c in m.get("tool_calls") or []:
                names[c["id"]] = c["function"]["name"]
                parts.append(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]))
            out.append(Message("assistant", tuple(parts)))
        elif m["role"] == "tool":
            result = ToolResult(m["tool_call_id"], names[m["tool_call_id"]], m["content"])
            if out and out[-1].role == "tool":
                out[-1] = Message("tool", (*out[-1].parts, result))
            else:
                out.append(Message("tool", (result,)))
        else:
            assert isinstance(m["content"], str), m
            out.append(Message(m["role"], (Text(m["content"]),)))
    return tuple(out)


def comparable(body: dict[str, Any]) -> dict[str, Any]:
    """A request body less what tether has no setting for (``n``, ``strict`` tools), with
    ``stream: false`` and a null assistant ``content`` read as absent."""
    body = copy.deepcopy(body)
    body.pop("n", None)
    if body.get("stream") is False:
        del body["stream"]
    for t in body.get("tools", []):
        t["function"].pop("strict", None)
    for m in body["messages"]:
        if m["role"] == "assistant" and m.get("content") is None:
            m.pop("content", None)
    return body


# --- the recorded answer, independently of the adapter ----------------------------------------


def recorded_answer(rec: Interaction) -> dict[str, Any]:
    """The recorded answer as a whole completion (a stream folded as the API documents)."""
    if not rec.streamed:
        assert isinstance(rec.response_json, dict)
        return rec.response_json
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    answer: dict[str, Any] = {}
    finish = None
    for frame in rec.body.decode().split("\n\n"):
        data = "\n".join(line[5:].strip() for line in frame.splitlines()
                         if line.startswith("data:"))
        if not data or data == "[DONE]":
            continue
        event = json.loads(data)
        answer.setdefault("id", event["id"])
        answer.setdefault("model", event["model"])
        if event.get("usage"):
            answer["usage"] = event["usage"]
        for choice in event["choices"]:
            delta = choice["delta"]
            if delta.get("content"):
                message["content"] = (message["content"] or "") + delta["content"]
            for c in delta.get("tool_calls") or []:
                call = calls.setdefault(c["index"], {"function": {"arguments": ""}})
                if "id" in c:
                    call["id"] = c["id"]
                if c["function"].get("name"):
                    call["function"]["name"] = c["function"]["name"]
                call["function"]["arguments"] += c["function"].get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    answer["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return answer


def check_parsed(chunks: list[StreamChunk], answer: dict[str, Any], streamed: bool) -> None:
    final = chunks[-1]
    assert isinstance(final, Completed)
    response = final.response
    choice = answer["choices"][0]
    message = choice["message"]
    calls = message.get("tool_calls") or []

    assert response.message.role == "assistant"
    assert [p.kind for p in response.message.parts] == (
        ["text"] * bool(message.get("content")) + ["tool_call"] * len(calls))
    assert response.message.text == (message.get("content") or "")
    assert [(c.id, c.name, c.parsed_arguments()) for c in response.message.tool_calls] == [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in calls]

    assert response.raw_stop_reason == choice["finish_reason"]
    assert response.stop_reason == STOP[choice["finish_reason"]]
    usage = answer["usage"]
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.cache_read_tokens, response.usage.requests) == (
        usage["prompt_tokens"], usage["completion_tokens"],
        usage["prompt_tokens_details"]["cached_tokens"], 1)
    assert response.usage.details.get("reasoning_tokens", 0) == reasoning
    assert (response.id, response.model) == (answer["id"], answer["model"])

    if streamed:
        # The deltas add up to the final message.
        assert "".join(c.text for c in chunks if isinstance(c, TextChunk)) == (
            response.message.text)
        pieces: dict[int, list[str]] = {}
        for c in chunks:
            if isinstance(c, ToolCallChunk):
                pieces.setdefault(c.index, []).append(c.arguments_delta)
        assert ["".join(v) for _, v in sorted(pieces.items())] == [
            c.arguments for c in response.message.tool_calls]
    else:
        assert len(chunks) == 1


@pytest.mark.parametrize("name", NAMES)
async def test_the_adapter_reads_each_recorded_openai_chat_exchange(name: str) -> None:
    interactions = load(name, HOST)
    with ReplayServer(interactions) as server:
        provider = OpenAIChat(f"{server.url}/v1", interactions[0].request_body["model"],
                              api_key="replay-key", profile="openai")
        previous: Message | None = None
        try:
            for i, rec in enumerate(interactions):
                recorded = rec.request_body
                request = model_request(recorded)
                chunks = [c async for c in provider.stream(request)]

                sent = server.requests[i]
                assert sent.path == rec.path == "/v1/chat/completions"
                assert comparable(sent.body) == comparable(recorded)
                check_parsed(chunks, recorded_answer(rec), rec.streamed)

                if previous is not None:
                    # The real client sent back the assistant turn it had received; the turn
                    # tether parsed must go back the same.
                    turn = next(m for m in reversed(recorded["messages"])
                                if m["role"] == "assistant")
                    assert comparable({"messages": wire_messages([previous])}) == comparable(
                        {"messages": [turn]})
                final = chunks[-1]
                assert isinstance(final, Completed)
                previous = final.response.message
        finally:
            await provider.aclose()
    assert len(server.requests) == len(interactions)


@tool
def get_capital(country: str) -> str:
    """Get the capital of a country."""
    return {"UK": "London"}.get(country, "unknown")


async def test_an_agent_streams_a_recorded_tool_round_through_openai_chat() -> None:
    interactions = load("test_openai__test_run_stream_sync_streams_real_model.yaml", HOST)
    with ReplayServer(interactions) as server:
        agent = Agent(OpenAIChat(f"{server.url}/v1", "gpt-4o-mini", api_key="replay-key",
                                 profile="openai"), tools=[get_capital])
        events = [e async for e in agent.stream(
            "What is the capital of the UK? Use the tool, then answer.")]
        await agent.aclose()
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    result = finished.result
    assert result.text == "The capital of the UK is London."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == result.text
    assert [(r.name, r.input, r.output) for r in result.tool_calls] == [
        ("get_capital", {"country": "UK"}, "London")]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (53 + 78, 15 + 9)
    # What the agent sent back is what the real client sent back.
    assert comparable(server.requests[1].body)["messages"] == comparable(
        interactions[1].request_body)["messages"]
