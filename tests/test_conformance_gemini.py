"""The Gemini adapter against real recorded Gemini API traffic (../shared/fixtures/cassettes).

For each recorded interaction the ``ModelRequest`` is rebuilt from the recorded request,
the adapter sends it to a replay server on 127.0.0.1, and two things are checked:

- what the adapter parsed, against the recorded response: text (and each streamed delta),
  tool calls (names, arguments as parsed JSON), thought signatures kept, stop reason, usage;
- what the adapter sent, against the recorded request (which the real service accepted),
  after normalising the differences that are choices of the recording client, not the wire
  (see ``normalise``).

Multi-turn cassettes are also chained: the adapter's own parsed answer is sent back in the
next request, whose body must carry the same function call and signature bytes that the
real service accepted.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.servers.replay import Interaction, ReplayServer, available, load
from tether.messages import Message, Part, Role, Text, ToolCall, ToolResult
from tether.providers.base import (
    Completed,
    ModelRequest,
    ModelResponse,
    NamedToolChoice,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
    ToolChoice,
)
from tether.providers.gemini import Gemini
from tether.tools.spec import ToolSpec

pytestmark = [
    pytest.mark.skipif(not available(),
                       reason="../shared/fixtures/cassettes is absent: no recorded traffic"),
    pytest.mark.conformance,
]

CASSETTES = [
    "test_tool_choice_matrix[auto-google].yaml",
    "test_tool_choice_matrix[list_single-google].yaml",
    "test_tool_choice_matrix[none-google].yaml",
    "test_tool_choice_matrix[none_with_output-google].yaml",
    "test_tool_choice_matrix[required-google].yaml",
    "test_tool_choice_matrix[tools_plus_output-google].yaml",
    "test_google__test_google_model_stream.yaml",
    "test_openai__test_multiple_agent_tool_calls.yaml",
]


def interactions(name: str) -> list[Interaction]:
    return load(name, "googleapis")


def cases() -> list[Any]:
    if not available():
        return []
    return [pytest.param(name, i, id=f"{name.removesuffix('.yaml')}#{i}")
            for name in CASSETTES for i in range(len(interactions(name)))]


# --- the recorded request as tether data -------------------------------------------------------


def request_from_recording(recorded: Interaction) -> ModelRequest:
    body = recorded.request_body
    messages: list[Message] = []
    for content in body["contents"]:
        parts: list[Part] = []
        for part in content["parts"]:
            if "text" in part:
                parts.append(Text(part["text"]))
            elif "functionCall" in part:
                call = part["functionCall"]
                data = {"provider": "gemini"}
                if part.get("thoughtSignature"):
                    data["thoughtSignature"] = part["thoughtSignature"]
                parts.append(ToolCall(call.get("id") or f"call-{call['name']}", call["name"],
                                      json.dumps(call["args"]), data))
            elif "functionResponse" in part:
                fr = part["functionResponse"]
                parts.append(ToolResult(fr.get("id") or f"call-{fr['name']}", fr["name"],
                                        str(fr["response"]["return_value"])))
            else:
                raise AssertionError(f"a recorded part this test does not know: {part}")
        role: Role = "assistant" if content["role"] == "model" else (
            "tool" if all(isinstance(p, ToolResult) for p in parts) else "user")
        messages.append(Message(role, tuple(parts)))
    system = body.get("systemInstruction")
    config = body.get("generationConfig") or {}
    return ModelRequest(
        messages=tuple(messages),
        system=system["parts"][0]["text"] if system else None,
        tools=[ToolSpec(d["name"], d.get("description", ""),
                        d.get("parameters_json_schema") or d.get("parameters") or {})
               for d in declarations(body)],
        tool_choice=tool_choice(body),
        max_output_tokens=config.get("maxOutputTokens"),
        temperature=config.get("temperature"),
        stream="streamGenerateContent" in recorded.uri,
    )


def declarations(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools") or []
    if isinstance(tools, dict):  # the older client sent one Tool object, not a list
        tools = [tools]
    return [d for t in tools
            for d in t.get("functionDeclarations") or t.get("function_declarations") or []]


def tool_choice(body: dict[str, Any]) -> ToolChoice:
    config = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    mode, names = config.get("mode", "AUTO"), config.get("allowedFunctionNames")
    if mode == "ANY":
        # tether names one tool or none; "any of these two" (tools_plus_output) is sent as
        # "required", which lets the model also pick the third tool.
        return NamedToolChoice(names[0]) if names and len(names) == 1 else "required"
    return "none" if mode == "NONE" else "auto"


# --- normalising the recorded and the sent body ------------------------------------------------


def signature_bytes(value: str) -> bytes:
    """A signature as bytes: the recording client re-encoded them URL-safe, the adapter
    sends back exactly what it received; the service reads either."""
    return base64.b64decode(value.replace("-", "+").replace("_", "/"))


def normalise(body: dict[str, Any], *, tools_plus_output: bool = False) -> dict[str, Any]:
    """What the service acts on, with the recording client's choices set aside:
    snake_case or camelCase keys, ``parameters`` or ``parametersJsonSchema``, the client's
    own call ids, ``responseModalities``, a ``role`` on ``systemInstruction``, the
    ``return_value`` key of a function response (tether uses the documented ``output``)."""
    out: dict[str, Any] = {"contents": []}
    for content in body["contents"]:
        parts = []
        for part in content["parts"]:
            if "functionCall" in part:
                call = part["functionCall"]
                p: dict[str, Any] = {"call": call["name"], "args": call["args"]}
                if part.get("thoughtSignature"):
                    p["signature"] = signature_bytes(part["thoughtSignature"])
                parts.append(p)
            elif "functionResponse" in part:
                response = part["functionResponse"]["response"]
                value = response.get("return_value", response.get("output"))
                parts.append({"response": part["functionResponse"]["name"], "value": value})
            else:
                parts.append(part)
        out["contents"].append({"role": content["role"], "parts": parts})
    if body.get("systemInstruction"):
        out["system"] = [p["text"] for p in body["systemInstruction"]["parts"]]
    decls = declarations(body)
    if decls:
        out["tools"] = [{"name": d["name"], "description": d.get("description"),
                         "schema": d.get("parametersJsonSchema") or d.get("parameters_json_schema")
                         or d.get("parameters")} for d in decls]
    config = (body.get("toolConfig") or {}).get("functionCallingConfig")
    if config and not tools_plus_output:
        out["toolConfig"] = config
    elif decls:
        out["toolConfig"] = {"mode": (config or {}).get("mode", "AUTO")}
    generation = {k: v for k, v in (body.get("generationConfig") or {}).items()
                  if k != "responseModalities"}
    if generation:
        out["generation"] = generation
    return out


# --- what the recording says the answer was ------------------------------------------------------


def recorded_chunks(recorded: Interaction) -> list[dict[str, Any]]:
    if not recorded.streamed:
        return [recorded.response_json]
    text = recorded.body.decode()
    return [json.loads(line[len("data:"):]) for line in text.splitlines()
            if line.startswith("data:")]


def recorded_parts(recorded: Interaction) -> list[dict[str, Any]]:
    return [p for chunk in recorded_chunks(recorded) for c in chunk.get("candidates", [])[:1]
            for p in (c.get("content") or {}).get("parts", [])]


def expected_stop(recorded: Interaction) -> str:
    finish = [c.get("finishReason") for chunk in recorded_chunks(recorded)
              for c in chunk.get("candidates", [])[:1] if c.get("finishReason")][-1]
    has_calls = any("functionCall" in p for p in recorded_parts(recorded))
    if finish == "STOP":
        return "tool_calls" if has_calls else "end_turn"
    return {"MAX_TOKENS": "max_tokens", "SAFETY": "content_filter"}.get(finish, "other")


# --- driving the adapter -------------------------------------------------------------------------


async def run(recorded: Interaction, request: ModelRequest
              ) -> tuple[list[StreamChunk], ModelResponse, dict[str, Any], str]:
    with ReplayServer([recorded]) as server:
        model = Gemini(f"{server.url}/v1beta", recorded.path.split("/models/")[1].split(":")[0],
                       api_key="replay-key")
        try:
            chunks = [c async for c in model.stream(request)]
        finally:
            await model.aclose()
        sent = server.requests[0]
    final = chunks[-1]
    assert isinstance(final, Completed)
    assert sent.headers["x-goog-api-key"] == "replay-key"
    return chunks, final.response, sent.body, sent.path


@pytest.mark.parametrize(("name", "index"), cases())
async def test_the_adapter_parses_what_gemini_answered(name: str, index: int) -> None:
    recorded = interactions(name)[index]
    chunks, response, _, path = await run(recorded, request_from_recording(recorded))
    assert path == recorded.path
    parts = recorded_parts(recorded)

    texts = [p["text"] for p in parts if "text" in p and not p.get("thought")]
    assert response.message.text == "".join(texts)
    if recorded.streamed:
        assert [c.text for c in chunks if isinstance(c, TextChunk)] == [t for t in texts if t]

    calls = [p for p in parts if "functionCall" in p]
    got = response.message.tool_calls
    assert [(c.name, c.parsed_arguments()) for c in got] == [
        (p["functionCall"]["name"], p["functionCall"]["args"]) for p in calls]
    assert [(c.provider_data or {}).get("thoughtSignature") for c in got] == [
        p.get("thoughtSignature") for p in calls]
    assert len({c.id for c in got}) == len(got) and all(c.id for c in got)
    if recorded.streamed:
        streamed_calls = [c for c in chunks if isinstance(c, ToolCallChunk)]
        assert [(c.id, c.name) for c in streamed_calls] == [(c.id, c.name) for c in got]

    assert response.stop_reason == expected_stop(recorded)
    meta = recorded_chunks(recorded)[-1]["usageMetadata"]
    thoughts = meta.get("thoughtsTokenCount", 0)
    assert response.usage.input_tokens == meta["promptTokenCount"]
    assert response.usage.output_tokens == meta.get("candidatesTokenCount", 0) + thoughts
    assert response.usage.details.get("reasoning_tokens", 0) == thoughts
    assert response.model == recorded_chunks(recorded)[-1]["modelVersion"]


@pytest.mark.parametrize(("name", "index"), cases())
async def test_the_request_matches_what_gemini_accepted(name: str, index: int) -> None:
    recorded = interactions(name)[index]
    _, _, sent, _ = await run(recorded, request_from_recording(recorded))
    loose = "tools_plus_output" in name
    assert normalise(sent, tools_plus_output=loose) == normalise(
        recorded.request_body, tools_plus_output=loose)
    # The adapter's own wire choices, where the recording client made others:
    for decl in declarations(sent):
        assert "parametersJsonSchema" in decl
    for content in sent["contents"]:
        for part in content["parts"]:
            if "functionResponse" in part:
                assert set(part["functionResponse"]["response"]) == {"output"}


MULTI_TURN = [n for n in CASSETTES if len(interactions(n)) > 1] if available() else []


@pytest.mark.parametrize("name", MULTI_TURN)
async def test_the_parsed_answer_goes_back_as_gemini_accepted_it(name: str) -> None:
    first, second = interactions(name)[:2]
    _, response, _, _ = await run(first, request_from_recording(first))
    rebuilt = request_from_recording(second)
    recorded_results = rebuilt.messages[-1]
    assert recorded_results.role == "tool"
    # Answer with the adapter's own call ids, as the agent loop would.
    results = tuple(ToolResult(call.id, call.name, result.content)
                    for call, result in zip(response.message.tool_calls,
                                            recorded_results.tool_results, strict=True))
    chained = ModelRequest(messages=(*rebuilt.messages[:-2], response.message,
                                     Message("tool", results)),
                           system=rebuilt.system, tools=rebuilt.tools,
                           tool_choice=rebuilt.tool_choice, stream=rebuilt.stream)
    _, _, sent, _ = await run(second, chained)
    loose = "tools_plus_output" in name
    assert normalise(sent, tools_plus_output=loose) == normalise(
        second.request_body, tools_plus_output=loose)
    # No id of the adapter's making reaches the service.
    for content in sent["contents"]:
        for part in content["parts"]:
            assert "id" not in part.get("functionCall", part.get("functionResponse", {}))
