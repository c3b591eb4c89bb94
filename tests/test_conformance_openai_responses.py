"""The OpenAI Responses adapter against real recorded Responses traffic, replayed on 127.0.0.1.

For every recorded exchange: the request is rebuilt as a ``ModelRequest`` from what was
sent (input items -> messages, instructions, tools, tool_choice, stream), the adapter's own
request must match the recorded one (input items, tools, tool_choice, include, stream), and
what it parsed from the recorded answer (text, tool calls with parsed arguments and call ids,
reasoning items, stop reason, usage) must equal what the recording says. A later exchange
also checks the round trip: the assistant turn tether parsed, sent back, is the one the real
client sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.servers.replay import CASSETTES, Interaction, ReplayServer, available, load
from tether.messages import Message, Part, Reasoning, Text, ToolCall, ToolResult
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
from tether.providers.openai_responses import OpenAIResponses, input_items
from tether.tools.spec import ToolSpec

if not available():
    pytest.skip(f"the recorded cassettes are not here ({CASSETTES}); the OpenAI Responses "
                "conformance suite needs ../shared/fixtures/cassettes", allow_module_level=True)

pytestmark = pytest.mark.conformance

NAMES = sorted(
    p.name for p in CASSETTES.iterdir()
    if (p.name.startswith("test_tool_choice_matrix[")
        and p.name.endswith("-openai_responses].yaml"))
    or (p.name.startswith("test_openai_responses__") and p.name.endswith(".yaml"))
)

# tool_choice values tether cannot express: ``allowed_tools`` narrows the offered tools to a
# subset; tether's nearest choice is "required" over every tool it offers.
INEXPRESSIBLE_CHOICE = "allowed_tools"

# This older recording sent the function call's item id (fc_...) as its call_id; tether
# sends the call_id the API returned, as the API documents. The round trip differs there only.
ITEM_ID_AS_CALL_ID = {"test_openai_responses__test_openai_responses_stream.yaml"}

NAME = "openai-responses"


def test_the_openai_responses_cassettes_are_all_found():
    assert len(NAMES) == 7, NAMES


# --- the recorded request as tether sees it --------------------------------------------------


def model_request(body: dict[str, Any]) -> ModelRequest:
    tools = [ToolSpec(t["name"], t.get("description") or "", t["parameters"])
             for t in body.get("tools", [])]
    wire_choice = body.get("tool_choice", "auto")
    choice: ToolChoice
    if isinstance(wire_choice, str):
        choice = wire_choice  # type: ignore[assignment]
    elif wire_choice["type"] == "function":
        choice = NamedToolChoice(wire_choice["name"])
    else:
        assert wire_choice["type"] == INEXPRESSIBLE_CHOICE, wire_choice
        choice = "required"
    return ModelRequest(messages=tether_messages(body["input"]),
                        system=body.get("instructions"), tools=tools, tool_choice=choice,
                        max_output_tokens=body.get("max_output_tokens"),
                        temperature=body.get("temperature"), stream=bool(body.get("stream")))


def tether_messages(items: list[dict[str, Any]]) -> tuple[Message, ...]:
    """Input items as the agent loop keeps them: one assistant message per model turn,
    tool results in ``tool`` messages."""
    out: list[Message] = []
    names: dict[str, str] = {}
    assistant: list[Part] = []
    results: list[ToolResult] = []

    def flush() -> None:
        if assistant:
            out.append(Message("assistant", tuple(assistant)))
            assistant.clear()
        if results:
            out.append(Message("tool", tuple(results)))
            results.clear()

    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item["role"] != "assistant":
            flush()
            content = item["content"]
            assert isinstance(content, str), item
            out.append(Message(item["role"], (Text(content),)))
        elif kind == "message":
            if results:
                flush()
            texts = item["content"] if isinstance(item["content"], list) else [
                {"text": item["content"]}]
            assistant.append(Text("".join(t["text"] for t in texts)))
        elif kind == "reasoning":
            if results:
                flush()
            assistant.append(Reasoning(
                "\n\n".join(s["text"] for s in item.get("summary") or []), NAME,
                provider_data={"id": item["id"], "summary": item.get("summary") or [],
                               "encrypted_content": item.get("encrypted_content")}))
        elif kind == "function_call":
            if results:
                flush()
            names[item["call_id"]] = item["name"]
            assistant.append(ToolCall(item["call_id"], item["name"], item["arguments"],
                                      {"id": item["id"]} if item.get("id") else None))
        elif kind == "function_call_output":
            if assistant:
                out.append(Message("assistant", tuple(assistant)))
                assistant.clear()
            results.append(ToolResult(item["call_id"], names[item["call_id"]], item["output"]))
        else:
            raise AssertionError(f"an input item the test cannot rebuild: {item}")
    flush()
    return tuple(out)


def same_input(sent: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> None:
    """The input items match; a user message may be a string or a list of input_text."""

    def normal(item: dict[str, Any]) -> Any:
        if item.get("type", "message") == "message" and item.get("role") != "assistant":
            content = item["content"]
            if isinstance(content, list):
                content = "".join(c["text"] for c in content)
            return ("message", item["role"], content)
        return item

    assert [normal(i) for i in sent] == [normal(i) for i in recorded]


# --- the recorded answer, independently of the adapter ---------------------------------------


def recorded_answer(rec: Interaction) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The final response object and, for a stream, its events in order."""
    if not rec.streamed:
        assert isinstance(rec.response_json, dict)
        return rec.response_json, []
    events = []
    for frame in rec.body.decode().split("\n\n"):
        data = [line[5:].strip() for line in frame.splitlines() if line.startswith("data:")]
        if data:
            events.append(json.loads("\n".join(data)))
    final = [e["response"] for e in events if e["type"] == "response.completed"]
    assert len(final) == 1, "a recorded stream ends with one response.completed"
    return final[0], events


def check_parsed(chunks: list[StreamChunk], answer: dict[str, Any],
                 events: list[dict[str, Any]]) -> None:
    final = chunks[-1]
    assert isinstance(final, Completed)
    response = final.response
    output = answer["output"]
    parts = response.message.parts

    # One part per output item, in order.
    kinds = {"message": "text", "function_call": "tool_call", "reasoning": "reasoning"}
    assert [p.kind for p in parts] == [kinds[i["type"]] for i in output]
    assert response.message.text == "".join(
        c["text"] for i in output if i["type"] == "message" for c in i["content"]
        if c["type"] == "output_text")
    assert [(c.id, c.name, c.parsed_arguments(), (c.provider_data or {}).get("id"))
            for c in response.message.tool_calls] == [
        (i["call_id"], i["name"], json.loads(i["arguments"]), i["id"])
        for i in output if i["type"] == "function_call"]
    reasoning = [p for p in parts if isinstance(p, Reasoning)]
    assert [(r.provider, (r.provider_data or {}).get("id"),
             (r.provider_data or {}).get("encrypted_content")) for r in reasoning] == [
        (NAME, i["id"], i.get("encrypted_content")) for i in output if i["type"] == "reasoning"]

    has_calls = any(i["type"] == "function_call" for i in output)
    assert answer["status"] == "completed"
    assert response.stop_reason == ("tool_calls" if has_calls else "end_turn")
    assert response.raw_stop_reason == answer["status"]

    usage = answer["usage"]
    reasoning_tokens = usage["output_tokens_details"]["reasoning_tokens"]
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.cache_read_tokens, response.usage.requests) == (
        usage["input_tokens"], usage["output_tokens"],
        usage["input_tokens_details"]["cached_tokens"], 1)
    assert response.usage.details == (
        {"reasoning_tokens": reasoning_tokens} if reasoning_tokens else {})
    assert (response.id, response.model) == (answer["id"], answer["model"])

    if not events:
        assert len(chunks) == 1
        return
    # The deltas the adapter yielded are the recorded deltas, and add up to the answer.
    assert [c.text for c in chunks if isinstance(c, TextChunk)] == [
        e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert [c.text for c in chunks if isinstance(c, ReasoningChunk)] == [
        e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"]
    assert "".join(c.text for c in chunks if isinstance(c, TextChunk)) == response.message.text
    calls: dict[int, list[str]] = {}
    starts: list[tuple[str | None, str | None]] = []
    for c in chunks:
        if isinstance(c, ToolCallChunk):
            calls.setdefault(c.index, []).append(c.arguments_delta)
            if c.id is not None:
                starts.append((c.id, c.name))
    assert starts == [(c.id, c.name) for c in response.message.tool_calls]
    assert [json.loads("".join(v)) for _, v in sorted(calls.items())] == [
        c.parsed_arguments() for c in response.message.tool_calls]


def assistant_turn(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items of the last model turn in a recorded input (before its tool outputs)."""
    end = len(items)
    while end and items[end - 1].get("type") == "function_call_output":
        end -= 1
    start = end
    while (start and items[start - 1].get("type") in ("reasoning", "function_call")) or (
            start and items[start - 1].get("role") == "assistant"):
        start -= 1
    return items[start:end]


@pytest.mark.parametrize("name", NAMES)
async def test_the_adapter_reads_each_recorded_responses_exchange(name: str) -> None:
    interactions = load(name)
    assert interactions, f"{name} holds no interactions"
    with ReplayServer(interactions) as server:
        provider = OpenAIResponses(f"{server.url}/v1", interactions[0].request_body["model"],
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
                assert sent.path == rec.path == "/v1/responses"
                body = sent.body
                assert body["model"] == recorded["model"]
                assert body.get("instructions") == recorded.get("instructions")
                assert body["stream"] == recorded["stream"]
                # The encrypted-reasoning default chose what the real client asked for.
                assert body.get("include") == recorded.get("include")
                same_input(body["input"], recorded["input"])
                assert [(t["type"], t["name"], t["description"], t["parameters"])
                        for t in body["tools"]] == [
                    (t["type"], t["name"], t["description"], t["parameters"])
                    for t in recorded["tools"]]
                choice = recorded["tool_choice"]
                if isinstance(choice, dict) and choice["type"] == INEXPRESSIBLE_CHOICE:
                    assert body["tool_choice"] == choice["mode"]
                else:
                    assert body["tool_choice"] == choice

                answer, events = recorded_answer(rec)
                check_parsed(chunks, answer, events)

                if previous is not None and name not in ITEM_ID_AS_CALL_ID:
                    # The real client sent back the turn it had received; the turn tether
                    # parsed must go back the same.
                    assert input_items([previous]) == [
                        {k: v for k, v in item.items() if k != "status"}
                        for item in assistant_turn(recorded["input"])]
                final = chunks[-1]
                assert isinstance(final, Completed)
                previous = final.response.message
        finally:
            await provider.aclose()
    assert len(server.requests) == len(interactions)
