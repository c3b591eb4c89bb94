"""The four wires as a hostile server speaks them: answers with whatever tool call ids the
server likes (duplicated, reused), whole or streamed, and what tether sent back.

``answer(wire, stream, calls=[(id, name, args), ...], text=...)`` is one canned answer;
``last_round(wire, body)`` reads a request body back as the ids of the last assistant
turn's calls and the (id, content) of the results that follow them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tests.servers.http import Canned
from tether.providers import Anthropic, Gemini, OpenAIChat, OpenAIResponses
from tether.providers.base import Provider

WIRES = ("openai-chat", "openai-responses", "anthropic", "gemini")

Call = tuple[str, str, dict[str, Any]]


def provider(wire: str, url: str) -> Provider:
    if wire == "openai-chat":
        return OpenAIChat(f"{url}/v1", "m", api_key="k")
    if wire == "openai-responses":
        return OpenAIResponses(f"{url}/v1", "m", api_key="k")
    if wire == "anthropic":
        return Anthropic(url, "m", api_key="k")
    return Gemini(f"{url}/v1beta", "m", api_key="k")


def answer(wire: str, stream: bool, calls: Sequence[Call] = (), text: str = "") -> Canned:
    build = {"openai-chat": _chat, "openai-responses": _responses, "anthropic": _anthropic,
             "gemini": _gemini}[wire]
    return build(stream, list(calls), text)


# --- Chat Completions ---------------------------------------------------------------------


def _chat(stream: bool, calls: list[Call], text: str) -> Canned:
    wire_calls = [{"id": i, "type": "function",
                   "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls]
    finish = "tool_calls" if calls else "stop"
    usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if wire_calls:
            message["tool_calls"] = wire_calls
        return Canned.json({"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                            "choices": [{"index": 0, "message": message,
                                         "finish_reason": finish}], "usage": usage})
    chunks: list[Any] = []

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    if text:
        chunks.append(chunk({"role": "assistant", "content": text}))
    for index, wire_call in enumerate(wire_calls):
        chunks.append(chunk({"tool_calls": [{"index": index, **wire_call}]}))
    chunks.append(chunk({}, finish))
    chunks.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
                   "choices": [], "usage": usage})
    return Canned.sse(chunks)


# --- Responses ----------------------------------------------------------------------------


def _responses(stream: bool, calls: list[Call], text: str) -> Canned:
    # A hostile server repeats the item ids too, not only the call ids.
    output: list[dict[str, Any]] = []
    if text:
        output.append({"type": "message", "id": "msg_1", "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    output.extend({"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": n,
                   "arguments": json.dumps(a), "status": "completed"} for i, n, a in calls)
    response = {"id": "resp_1", "object": "response", "model": "m", "status": "completed",
                "error": None, "incomplete_details": None, "output": output,
                "usage": {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10}}
    if not stream:
        return Canned.json(response)
    events: list[tuple[str, Any]] = [("response.created", {
        "type": "response.created", "response": {**response, "status": "in_progress",
                                                 "output": []}})]
    for index, item in enumerate(output):
        added = {**item, "arguments": ""} if item["type"] == "function_call" else \
            {**item, "content": []}
        events.append(("response.output_item.added", {
            "type": "response.output_item.added", "output_index": index, "item": added}))
        if item["type"] == "function_call":
            events.append(("response.function_call_arguments.delta", {
                "type": "response.function_call_arguments.delta", "output_index": index,
                "item_id": item["id"], "delta": item["arguments"]}))
        else:
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "output_index": index,
                "item_id": item["id"], "content_index": 0, "delta": text}))
        events.append(("response.output_item.done", {
            "type": "response.output_item.done", "output_index": index, "item": item}))
    events.append(("response.completed", {"type": "response.completed",
                                           "response": response}))
    return Canned.sse(events, named=True, done=False)


# --- Anthropic Messages -------------------------------------------------------------------


def _anthropic(stream: bool, calls: list[Call], text: str) -> Canned:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    content.extend({"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls)
    stop = "tool_use" if calls else "end_turn"
    usage = {"input_tokens": 5, "output_tokens": 5}
    if not stream:
        return Canned.json({"id": "msg_1", "type": "message", "role": "assistant",
                            "model": "m", "content": content, "stop_reason": stop,
                            "stop_sequence": None, "usage": usage})
    events: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})]
    for index, block in enumerate(content):
        start: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": index,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 5}}),
               ("message_stop", {"type": "message_stop"})]
    return Canned.sse(events, named=True, done=False)


# --- Gemini ---------------------------------------------------------------------------------


def _gemini(stream: bool, calls: list[Call], text: str) -> Canned:
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"text": text})
    parts.extend({"functionCall": {"id": i, "name": n, "args": a}} for i, n, a in calls)
    data = {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5,
                              "totalTokenCount": 10},
            "modelVersion": "m", "responseId": "r1"}
    if not stream:
        return Canned.json(data)
    return Canned.sse([data], done=False)


# --- reading back what tether sent ----------------------------------------------------------------


def last_round(wire: str, body: Any) -> tuple[list[str | None], list[tuple[str | None, str]]]:
    """The ids of the calls of the last assistant turn in ``body``, and the results sent
    after them as (id, content)."""
    if wire == "openai-chat":
        messages = body["messages"]
        last = max(i for i, m in enumerate(messages) if m.get("tool_calls"))
        calls = [c["id"] for c in messages[last]["tool_calls"]]
        results = [(m["tool_call_id"], m["content"]) for m in messages[last + 1:]
                   if m["role"] == "tool"]
        return calls, results
    if wire == "openai-responses":
        items = body["input"]
        last_output = max(i for i, it in enumerate(items)
                          if it.get("type") == "function_call_output")
        first_output = last_output
        while first_output > 0 and items[first_output - 1].get("type") == \
                "function_call_output":
            first_output -= 1
        start = first_output
        while start > 0 and items[start - 1].get("type") == "function_call":
            start -= 1
        return ([it["call_id"] for it in items[start:first_output]],
                [(it["call_id"], it["output"]) for it in items[first_output:last_output + 1]])
    if wire == "anthropic":
        messages = body["messages"]
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant"
                   and any(b["type"] == "tool_use" for b in m["content"]))
        calls = [b["id"] for b in messages[last]["content"] if b["type"] == "tool_use"]
        results = [(b["tool_use_id"], b["content"]) for b in messages[last + 1]["content"]
                   if b["type"] == "tool_result"]
        return calls, results
    contents = body["contents"]
    last = max(i for i, c in enumerate(contents) if c["role"] == "model"
               and any("functionCall" in p for p in c["parts"]))
    calls = [p["functionCall"].get("id") for p in contents[last]["parts"] if "functionCall" in p]
    results = []
    for p in contents[last + 1]["parts"]:
        if "functionResponse" in p:
            response = p["functionResponse"]
            content = response["response"].get("output", response["response"].get("error"))
            results.append((response.get("id"), content))
    return calls, results
