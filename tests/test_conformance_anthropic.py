"""The Anthropic adapter against real recorded Anthropic traffic, replayed on 127.0.0.1.

For every recorded exchange: the request is rebuilt as a ``ModelRequest`` from what was
sent, the adapter's own request body must equal the recorded one, and what it parsed from
the recorded answer (text, tool calls, thinking, stop reason, usage) must equal what the
recording says. Later exchanges of a cassette also check the round trip: the assistant
turn the adapter parsed, sent back, is exactly the turn the real client sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.servers.replay import CASSETTES, Interaction, ReplayServer, available, load
from tether.messages import Message, Part, Reasoning, Text, ToolCall, ToolResult
from tether.providers.anthropic import Anthropic, wire_messages
from tether.providers.base import (
    Completed,
    ModelRequest,
    NamedToolChoice,
    ReasoningChunk,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
)
from tether.tools.spec import ToolSpec

if not available():
    pytest.skip(f"the recorded cassettes are not here ({CASSETTES}); the Anthropic "
                "conformance suite needs ../shared/fixtures/cassettes", allow_module_level=True)

pytestmark = pytest.mark.conformance

NAMES = sorted(
    p.name for p in CASSETTES.iterdir()
    if (p.name.startswith("test_tool_choice_matrix[") and p.name.endswith("-anthropic].yaml"))
    or (p.name.startswith("test_anthropic__") and p.name.endswith(".yaml"))
)

# Request fields tether has no setting for; the adapter does not send them.
NOT_MAPPED = {"thinking"}

STOP = {"end_turn": "end_turn", "stop_sequence": "end_turn", "tool_use": "tool_calls",
        "max_tokens": "max_tokens", "refusal": "content_filter"}


def test_the_anthropic_cassettes_are_all_found():
    assert len(NAMES) == 8, NAMES


# --- the recorded request as tether sees it ----------------------------------------------------


def model_request(body: dict[str, Any]) -> ModelRequest:
    tools = [ToolSpec(t["name"], t.get("description", ""), t["input_schema"])
             for t in body.get("tools", [])]
    choice: ToolChoice = "auto"
    wire_choice = body.get("tool_choice") or {"type": "auto"}
    if wire_choice["type"] == "tool":
        choice = NamedToolChoice(wire_choice["name"])
    else:
        named: dict[str, ToolChoice] = {"auto": "auto", "none": "none", "any": "required"}
        choice = named[wire_choice["type"]]
    return ModelRequest(messages=tether_messages(body["messages"]), system=body.get("system"),
                        tools=tools, tool_choice=choice, max_output_tokens=body["max_tokens"],
                        stream=bool(body.get("stream")))


def tether_messages(wire: list[dict[str, Any]]) -> tuple[Message, ...]:
    """Wire messages as the agent loop keeps them: tool results in ``tool`` messages."""
    out: list[Message] = []
    names: dict[str, str] = {}
    for m in wire:
        content = m["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if m["role"] == "assistant":
            parts: list[Part] = []
            for b in content:
                if b["type"] == "text":
                    parts.append(Text(b["text"]))
                elif b["type"] == "tool_use":
                    names[b["id"]] = b["name"]
                    parts.append(ToolCall(b["id"], b["name"], json.dumps(b["input"])))
                elif b["type"] == "thinking":
                    parts.append(Reasoning(b["thinking"], "anthropic", b.get("signature")))
                else:
                    raise AssertionError(f"a block the test cannot rebuild: {b}")
            out.append(Message("assistant", tuple(parts)))
            continue
        results = [ToolResult(b["tool_use_id"], names[b["tool_use_id"]], b["content"],
                              b.get("is_error", False))
                   for b in content if b["type"] == "tool_result"]
        texts = [Text(b["text"]) for b in content if b["type"] == "text"]
        assert len(results) + len(texts) == len(content), content
        if results:
            out.append(Message("tool", tuple(results)))
        if texts:
            out.append(Message("user", tuple(texts)))
    return tuple(out)


# --- the recorded answer, independently of the adapter ----------------------------------------


def recorded_answer(rec: Interaction) -> dict[str, Any]:
    """The recorded answer as a whole message (a stream folded the way the API documents)."""
    if not rec.streamed:
        assert isinstance(rec.response_json, dict)
        return rec.response_json
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    for frame in rec.body.decode().split("\n\n"):
        data = [line[5:].strip() for line in frame.splitlines() if line.startswith("data:")]
        if not data:
            continue
        event = json.loads("\n".join(data))
        if event["type"] == "message_start":
            message = dict(event["message"])
        elif event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta":
            b, d = blocks[event["index"]], event["delta"]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                b["_json"] = b.get("_json", "") + d["partial_json"]
        elif event["type"] == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message["usage"], **event["usage"]}
    for b in blocks.values():
        if "_json" in b:
            b["input"] = json.loads(b.pop("_json") or "{}")
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def check_parsed(chunks: list[StreamChunk], answer: dict[str, Any], streamed: bool) -> None:
    final = chunks[-1]
    assert isinstance(final, Completed)
    response = final.response
    content = answer["content"]
    parts = response.message.parts

    # One part per block, in order.
    kinds = {"text": "text", "tool_use": "tool_call", "thinking": "reasoning",
             "redacted_thinking": "reasoning"}
    assert [p.kind for p in parts] == [kinds[b["type"]] for b in content]
    assert response.message.text == "".join(b["text"] for b in content if b["type"] == "text")
    assert [(c.id, c.name, c.parsed_arguments()) for c in response.message.tool_calls] == [
        (b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
    reasoning = [p for p in parts if isinstance(p, Reasoning)]
    assert [(r.provider, r.text, r.signature, r.redacted) for r in reasoning] == [
        ("anthropic", b.get("thinking", ""), b.get("signature"), b.get("data"))
        for b in content if b["type"] in ("thinking", "redacted_thinking")]

    assert response.raw_stop_reason == answer["stop_reason"]
    assert response.stop_reason == STOP[answer["stop_reason"]]
    usage = answer["usage"]
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (
        usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)
        + usage.get("cache_creation_input_tokens", 0), usage["output_tokens"],
        usage.get("cache_read_input_tokens", 0), usage.get("cache_creation_input_tokens", 0))
    assert (response.id, response.model) == (answer["id"], answer["model"])

    if streamed:
        # The deltas add up to the final message.
        assert "".join(c.text for c in chunks if isinstance(c, TextChunk)) == (
            response.message.text)
        assert "".join(c.text for c in chunks if isinstance(c, ReasoningChunk)) == "".join(
            r.text for r in reasoning)
        calls: dict[int, list[str]] = {}
        for c in chunks:
            if isinstance(c, ToolCallChunk):
                calls.setdefault(c.index, []).append(c.arguments_delta)
        assert [json.loads("".join(v) or "{}") for _, v in sorted(calls.items())] == [
            c.parsed_arguments() for c in response.message.tool_calls]
    else:
        assert len(chunks) == 1


@pytest.mark.parametrize("name", NAMES)
async def test_the_adapter_reads_each_recorded_anthropic_exchange(name: str) -> None:
    interactions = load(name)
    assert interactions, f"{name} holds no interactions"
    with ReplayServer(interactions) as server:
        provider = Anthropic(server.url, interactions[0].request_body["model"],
                             api_key="replay-key")
        previous: Message | None = None
        try:
            for i, rec in enumerate(interactions):
                recorded = rec.request_body
                model = provider if recorded["model"] == provider.model else (
                    provider.with_model(recorded["model"]))
                request = model_request(recorded)
                chunks = [c async for c in model.stream(request)]

                sent = server.requests[i]
                assert sent.path.split("?")[0] == rec.path.split("?")[0] == "/v1/messages"
                assert sent.body == {k: v for k, v in recorded.items() if k not in NOT_MAPPED}
                check_parsed(chunks, recorded_answer(rec), rec.streamed)

                if previous is not None:
                    # The real client sent back the assistant turn it had received; the turn
                    # tether parsed must go back the same.
                    turn = next(m for m in reversed(recorded["messages"])
                                if m["role"] == "assistant")
                    assert wire_messages([previous]) == [turn]
                final = chunks[-1]
                assert isinstance(final, Completed)
                previous = final.response.message
        finally:
            await provider.aclose()
    assert len(server.requests) == len(interactions)
