"""Answers too large to read, and stream lines split only where the SSE spec splits them.

A provider's answer (a whole body, or all of a stream) is read up to
``tether.providers.http.bodies.MAX_RESPONSE_BYTES``, counted as decoded: a server that sends more,
without end, or a small gzip that inflates past it, gets a typed ``MalformedResponseError``,
not the process's memory. Most tests lower the limit so they stay small; the gzip bomb
meets the real one.
"""

from __future__ import annotations

import gzip

import pytest

from tests.faults.rawserver import RawServer, Script, chunked, encoded, head, whole
from tests.faults.test_provider_bytes import ALL, TEXT, body, fails, run, stream_bytes
from tests.providers.helpers import final
from tests.providers.wires import WIRES
from tether.errors import MalformedResponseError
from tether.providers.base import Provider
from tether.providers.http import bodies

LIMIT = 64 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(bodies, "MAX_RESPONSE_BYTES", LIMIT)
    return LIMIT


async def refused(provider: Provider, streamed: bool, words: str) -> MalformedResponseError:
    """The malformed-answer error ``provider``'s attempt ends in, which says ``words``."""
    error, _ = await fails(provider, streamed)
    assert isinstance(error, MalformedResponseError), error
    assert words in str(error), error
    return error


# --- too large ----------------------------------------------------------------------------


@pytest.mark.parametrize("wire", ALL)
async def test_a_whole_answer_that_declares_a_length_past_the_limit_is_refused_unread(
        raw: RawServer, wire: str, small_limit: int) -> None:
    # The headers promise more than the limit; the body never comes (nothing waits for it).
    raw.queue(Script([head(200, {"content-type": "application/json",
                                 "content-length": str(small_limit + 1)})]))
    error = await refused(WIRES[wire].provider(raw.url), False,
                          f"larger than {small_limit} bytes")
    assert error.provider == wire


@pytest.mark.parametrize("wire", ALL)
async def test_a_whole_answer_past_the_limit_without_a_length_is_refused(
        raw: RawServer, wire: str, small_limit: int) -> None:
    piece = b" " * 8192  # JSON whitespace: every byte could belong to a real answer
    raw.queue(chunked([piece] * (small_limit // len(piece) + 2) + [body(WIRES[wire])],
                      content_type="application/json"))
    await refused(WIRES[wire].provider(raw.url), False, f"larger than {small_limit} bytes")


@pytest.mark.parametrize("wire", ALL)
async def test_an_endless_stream_line_is_refused_at_the_limit(
        raw: RawServer, wire: str, small_limit: int) -> None:
    # One line that never ends: the reader must not hold it all, waiting for its end.
    raw.queue(chunked([b"data: {\"x\": \""] + [b"a" * 8192] * (small_limit // 8192 + 2),
                      end=False))
    await refused(WIRES[wire].provider(raw.url), True, f"larger than {small_limit} bytes")


@pytest.mark.parametrize("wire", ALL)
async def test_a_stream_of_small_events_past_the_limit_in_all_is_refused(
        raw: RawServer, wire: str, small_limit: int) -> None:
    comments = b": keep-alive, and more of it\n" * 64  # each line well under the limit
    raw.queue(chunked([comments] * (small_limit // len(comments) + 2)
                      + [stream_bytes(WIRES[wire])]))
    await refused(WIRES[wire].provider(raw.url), True, f"stream is larger than {small_limit} bytes")


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
async def test_an_error_answer_past_the_limit_is_still_a_typed_error(
        raw: RawServer, wire: str, streamed: bool, small_limit: int) -> None:
    raw.queue(chunked([b" " * 8192] * (small_limit // 8192 + 2), status=500,
                      content_type="application/json"))
    error, _ = await fails(WIRES[wire].provider(raw.url), streamed)
    assert isinstance(error, MalformedResponseError), error


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_gzip_that_inflates_past_the_real_limit_is_refused(
        raw: RawServer, wire: str, streamed: bool) -> None:
    # ~100 KB on the wire, 96 MiB inflated: the limit counts what the body decodes to.
    bomb = gzip.compress(b" " * (bodies.MAX_RESPONSE_BYTES + 32 * 1024 * 1024), 9)
    assert len(bomb) < 200_000
    if streamed:
        raw.queue(chunked([bomb], **encoded("gzip")))
    else:
        raw.queue(whole(bomb, **encoded("gzip")))
    await refused(WIRES[wire].provider(raw.url), streamed,
                  f"larger than {bodies.MAX_RESPONSE_BYTES} bytes")


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("streamed", [False, True])
async def test_an_answer_just_under_the_limit_is_read(
        raw: RawServer, wire: str, streamed: bool, small_limit: int) -> None:
    data = stream_bytes(WIRES[wire]) if streamed else body(WIRES[wire])
    padding = (WIRES[wire].keepalive if streamed else b" ") * ((small_limit - len(data) - 64)
                                                                // 6)
    raw.queue(chunked([padding, data], content_type=WIRES[wire].stream_type) if streamed
              else chunked([padding + data], content_type="application/json"))
    chunks = await run(WIRES[wire].provider(raw.url), streamed)
    assert final(chunks).response.message.text.startswith("héllo")


# --- where a stream line ends ------------------------------------------------------------------

SEPARATORS = "a\u2028b\u2029c\x85d"  # JSON carries these raw inside a string


@pytest.mark.parametrize("wire", ALL)
async def test_unicode_line_separators_inside_a_json_string_do_not_end_a_stream_line(
        raw: RawServer, wire: str) -> None:
    data = b"".join(WIRES[wire].sse([SEPARATORS]))
    for char in "\u2028\u2029\x85":  # written raw, as servers do (ensure_ascii off)
        data = data.replace(f"\\u{ord(char):04x}".encode(), char.encode())
    assert "\u2028".encode() in data and b"\\u2028" not in data
    raw.queue(chunked([data], content_type=WIRES[wire].stream_type))
    chunks = await run(WIRES[wire].provider(raw.url), streamed=True)
    assert final(chunks).response.message.text == SEPARATORS


@pytest.mark.parametrize("wire", ALL)
@pytest.mark.parametrize("ending", [b"\r", b"\r\n"])
async def test_cr_and_crlf_line_endings_are_read_even_split_across_reads(
        raw: RawServer, wire: str, ending: bytes) -> None:
    data = stream_bytes(WIRES[wire]).replace(b"\n", ending)
    # Cut right after every CR, so a CRLF's two halves arrive in different reads.
    pieces = [p + b"\r" for p in data.split(b"\r")[:-1]] + [data.split(b"\r")[-1]]
    raw.queue(chunked([p for p in pieces if p], content_type=WIRES[wire].stream_type))
    chunks = await run(WIRES[wire].provider(raw.url), streamed=True)
    assert final(chunks).response.message.text == TEXT


async def test_an_endless_stream_line_is_refused_at_the_real_limit(raw: RawServer) -> None:
    # The real limit's worth of one line, in 64 KiB reads: its pieces are kept and joined
    # once (adding each read to the line read so far would copy it 1,000 times over).
    piece = b"a" * 65536
    raw.queue(chunked([b"data: {\"x\": \""] + [piece] * (bodies.MAX_RESPONSE_BYTES // 65536 + 1),
                      end=False))
    await refused(WIRES["openai-chat"].provider(raw.url), True,
                  f"stream is larger than {bodies.MAX_RESPONSE_BYTES} bytes")
