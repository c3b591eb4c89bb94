"""A field of the wrong JSON type, anywhere an adapter reads, is a ``MalformedResponseError``
naming the provider: streamed and not, on every wire. And a run that meets one ends with a
``RunResult`` (on ``run`` the error's ``.result``; on ``stream`` the last event) and a
conversation that the next run continues."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from tests.faults.rawserver import RawServer, chunked, whole
from tests.providers.wires import WIRES
from tether.agent import Agent
from tether.errors import MalformedResponseError, ProviderError
from tether.events import RunFinished
from tether.messages import Message, ToolCall
from tether.outcome import StopCause
from tether.providers.base import ModelRequest
from tether.result import RunResult

ALL = sorted(WIRES)
Path = tuple[Any, ...]


def put(data: Any, path: Path, value: Any) -> Any:
    """A copy of ``data`` with the value at ``path`` (keys and indexes) replaced."""
    data = copy.deepcopy(data)
    *inner, last = path
    target = data
    for step in inner:
        target = target[step]
    if isinstance(target, tuple):  # a named event: (name, payload)
        raise AssertionError("paths into named events start at the payload (index 1)")
    target[last] = value
    return data


def named(events: list[Any]) -> list[Any]:
    """Named events as lists, so a path can reach into them."""
    return [list(e) if isinstance(e, tuple) else e for e in events]


# (path into the list of events, the wrong value). Paths into named events pass index 1.
STREAM_CASES: dict[str, list[tuple[Path, Any]]] = {
    "openai-chat": [
        ((1, "choices", 0, "delta", "content"), 5),
        ((1, "choices", 0, "delta", "content"), {"text": "hello"}),
        ((1, "choices", 0, "delta", "content"), [1, 2]),
        ((1, "choices", 0, "delta", "reasoning_content"), ["deep"]),
        ((1, "choices", 0, "delta"), "hello"),
        ((1, "choices", 0, "index"), "0"),
        ((1, "choices"), {"0": {}}),
        ((1, "choices"), "hello"),
        ((2, "choices", 0, "delta", "tool_calls"), "call"),
        ((2, "choices", 0, "delta", "tool_calls", 0, "function", "name"), ["add"]),
        ((2, "choices", 0, "delta", "tool_calls", 0, "function"), "add"),
        ((4, "choices", 0, "finish_reason"), {"why": "stop"}),
        ((4, "choices", 0, "finish_reason"), 7),
        ((5, "usage"), "lots"),
        ((5, "usage", "prompt_tokens"), -3),
        ((5, "usage", "completion_tokens"), "two"),
        ((5, "usage", "completion_tokens"), float("nan")),
        ((5, "usage", "completion_tokens"), float("inf")),
        ((5, "usage", "completion_tokens"), 2.5),
        ((0,), "an event that is a string"),
        ((0,), [1, 2, 3]),
        ((0, "model"), {"name": "m"}),
        ((0, "id"), ["chatcmpl-1"]),
    ],
    "openai-responses": [
        ((4, 1, "delta"), 5),
        ((4, 1, "delta"), ["hello"]),
        ((4, 1, "type"), 5),
        ((4, 1, "output_index"), "one"),
        ((4, 1, "output_index"), [1]),
        ((2, 1, "delta"), {"text": "thinking"}),
        ((3, 1, "item"), "message"),
        ((5, 1, "item"), ["function_call"]),
        ((5, 1, "item", "name"), 5),
        ((5, 1, "item", "call_id"), {"id": 1}),
        ((6, 1, "delta"), 5),
        ((7, 1, "response"), "done"),
        ((7, 1, "response", "usage"), [3, 2]),
        ((7, 1, "response", "usage", "input_tokens"), "3"),
        ((7, 1, "response", "status"), 5),
        ((7, 1, "response", "id"), {"id": 1}),
        ((0, 1), "created"),
    ],
    "anthropic": [
        ((6, 1, "delta", "text"), 5),
        ((6, 1, "delta", "text"), ["hello"]),
        ((6, 1, "delta"), "hello"),
        ((6, 1, "index"), [1]),
        ((6, 1, "index"), "1"),
        ((6, 1, "type"), 5),
        ((5, 1, "content_block"), "text"),
        ((5, 1, "index"), {"i": 1}),
        ((2, 1, "delta", "thinking"), 5),
        ((3, 1, "delta", "signature"), ["sig"]),
        ((1, 1, "content_block", "signature"), 5),
        ((8, 1, "content_block", "id"), 5),
        ((8, 1, "content_block", "name"), ["add"]),
        ((8, 1, "content_block", "input"), "{}"),
        ((9, 1, "delta", "partial_json"), {"a": 1}),
        ((11, 1, "delta", "stop_reason"), ["tool_use"]),
        ((11, 1, "delta", "stop_reason"), 5),
        ((11, 1, "usage", "output_tokens"), "2"),
        ((11, 1, "usage"), "two"),
        ((0, 1, "message", "usage"), "three"),
        ((0, 1, "message", "usage", "input_tokens"), -1),
        ((0, 1, "message", "model"), ["m"]),
        ((0, 1, "message"), "start"),
        ((0, 1), "a string event"),
        ((0, 1), [1, 2]),
    ],
    "gemini": [
        ((1, "candidates", 0, "content", "parts", 0, "text"), 5),
        ((1, "candidates", 0, "content", "parts", 0, "text"), ["hello"]),
        ((1, "candidates", 0, "content", "parts"), "hello"),
        ((1, "candidates", 0, "content", "parts"), {"text": "hello"}),
        ((1, "candidates", 0, "content"), "hello"),
        ((1, "candidates", 0), "hello"),
        ((1, "candidates"), {"0": {}}),
        ((1, "candidates"), "hello"),
        ((1, "usageMetadata"), "lots"),
        ((1, "usageMetadata", "promptTokenCount"), "3"),
        ((1, "modelVersion"), {"v": 1}),
        ((1, "responseId"), [1]),
        ((2, "candidates", 0, "finishReason"), 5),
        ((2, "candidates", 0, "finishReason"), ["STOP"]),
        ((2, "candidates", 0, "content", "parts", 0, "functionCall", "args"), [1, 2]),
        ((2, "candidates", 0, "content", "parts", 0, "functionCall", "args"), "{}"),
        ((2, "candidates", 0, "content", "parts", 0, "functionCall", "name"), 5),
        ((2, "candidates", 0, "content", "parts", 0, "functionCall", "id"), {"id": 1}),
        ((2, "candidates", 0, "content", "parts", 0, "functionCall"), "add"),
        ((2, "candidates", 0, "content", "parts", 0), "add"),
        ((0, "candidates", 0, "content", "parts", 0, "thoughtSignature"), 5),
        ((0,), "a string chunk"),
    ],
    "ollama": [
        ((1, "message", "content"), 5),
        ((1, "message", "content"), ["hello"]),
        ((1, "message"), "hello"),
        ((0, "message", "thinking"), {"t": "thinking"}),
        ((2, "message", "tool_calls"), "call"),
        ((2, "message", "tool_calls", 0), "add"),
        ((2, "message", "tool_calls", 0, "function"), "add"),
        ((2, "message", "tool_calls", 0, "function", "name"), ["add"]),
        ((3, "done"), "yes"),
        ((3, "done_reason"), 5),
        ((3, "prompt_eval_count"), "3"),
        ((3, "eval_count"), -1),
        ((0,), "a string line"),
        ((0,), [1, 2]),
    ],
}

BODY_CASES: dict[str, list[tuple[Path, Any]]] = {
    "openai-chat": [
        (("choices",), "hello"),
        (("choices",), {"0": {}}),
        (("choices", 0), "hello"),
        (("choices", 0, "message"), "hello"),
        (("choices", 0, "message", "content"), 5),
        (("choices", 0, "message", "content"), {"text": "hello"}),
        (("choices", 0, "message", "content"), [5]),
        (("choices", 0, "message", "refusal"), 5),
        (("choices", 0, "message", "reasoning_content"), {"a": 1}),
        (("choices", 0, "message", "tool_calls"), "call"),
        (("choices", 0, "message", "tool_calls"), [{"function": {"name": ["add"]}}]),
        (("choices", 0, "finish_reason"), [1]),
        (("usage",), "lots"),
        (("usage", "prompt_tokens"), "many"),
        (("usage", "prompt_tokens"), -1),
        (("id",), {"id": 1}),
    ],
    "openai-responses": [
        (("output",), "hello"),
        (("output", 0), 5),
        (("output", 0, "content"), "hello"),
        (("output", 0, "content", 0), "hello"),
        (("output", 0, "content", 0, "text"), 5),
        (("output", 0, "content", 0, "text"), {"t": "hello"}),
        (("usage",), [3, 2]),
        (("usage", "output_tokens"), "2"),
        (("status",), 5),
        (("id",), {"id": 1}),
        (("incomplete_details",), "why"),
    ],
    "anthropic": [
        (("content",), {"a": 1}),
        (("content",), "hello"),
        (("content", 0), "hello"),
        (("content", 0, "text"), 5),
        (("content", 0, "text"), ["hello"]),
        (("usage",), "three"),
        (("usage", "input_tokens"), "3"),
        (("stop_reason",), ["end_turn"]),
        (("stop_reason",), 5),
        (("model",), 5),
        (("id",), {"id": 1}),
    ],
    "gemini": [
        (("candidates",), "hello"),
        (("candidates", 0), "hello"),
        (("candidates", 0, "content"), 5),
        (("candidates", 0, "content", "parts"), "hello"),
        (("candidates", 0, "content", "parts", 0), "hello"),
        (("candidates", 0, "content", "parts", 0, "text"), 5),
        (("candidates", 0, "finishReason"), 5),
        (("usageMetadata",), [1]),
        (("usageMetadata", "candidatesTokenCount"), "2"),
        (("modelVersion",), [1]),
        (("promptFeedback",), "blocked"),
    ],
    "ollama": [
        (("message",), "hello"),
        (("message", "content"), 5),
        (("message", "thinking"), ["deep"]),
        (("message", "tool_calls"), "call"),
        (("done_reason",), ["stop"]),
        (("prompt_eval_count",), "3"),
        (("eval_count",), -1),
    ],
}


def stream_case_ids() -> list[Any]:
    return [pytest.param(w, p, v, id=f"{w}-{'.'.join(map(str, p))}={json.dumps(v)[:20]}")
            for w, cases in STREAM_CASES.items() for p, v in cases]


def body_case_ids() -> list[Any]:
    return [pytest.param(w, p, v, id=f"{w}-{'.'.join(map(str, p))}={json.dumps(v)[:20]}")
            for w, cases in BODY_CASES.items() for p, v in cases]


async def error_of(wire: str, url: str, streamed: bool) -> ProviderError:
    provider = WIRES[wire].provider(url)
    try:
        async for _ in provider.stream(ModelRequest((Message.user("hi"),), stream=streamed)):
            pass
    except ProviderError as error:
        return error
    finally:
        await provider.aclose()
    raise AssertionError("the answer was accepted")


@pytest.mark.parametrize(("wire", "path", "value"), stream_case_ids())
async def test_a_wrong_typed_field_in_a_stream_event_is_a_malformed_answer(
        raw: RawServer, wire: str, path: Path, value: Any) -> None:
    events = put(named(WIRES[wire].events(["hello"], ['{"a": 1}'])), path, value)
    frames = [f"{json.dumps(e)}\n".encode() if WIRES[wire].ndjson else
              f"data: {json.dumps(e)}\n\n".encode() if not WIRES[wire].named or
              not isinstance(e, list) else
              f"event: {e[0]}\ndata: {json.dumps(e[1])}\n\n".encode() for e in events]
    raw.queue(chunked(frames, content_type=WIRES[wire].stream_type))
    error = await error_of(wire, raw.url, streamed=True)
    assert isinstance(error, MalformedResponseError), error
    assert error.provider == wire and str(error).startswith(wire)


@pytest.mark.parametrize(("wire", "path", "value"), body_case_ids())
async def test_a_wrong_typed_field_in_a_whole_answer_is_a_malformed_answer(
        raw: RawServer, wire: str, path: Path, value: Any) -> None:
    raw.queue(whole(json.dumps(put(WIRES[wire].body("hello"), path, value)).encode()))
    error = await error_of(wire, raw.url, streamed=False)
    assert isinstance(error, MalformedResponseError), error
    assert error.provider == wire and str(error).startswith(wire)


# --- the run around it ------------------------------------------------------------------------

def bad_and_good(raw: RawServer, wire: str, streamed: bool) -> None:
    """A first answer with a wrong-typed field, then a good one."""
    spec = WIRES[wire]
    path, value = (STREAM_CASES if streamed else BODY_CASES)[wire][0]
    if streamed:
        events = put(named(spec.events(["hello"], None)), path, value)
        raw.queue(chunked(spec.frames([tuple(e) if spec.named else e for e in events]),
                          content_type=spec.stream_type))
        raw.queue(chunked(spec.sse(["again"]), content_type=spec.stream_type))
    else:
        raw.queue(whole(json.dumps(put(spec.body("hello"), path, value)).encode()))
        raw.queue(whole(json.dumps(spec.body("again")).encode()))


@pytest.mark.parametrize("wire", ALL)
def test_run_raises_the_malformed_answer_with_a_result_whose_conversation_continues(
        raw: RawServer, wire: str) -> None:
    bad_and_good(raw, wire, streamed=False)
    agent = Agent(WIRES[wire].provider(raw.url))
    with pytest.raises(MalformedResponseError) as caught:
        agent.run_sync("first")
    result = caught.value.result
    assert isinstance(result, RunResult)
    assert result.stop_cause == StopCause.ERROR and result.error is caught.value
    again = agent.run_sync("second", conversation=result.conversation)
    assert (again.stop_cause, again.text) == (StopCause.COMPLETED, "again")
    assert [m.role for m in again.conversation.messages] == ["user", "user", "assistant"]


@pytest.mark.parametrize("wire", ALL)
def test_a_stream_ends_with_the_result_of_the_malformed_answer_and_continues(
        raw: RawServer, wire: str) -> None:
    bad_and_good(raw, wire, streamed=True)
    agent = Agent(WIRES[wire].provider(raw.url))

    async def last_event(prompt: str, **kw: Any) -> Any:
        last = None
        async for event in agent.stream(prompt, **kw):
            last = event
        return last

    finished = asyncio.run(last_event("first"))
    assert isinstance(finished, RunFinished)
    assert finished.result.stop_cause == StopCause.ERROR
    assert isinstance(finished.result.error, MalformedResponseError)
    again = asyncio.run(last_event("second", conversation=finished.result.conversation))
    assert isinstance(again, RunFinished)
    assert (again.result.stop_cause, again.result.text) == (StopCause.COMPLETED, "again")


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("arguments", [
    "[" * 100_000 + "]" * 100_000,  # past the parser's limit
    '{"a": ' * 600 + "1" + "}" * 600,  # past tether's
    "{not json",
    '"a string"',
])
def test_the_next_request_carries_a_call_whose_arguments_are_no_object(
        wire: str, arguments: str) -> None:
    # A model can write anything as arguments; the gate answers it, and the call still goes
    # back to the provider with the next request.
    body = WIRES[wire].next_body(Message("assistant", (ToolCall("call_1", "add", arguments),)))
    assert b"call_1" in body or b"add" in body
