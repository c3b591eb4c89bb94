"""A model's answer read until the run's interrupt is set, then abandoned at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tether.providers.base import StreamChunk


async def until_interrupted(
    interrupt: asyncio.Event | None, chunks: AsyncIterator[StreamChunk]
) -> AsyncIterator[StreamChunk]:
    """A model's chunks until ``interrupt`` is set; then the response is abandoned at once
    (the provider closes its connection) instead of running to its end.

    The provider's stream is read in a task of its own, so its HTTP client's cancel scopes
    stay in one task, and cancelling that task is how the response is abandoned.
    """
    if interrupt is None:
        async for chunk in chunks:
            yield chunk
        return
    queue: asyncio.Queue[StreamChunk | BaseException | None] = asyncio.Queue()

    async def read() -> None:
        try:
            async for chunk in chunks:
                queue.put_nowait(chunk)
            queue.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # handed over whole: the loop decides what it means
            queue.put_nowait(e)

    async def watch() -> None:
        await interrupt.wait()
        queue.put_nowait(None)  # ends the iteration; the loop sees the interrupt is set

    tasks = (asyncio.create_task(read()), asyncio.create_task(watch()))
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
