"""Fuzzing each adapter's stream decoding and whole-body parsing, against a loopback server.

The property, whatever the bytes: the adapter ends in a ``ProviderError`` naming it, or in
a ``Completed`` answer whose every string encodes as UTF-8 and which the next request and
the session store can carry. Nothing else escapes. And text survives any split: a stream's
text cut at any UTF-16 code unit into deltas, or its bytes cut anywhere into reads, comes
out whole.

Bounded: ``TETHER_FUZZ_EXAMPLES`` examples per test (default 40), no deadline (the machine
may be busy; time is measured in benchmarks/, not asserted here), no example database.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faults.rawserver import RawServer, chunked, whole
from tests.providers.helpers import texts
from tests.providers.wires import WIRES, Wire
from tether.errors import ProviderError
from tether.messages import Message, message_to_dict
from tether.providers.base import (
    Completed,
    ModelRequest,
    ReasoningChunk,
    Retrying,
    StreamChunk,
    TextChunk,
    ToolCallChunk,
)

EXAMPLES = int(os.environ.get("TETHER_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
ALL = sorted(WIRES)


@pytest.fixture(scope="module")
def raw() -> Iterator[RawServer]:
    # One server for the module (conftest's is per test): hypothesis runs many examples
    # inside one test, and a function-scoped fixture would not be reset between them.
    with RawServer() as srv:
        yield srv


# --- what counts as an outcome ----------------------------------------------------------------

def attempt(wire: Wire, srv: RawServer, streamed: bool) -> tuple[list[StreamChunk], Any]:
    """The chunks of one request and the ProviderError it ended in (or None). Any other
    exception fails the test."""
    async def go() -> tuple[list[StreamChunk], Any]:
        provider = wire.provider(srv.url)
        chunks: list[StreamChunk] = []
        try:
            async for chunk in provider.stream(ModelRequest((Message.user("hi"),),
                                                            stream=streamed)):
                chunks.append(chunk)
        except ProviderError as error:
            return chunks, error
        finally:
            await provider.aclose()
        return chunks, None

    return asyncio.run(go())


def check(wire: Wire, chunks: list[StreamChunk], error: Any) -> Message | None:
    """The property every outcome must have; the answer's message when there is one."""
    for chunk in chunks:
        if isinstance(chunk, TextChunk | ReasoningChunk):
            assert type(chunk.text) is str
            chunk.text.encode("utf-8")
        elif isinstance(chunk, ToolCallChunk):
            assert type(chunk.index) is int and type(chunk.arguments_delta) is str
            for value in (chunk.id, chunk.name):
                assert value is None or type(value) is str
            f"{chunk.id}{chunk.name}{chunk.arguments_delta}".encode()
        else:
            assert isinstance(chunk, Completed | Retrying)
    if error is not None:
        assert error.provider == wire.name, error
        str(error).encode("utf-8")
        return None
    assert chunks and isinstance(chunks[-1], Completed), chunks
    response = chunks[-1].response
    message = response.message
    # The session store's form, and the next request, encode as they are.
    json.dumps(message_to_dict(message), ensure_ascii=False).encode("utf-8")
    wire.next_body(message)
    usage = response.usage
    assert all(type(n) is int and n >= 0 for n in (
        usage.cache_read_tokens, usage.cache_write_tokens, usage.requests))
    # Token counts: reported ones, or unknown (None) when the answer reported none.
    counts = (usage.input_tokens, usage.output_tokens)
    assert all(type(n) is int and n >= 0 for n in counts) or (
        counts == (None, None) and usage.unreported_requests == usage.requests == 1)
    return message


# --- strategies ---------------------------------------------------------------------------------

# Text with lone surrogates among ordinary characters (what \uXXXX escapes can carry).
hostile_text = st.text(st.one_of(st.characters(), st.characters(min_codepoint=0xD800,
                                                                max_codepoint=0xDFFF)),
                       max_size=12)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                      st.floats(allow_nan=True, allow_infinity=True), hostile_text)
json_value = st.recursive(
    json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                       st.dictionaries(hostile_text, inner, max_size=3)),
    max_leaves=8)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (the root excluded)."""
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    for key, inner in items:
        yield (*prefix, key)
        yield from paths(inner, (*prefix, key))


def mutate(data: st.DataObject, value: Any) -> Any:
    """``value`` after one to three edits: a value replaced, a key or item removed, or an
    item repeated."""
    value = copy.deepcopy(value)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        where = list(paths(value))
        if not where:
            return value
        path = data.draw(st.sampled_from(where), label="path")
        *inner, last = path
        parent = value
        for step in inner:
            parent = parent[step]
        action = data.draw(st.sampled_from(["replace", "remove", "repeat"]), label="action")
        if action == "replace":
            parent[last] = data.draw(json_value, label="value")
        elif action == "remove":
            del parent[last]
        elif isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
    return value


def frames(wire: Wire, events: list[Any]) -> list[bytes]:
    out = []
    for item in events:
        if wire.ndjson:
            out.append(f"{json.dumps(item)}\n".encode())
        elif wire.named and isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
            out.append(f"event: {item[0]}\ndata: {json.dumps(item[1])}\n\n".encode())
        else:
            out.append(f"data: {json.dumps(item)}\n\n".encode())
    return out


def sample_events(wire: Wire) -> list[Any]:
    """A well-formed stream with text, reasoning (where the wire has it) and a tool call."""
    return [list(e) if isinstance(e, tuple) else e
            for e in wire.events(["Hel", "lo 😀"], ['{"a": ', '1}'])]


# --- the fuzz tests ---------------------------------------------------------------------------

@pytest.mark.parametrize("wire", ALL)
@FUZZ
@given(data=st.data())
def test_a_mutated_stream_ends_typed_and_encodable(
        raw: RawServer, wire: str, data: st.DataObject) -> None:
    spec = WIRES[wire]
    events = mutate(data, sample_events(spec))
    raw.queue(chunked(frames(spec, events), content_type=spec.stream_type))
    check(spec, *attempt(spec, raw, streamed=True))


@pytest.mark.parametrize("wire", ALL)
@FUZZ
@given(data=st.data())
def test_a_mutated_whole_answer_ends_typed_and_encodable(
        raw: RawServer, wire: str, data: st.DataObject) -> None:
    spec = WIRES[wire]
    body = mutate(data, spec.body("Hello 😀"))
    raw.queue(whole(json.dumps(body).encode()))
    check(spec, *attempt(spec, raw, streamed=False))


@pytest.mark.parametrize("wire", ALL)
@FUZZ
@given(value=json_value)
def test_any_json_as_a_whole_answer_ends_typed(raw: RawServer, wire: str, value: Any) -> None:
    spec = WIRES[wire]
    raw.queue(whole(json.dumps(value).encode()))
    check(spec, *attempt(spec, raw, streamed=False))


@pytest.mark.parametrize("wire", ALL)
@FUZZ
@given(values=st.lists(json_value, max_size=5))
def test_any_json_events_end_typed(raw: RawServer, wire: str, values: list[Any]) -> None:
    spec = WIRES[wire]
    raw.queue(chunked(frames(spec, values), content_type=spec.stream_type))
    check(spec, *attempt(spec, raw, streamed=True))


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
@FUZZ
@given(data=st.data())
def test_random_bytes_spliced_into_an_answer_end_typed(
        raw: RawServer, wire: str, streamed: bool, data: st.DataObject) -> None:
    spec = WIRES[wire]
    good = (b"".join(spec.sse(["Hello 😀"], ['{"a": 1}'])) if streamed
            else json.dumps(spec.body("Hello 😀")).encode())
    at = data.draw(st.integers(0, len(good)), label="at")
    cut = data.draw(st.integers(0, 8), label="cut")
    noise = data.draw(st.binary(max_size=16), label="noise")
    spliced = good[:at] + noise + good[at + cut:]
    raw.queue(chunked([spliced]) if streamed else whole(spliced))
    check(spec, *attempt(spec, raw, streamed))


def utf16_pieces(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at code-unit positions (a pair may be cut in two)."""
    units = text.encode("utf-16-le")
    at = sorted({2 * (c % (len(units) // 2 + 1)) for c in cuts})
    bounds = [0, *at, len(units)]
    return [units[a:b].decode("utf-16-le", "surrogatepass") for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("wire", ALL)
@FUZZ
@given(text=st.text(min_size=1, max_size=30), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_text_cut_at_any_code_unit_into_deltas_comes_out_whole(
        raw: RawServer, wire: str, text: str, cuts: list[int]) -> None:
    spec = WIRES[wire]
    pieces = [p for p in utf16_pieces(text, cuts) if p]
    # json.dumps escapes each lone half as \uXXXX
    raw.queue(chunked(spec.sse(pieces), content_type=spec.stream_type))
    chunks, error = attempt(spec, raw, streamed=True)
    message = check(spec, chunks, error)
    assert message is not None and message.text == text
    assert texts(chunks) == text


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
@FUZZ
@given(text=st.text(min_size=1, max_size=30), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_an_answer_cut_at_any_byte_into_reads_comes_out_whole(
        raw: RawServer, wire: str, streamed: bool, text: str, cuts: list[int]) -> None:
    spec = WIRES[wire]
    data = (b"".join(spec.sse([text])) if streamed
            else json.dumps(spec.body(text), ensure_ascii=False).encode())
    at = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *at, len(data)]
    reads = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    raw.queue(chunked(reads, content_type=spec.stream_type if streamed
                      else "application/json"))
    chunks, error = attempt(spec, raw, streamed)
    message = check(spec, chunks, error)
    assert message is not None and message.text == text


header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@pytest.mark.parametrize("wire", ALL)
@FUZZ
@given(status=st.integers(400, 599), body=st.one_of(json_value, st.binary(max_size=40)),
       retry_after=st.one_of(st.none(), header_text, st.floats().map(str)))
def test_any_error_answer_is_a_typed_error_with_its_status(
        raw: RawServer, wire: str, status: int, body: Any, retry_after: str | None) -> None:
    spec = WIRES[wire]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {} if retry_after is None else {"retry-after": retry_after.strip()}
    raw.queue(whole(data, status=status, **headers))
    chunks, error = attempt(spec, raw, streamed=False)
    check(spec, chunks, error)
    assert error is not None and error.status == status
