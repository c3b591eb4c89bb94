"""Text is repaired, not fatal: a surrogate pair split across two stream events is joined,
a lone surrogate becomes U+FFFD before it enters a message, so the next request and the
session store can always encode what a provider said."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.faults.rawserver import RawServer, chunked, whole
from tests.providers.helpers import texts
from tests.providers.wires import WIRES, Wire
from tether.agent import Agent
from tether.errors import BadRequestError, ProviderError
from tether.messages import Message, ToolCall
from tether.providers.base import (
    Completed,
    ModelRequest,
    ReasoningChunk,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
)
from tether.store import Session, SQLiteStore

ALL = sorted(WIRES)
EMOJI = "\U0001f600"  # 😀, "\ud83d\ude00" in UTF-16
HIGH, LOW = "\ud83d", "\ude00"


async def chunks_of(wire: Wire, url: str, streamed: bool = True) -> list[StreamChunk]:
    provider = WIRES[wire.name].provider(url)
    try:
        return [c async for c in provider.stream(
            ModelRequest((Message.user("hi"),), stream=streamed))]
    finally:
        await provider.aclose()


def message(chunks: list[StreamChunk]) -> Message:
    last = chunks[-1]
    assert isinstance(last, Completed)
    return last.response.message


def encodable(chunks: list[StreamChunk]) -> None:
    for c in chunks:
        if isinstance(c, TextChunk | ReasoningChunk):
            c.text.encode("utf-8")
        elif isinstance(c, ToolCallChunk):
            c.arguments_delta.encode("utf-8")


# json.dumps writes a lone surrogate as its \uXXXX escape, as a JavaScript server would.
@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize(("deltas", "expected"), [
    ([f"a{HIGH}", f"{LOW}b"], f"a{EMOJI}b"),
    ([HIGH, LOW], EMOJI),
    ([f"a{HIGH}", "", f"{LOW}b"], f"a{EMOJI}b"),
    ([f"a{HIGH}", "b"], "a\ufffdb"),
    (["ab", f"c{HIGH}"], "abc\ufffd"),
    ([f"{LOW}a", "b"], "\ufffdab"),
    ([f"x{LOW}{HIGH}y"], "x\ufffd\ufffdy"),
    ([f"{HIGH}{LOW}", "z"], f"{EMOJI}z"),
])
async def test_surrogates_split_across_events_are_joined_and_lone_ones_replaced(
        raw: RawServer, wire: str, deltas: list[str], expected: str) -> None:
    raw.queue(chunked(WIRES[wire].sse(deltas), content_type=WIRES[wire].stream_type))
    chunks = await chunks_of(WIRES[wire], raw.url)
    encodable(chunks)
    assert texts(chunks) == expected  # what streamed out, as it will be shown
    assert message(chunks).text == expected  # what the conversation keeps


@pytest.mark.parametrize("wire", ALL)
async def test_a_lone_surrogate_in_a_whole_answer_becomes_a_replacement_character(
        raw: RawServer, wire: str) -> None:
    raw.queue(whole(json.dumps(WIRES[wire].body(f"x{HIGH}y{LOW}{HIGH}{LOW}")).encode()))
    chunks = await chunks_of(WIRES[wire], raw.url, streamed=False)
    assert message(chunks).text == f"x\ufffdy\ufffd{EMOJI}"


@pytest.mark.parametrize("wire", ["openai-chat", "openai-responses", "anthropic"])
async def test_a_tool_calls_arguments_split_mid_pair_are_joined(
        raw: RawServer, wire: str) -> None:
    raw.queue(chunked(WIRES[wire].sse(["ok"], ['{"a": "', HIGH, LOW + '"}']),
                      content_type=WIRES[wire].stream_type))
    chunks = await chunks_of(WIRES[wire], raw.url)
    encodable(chunks)
    deltas = "".join(c.arguments_delta for c in chunks if isinstance(c, ToolCallChunk))
    assert deltas == f'{{"a": "{EMOJI}"}}'
    [call] = message(chunks).tool_calls
    assert call.arguments == deltas and call.parsed_arguments() == {"a": EMOJI}


@pytest.mark.parametrize("wire", ALL)
async def test_lone_surrogates_in_names_ids_and_reasoning_are_replaced(
        raw: RawServer, wire: str) -> None:
    events = WIRES[wire].events(["text"], ['{"a": 1}'])
    # Every string the wire carries gets a lone surrogate.
    data = json.dumps(events).replace('"add"', f'"add{HIGH}"').replace(
        'thinking"', f'thinking{LOW}"').replace('call_1"', f'call_1{HIGH}"')
    raw.queue(chunked(WIRES[wire].frames(json.loads(data), done=WIRES[wire].done),
                      content_type=WIRES[wire].stream_type))
    chunks = await chunks_of(WIRES[wire], raw.url)
    encodable(chunks)
    reply = message(chunks)
    json.dumps([repr(p) for p in reply.parts], ensure_ascii=False).encode("utf-8")
    call = next(p for p in reply.parts if isinstance(p, ToolCall))
    assert call.name == "add\ufffd"
    for c in chunks:
        if isinstance(c, ToolCallChunk):
            for value in (c.id, c.name):
                if value is not None:
                    value.encode("utf-8")


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
def test_what_a_provider_said_with_lone_surrogates_is_sent_back_and_stored(
        raw: RawServer, tmp_path: Path, wire: str, streamed: bool) -> None:
    said = f"a{HIGH}b{LOW}"
    if streamed:
        raw.queue(chunked(WIRES[wire].sse([f"a{HIGH}", f"b{LOW}"]),
                          content_type=WIRES[wire].stream_type))
    else:
        raw.queue(whole(json.dumps(WIRES[wire].body(said)).encode()))
    raw.queue(whole(json.dumps(WIRES[wire].body("fine")).encode()))
    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session.create(store)
    agent = Agent(WIRES[wire].provider(raw.url))
    if streamed:
        async def streamed_run() -> None:
            async for _ in agent.stream("first", session=session):
                pass

        asyncio.run(streamed_run())
    else:
        agent.run_sync("first", session=session)
    agent.run_sync("second", session=session)
    # The second request carried the first answer back, as valid UTF-8 JSON.
    sent = raw.requests[1].body.decode("utf-8")
    assert "a\ufffdb\ufffd" in sent
    reloaded = Session.load(session.id, SQLiteStore(tmp_path / "sessions.db"))
    assert [m.text for m in reloaded.messages] == ["first", "a\ufffdb\ufffd", "second", "fine"]


@pytest.mark.parametrize("wire", ALL)
def test_an_error_message_quoting_a_lone_surrogate_is_repaired_and_stored(
        raw: RawServer, tmp_path: Path, wire: str) -> None:
    raw.queue(whole(json.dumps({"error": {"message": f"bad {HIGH} input",
                                          "type": "invalid_request_error"}}).encode(),
                    status=400))
    session = Session.create(SQLiteStore(tmp_path / "sessions.db"))
    with pytest.raises(ProviderError) as caught:
        Agent(WIRES[wire].provider(raw.url)).run_sync("first", session=session)
    assert isinstance(caught.value, BadRequestError)
    assert "bad \ufffd input" in str(caught.value)
    str(caught.value).encode("utf-8")
    reloaded = Session.load(session.id, SQLiteStore(tmp_path / "sessions.db"))
    assert reloaded.outcomes and "\ufffd" in json.dumps(reloaded.outcomes, ensure_ascii=False)


def test_a_prompt_with_a_lone_surrogate_is_sent_and_stored_with_a_replacement(
        raw: RawServer, tmp_path: Path) -> None:
    # What Python makes of a command-line argument that was not UTF-8 (surrogateescape).
    wire = WIRES["openai-chat"]
    raw.queue(whole(json.dumps(wire.body("ok")).encode()))
    session = Session.create(SQLiteStore(tmp_path / "sessions.db"))
    Agent(wire.provider(raw.url)).run_sync("caf\udce9", session=session)
    assert raw.requests[0].json()["messages"][-1]["content"] == "caf\ufffd"
    reloaded = Session.load(session.id, SQLiteStore(tmp_path / "sessions.db"))
    assert reloaded.messages[0].text == "caf\ufffd"
