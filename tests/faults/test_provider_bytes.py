"""Servers that misbehave at the byte level, on every adapter, streamed and not.

Each fault ends in a typed error from ``tether.errors`` (retried where the retry rules say
so) or, where the bytes still say something, in the answer they say: a character split
across reads is joined, bytes that are not UTF-8 become U+FFFD.
"""

from __future__ import annotations

import json
import zlib

import pytest

from tests.faults.rawserver import (
    Close,
    RawServer,
    Reset,
    Script,
    chunk,
    chunked,
    encoded,
    gzipped,
    head,
    whole,
)
from tests.providers.helpers import final
from tests.providers.wires import WIRES, Wire
from tether.errors import (
    MalformedResponseError,
    ProviderConnectionError,
    ProviderError,
)
from tether.messages import Message
from tether.providers.base import (
    ModelRequest,
    Provider,
    Retrying,
    StreamChunk,
    TextChunk,
)
from tether.providers.http.retry import RetryPolicy

ALL = sorted(WIRES)
TEXT = "héllo 😀 日本語 e\u0301 ok"


def ask(streamed: bool) -> ModelRequest:
    return ModelRequest((Message.user("hi"),), stream=streamed)


async def run(provider: Provider, streamed: bool) -> list[StreamChunk]:
    try:
        return [c async for c in provider.stream(ask(streamed))]
    finally:
        await provider.aclose()


async def fails(provider: Provider, streamed: bool) -> tuple[ProviderError, list[StreamChunk]]:
    """The typed error the attempt ends in, and the chunks that came before it."""
    seen: list[StreamChunk] = []
    try:
        async for c in provider.stream(ask(streamed)):
            seen.append(c)
    except ProviderError as error:
        return error, seen
    finally:
        await provider.aclose()
    raise AssertionError(f"no error; the stream gave {seen}")


def body(wire: Wire, text: str = TEXT) -> bytes:
    return json.dumps(wire.body(text), ensure_ascii=False).encode()


def stream_bytes(wire: Wire, text: str = TEXT) -> bytes:
    return b"".join(wire.sse([text]))


def through_first(frames: list[bytes]) -> list[bytes]:
    """The frames up to and including the one carrying the text ``first ``."""
    return frames[: next(i for i, f in enumerate(frames) if b"first " in f) + 1]


def retrying(policy: int = 2) -> RetryPolicy:
    return RetryPolicy(max_retries=policy, base_delay=0, max_delay=0)


# --- content-encoding -------------------------------------------------------------------------

@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_that_does_not_decode_as_its_encoding_is_malformed_and_retryable(
        raw: RawServer, wire: str, encoding: str) -> None:
    raw.queue(whole(b"\x1f\x8b\x08 this is not what it says", **encoded(encoding)))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed=False)
    assert isinstance(error, MalformedResponseError) and error.retryable
    assert error.provider == wire and "content-encoding" in str(error)


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_broken_encoding_before_any_content_is_retried_to_the_good_answer(
        raw: RawServer, wire: str, streamed: bool) -> None:
    bad = whole(b"garbage, not gzip", content_type=WIRES[wire].stream_type if streamed
                else "application/json", **encoded("gzip"))
    good = (chunked([gzipped(stream_bytes(WIRES[wire]))], content_type=WIRES[wire].stream_type,
                    **encoded("gzip"))
            if streamed else whole(gzipped(body(WIRES[wire])), **encoded("gzip")))
    raw.queue(bad, good)
    chunks = await run(WIRES[wire].provider(raw.url, retry=retrying()), streamed)
    assert final(chunks).response.message.text == TEXT
    assert [type(c) for c in chunks if isinstance(c, Retrying)] == [Retrying]
    assert len(raw.requests) == 2


@pytest.mark.parametrize("wire", ALL)
async def test_a_stream_whose_gzip_breaks_after_content_is_malformed_and_not_retried(
        raw: RawServer, wire: str) -> None:
    frames = WIRES[wire].sse(["first ", "second"])
    compressor = zlib.compressobj(wbits=31)  # gzip framing
    # Everything up to the first text delta, flushed so the client can decode it, then junk.
    good = (compressor.compress(b"".join(through_first(frames)))
            + compressor.flush(zlib.Z_SYNC_FLUSH))
    raw.queue(chunked([good, b"\x00\xffthe rest is not deflate at all" * 4],
                      content_type=WIRES[wire].stream_type, **encoded("gzip")))
    error, seen = await fails(WIRES[wire].provider(raw.url, retry=retrying()), streamed=True)
    assert isinstance(error, MalformedResponseError), error
    assert "content-encoding" in str(error)
    assert TextChunk("first ") in seen
    assert len(raw.requests) == 1  # content had come out: a retry would repeat it


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("encoding", ["br", "zstd", "x-unheard-of"])
async def test_an_encoding_httpx_cannot_read_is_a_malformed_answer(
        raw: RawServer, wire: str, streamed: bool, encoding: str) -> None:
    # Without brotli/zstandard installed httpx passes the bytes through, which are not JSON
    # (with them, the bytes do not decode): a malformed answer either way.
    raw.queue(whole(b"\x8b\x02\x80garbled", content_type=WIRES[wire].stream_type if streamed
                    else "application/json", **encoded(encoding)))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed)
    assert isinstance(error, MalformedResponseError), error


# --- text at the byte level -----------------------------------------------------------------

@pytest.mark.parametrize("wire", ALL)
async def test_characters_split_byte_by_byte_across_reads_are_joined(
        raw: RawServer, wire: str) -> None:
    data = stream_bytes(WIRES[wire])
    # Every byte its own HTTP chunk: every multi-byte character arrives in pieces.
    raw.queue(chunked([data[i:i + 1] for i in range(len(data))],
                      content_type=WIRES[wire].stream_type))
    chunks = await run(WIRES[wire].provider(raw.url), streamed=True)
    assert final(chunks).response.message.text == TEXT
    assert "".join(c.text for c in chunks if isinstance(c, TextChunk)) == TEXT


@pytest.mark.parametrize("wire", ALL)
async def test_a_non_streamed_body_split_mid_character_is_joined(
        raw: RawServer, wire: str) -> None:
    data = body(WIRES[wire])
    raw.queue(chunked([data[i:i + 1] for i in range(len(data))],
                      content_type="application/json"))
    chunks = await run(WIRES[wire].provider(raw.url), streamed=False)
    assert final(chunks).response.message.text == TEXT


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
async def test_bytes_that_are_not_utf8_become_replacement_characters(
        raw: RawServer, wire: str, streamed: bool) -> None:
    marker = "MARK"
    data = stream_bytes(WIRES[wire], marker) if streamed else body(WIRES[wire], marker)
    # A lone continuation byte, a truncated sequence, an encoded surrogate, an overlong NUL.
    data = data.replace(b"MARK", b"a\x80b\xe6\x97c\xed\xa0\x80d\xc0\x80e")
    raw.queue(chunked([data], content_type=WIRES[wire].stream_type) if streamed
              else whole(data))
    message = final(await run(WIRES[wire].provider(raw.url), streamed)).response.message
    text = message.text
    assert text.startswith("a\ufffdb\ufffd") and text.endswith("e")
    assert set(text) <= set("abcde\ufffd")
    text.encode("utf-8")  # nothing lone, nothing that cannot be written


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("charset", ["hex", "rot13", "utf-16", "idna", "latin-1", "bogus"])
async def test_the_charset_a_server_names_does_not_change_how_json_is_read(
        raw: RawServer, wire: str, charset: str) -> None:
    raw.queue(chunked([stream_bytes(WIRES[wire])],
                      content_type=f"{WIRES[wire].stream_type}; charset={charset}"))
    chunks = await run(WIRES[wire].provider(raw.url), streamed=True)
    assert final(chunks).response.message.text == TEXT


# --- streams cut short --------------------------------------------------------------------------

@pytest.mark.parametrize("wire", ALL)
async def test_a_stream_cut_before_its_terminal_event_after_content_is_malformed(
        raw: RawServer, wire: str) -> None:
    raw.queue(chunked(WIRES[wire].cut(["partial"]), content_type=WIRES[wire].stream_type))
    error, seen = await fails(WIRES[wire].provider(raw.url, retry=retrying()), streamed=True)
    assert isinstance(error, MalformedResponseError) and error.provider == wire
    assert "cut" in str(error) or "ended before" in str(error)
    assert TextChunk("partial") in seen
    assert len(raw.requests) == 1  # the text went out: not retried


@pytest.mark.parametrize("wire", ALL)
async def test_a_stream_that_ends_before_any_event_is_retried(raw: RawServer, wire: str) -> None:
    spec = WIRES[wire]
    raw.queue(chunked([spec.keepalive], content_type=spec.stream_type),
              chunked(spec.sse([TEXT]), content_type=spec.stream_type))
    chunks = await run(WIRES[wire].provider(raw.url, retry=retrying()), streamed=True)
    assert final(chunks).response.message.text == TEXT
    assert len(raw.requests) == 2


@pytest.mark.parametrize("wire", ALL)
async def test_a_stream_cut_short_without_retries_left_is_a_retryable_malformed_answer(
        raw: RawServer, wire: str) -> None:
    raw.queue(chunked([b": keep-alive\n\n"]))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed=True)
    assert isinstance(error, MalformedResponseError) and error.retryable


@pytest.mark.parametrize("wire", ALL)
async def test_a_connection_closed_mid_event_is_a_connection_error(
        raw: RawServer, wire: str) -> None:
    data = stream_bytes(WIRES[wire])
    raw.queue(chunked([data[: len(data) // 2], Close()]))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed=True)
    assert isinstance(error, ProviderConnectionError), error


@pytest.mark.parametrize("wire", ALL)
async def test_a_connection_reset_mid_stream_is_a_connection_error(
        raw: RawServer, wire: str) -> None:
    frames = WIRES[wire].sse(["first ", "second"])
    raw.queue(chunked([*through_first(frames), Reset()]))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed=True)
    assert isinstance(error, ProviderConnectionError), error


# --- broken HTTP --------------------------------------------------------------------------------

BROKEN_HTTP = {
    "garbage status line": Script([b"HTTP/9 banana\r\n\r\n", Close()]),
    "closed before answering": Script([Close()]),
    "reset before answering": Script([Reset()]),
    "a header line without a colon": Script([b"HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", Close()]),
    "a body shorter than its content-length": Script([
        head(200, {"content-type": "application/json", "content-length": "500"}), b'{"a":',
        Close()]),
    "a chunk size that is not hex": Script([
        head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}),
        b"zz\r\ndata: {}\r\n", Close()]),
    "a chunk longer than it said": Script([
        head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}),
        chunk(b": a comment\n\n")[:-2] + b"and more\r\n", Close()]),
}


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("fault", sorted(BROKEN_HTTP))
async def test_broken_http_is_a_typed_provider_error(
        raw: RawServer, wire: str, streamed: bool, fault: str) -> None:
    raw.queue(BROKEN_HTTP[fault])
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed)
    assert isinstance(error, ProviderConnectionError), error
    assert error.provider == wire


# --- nesting ------------------------------------------------------------------------------------

DEEP = {
    "past the parser's limit": b"[" * 100_000 + b"]" * 100_000,
    "past tether's limit": b'{"a":' * 600 + b"1" + b"}" * 600,
    "deep inside an object": b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}",
}


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("shape", sorted(DEEP))
async def test_json_nested_too_deep_is_a_malformed_answer(
        raw: RawServer, wire: str, streamed: bool, shape: str) -> None:
    deep = DEEP[shape]
    raw.queue(chunked([b"data: " + deep + b"\n\n"]) if streamed else whole(deep))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed)
    assert isinstance(error, MalformedResponseError), error
    assert "nested deeper" in str(error)


@pytest.mark.parametrize("wire", ALL)
async def test_an_error_body_nested_too_deep_is_still_a_typed_error(
        raw: RawServer, wire: str) -> None:
    raw.queue(whole(b"[" * 100_000 + b"]" * 100_000, status=400))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed=False)
    assert error.status == 400 and error.provider == wire
