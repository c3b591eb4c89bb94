"""tether.interrupts.until_interrupted: a model's stream read in a given context (a traced
run's chat span current), with or without an interrupt to watch."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from tether.run.interrupts import until_interrupted

WHERE: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="reader")


def in_span() -> contextvars.Context:
    context = contextvars.copy_context()
    context.run(WHERE.set, "span")
    return context


@pytest.mark.parametrize("interruptible", [False, True], ids=["plain", "with-interrupt"])
async def test_every_step_of_the_stream_runs_in_the_context_and_the_reader_stays_in_its_own(
        interruptible: bool) -> None:
    seen: list[str] = []

    async def chunks() -> AsyncIterator[int]:
        for n in range(3):
            seen.append(WHERE.get())
            await asyncio.sleep(0)  # a real await between chunks: the next step is another
            seen.append(WHERE.get())
            yield n

    interrupt = asyncio.Event() if interruptible else None
    got = []
    async for n in until_interrupted(interrupt, chunks(), in_span()):
        assert WHERE.get() == "reader"
        got.append(n)
    assert got == [0, 1, 2]
    assert seen == ["span"] * 6


@pytest.mark.parametrize("interruptible", [False, True], ids=["plain", "with-interrupt"])
async def test_a_reader_that_stops_early_closes_the_stream_in_its_context(
        interruptible: bool) -> None:
    closed: list[str] = []

    async def chunks() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            closed.append(WHERE.get())

    interrupt = asyncio.Event() if interruptible else None
    reader = until_interrupted(interrupt, chunks(), in_span())
    assert await anext(reader) == 1
    assert isinstance(reader, AsyncGenerator)
    await reader.aclose()
    assert closed == ["span"]


@pytest.mark.parametrize("interruptible", [False, True], ids=["plain", "with-interrupt"])
async def test_cancelling_the_reader_cancels_the_stream_which_cleans_up_in_its_context(
        interruptible: bool) -> None:
    waiting = asyncio.Event()
    cleaned: list[str] = []

    async def chunks() -> AsyncIterator[int]:
        try:
            waiting.set()
            await asyncio.Event().wait()  # a response that never comes
            yield 1
        except asyncio.CancelledError:
            cleaned.append(WHERE.get())
            raise

    async def read() -> None:
        interrupt = asyncio.Event() if interruptible else None
        async for _ in until_interrupted(interrupt, chunks(), in_span()):
            pass

    task = asyncio.create_task(read())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["span"]


async def test_what_the_stream_raises_reaches_the_reader() -> None:
    async def chunks() -> AsyncIterator[int]:
        yield 1
        raise ValueError("a broken stream")

    with pytest.raises(ValueError, match="a broken stream"):
        async for _ in until_interrupted(None, chunks(), in_span()):
            pass
