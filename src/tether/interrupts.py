"""A model's answer read until the run's interrupt is set, then abandoned at once."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator
from typing import TypeVar

_Chunk = TypeVar("_Chunk")


async def until_interrupted(
    interrupt: asyncio.Event | None, chunks: AsyncIterator[_Chunk],
    context: contextvars.Context | None = None,
) -> AsyncIterator[_Chunk]:
    """A model's chunks until ``interrupt`` is set; then the response is abandoned at once
    (the provider closes its connection) instead of running to its end.

    The provider's stream is read in a task of its own, so its HTTP client's cancel scopes
    stay in one task, and cancelling that task is how the response is abandoned. The task
    runs in ``context`` when one is given (a traced run's: its model call's span is current
    there, so the provider's HTTP request is traced under it, tether.telemetry).
    """
    if interrupt is None and context is None:
        async for chunk in chunks:
            yield chunk
        return
    queue: asyncio.Queue[_Chunk | BaseException | None] = asyncio.Queue()

    async def read() -> None:
        try:
            async for chunk in chunks:
                queue.put_nowait(chunk)
            queue.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # handed over whole: the loop decides what it means
            queue.put_nowait(e)

    async def watch(interrupt: asyncio.Event) -> None:
        await interrupt.wait()
        queue.put_nowait(None)  # ends the iteration; the loop sees the interrupt is set

    tasks = [asyncio.create_task(read(), context=context)]
    if interrupt is not None:
        tasks.append(asyncio.create_task(watch(interrupt)))
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
