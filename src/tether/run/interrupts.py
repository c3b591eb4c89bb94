"""A model's answer read until the run's interrupt is set, then abandoned at once; and a
stream a reader leaves early closed then and there (``abandon``)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar

_Chunk = TypeVar("_Chunk")
_T = TypeVar("_T")


async def abandon(chunks: AsyncIterator[Any]) -> None:
    """Close ``chunks`` now, if it can be closed (an async generator). Called where the
    loop, the fitter or a provider leaves an ``async for`` early (an exception, or its own
    reader closing it at a ``yield``)::

        try:
            async for chunk in chunks:
                yield chunk
        except BaseException:
            await abandon(chunks)
            raise

    An async generator left in the middle of an ``async for`` is otherwise closed only when
    a finalizer finds it, later: a provider's stream would keep its connection open (and
    the server writing) until then, a tool running in a turn would go on. A stream that
    ran to its end needs nothing, so the path every run takes costs nothing."""
    close = getattr(chunks, "aclose", None)
    if close is not None:
        await close()


def until_interrupted(
    interrupt: asyncio.Event | None, chunks: AsyncIterator[_Chunk],
    context: contextvars.Context | None = None,
) -> AsyncIterator[_Chunk]:
    """A model's chunks until ``interrupt`` is set; then the response is abandoned at once
    (the provider closes its connection) instead of running to its end.

    With an interrupt to watch, the provider's stream is read in a task of its own, so its
    HTTP client's cancel scopes stay in one task, and cancelling that task is how the
    response is abandoned. Without one it is read in the caller's task. Either way it runs
    in ``context`` when one is given (a traced run's: its model call's span is current
    there, so the provider's HTTP request is traced under it, tether.telemetry), and the
    caller's own context is left as it is. With neither, ``chunks`` is read as it is (a
    layer that only passes chunks on costs each of them a step).
    """
    if interrupt is None and context is None:
        return chunks
    return _until_interrupted(interrupt, chunks, context)


async def _until_interrupted(
    interrupt: asyncio.Event | None, chunks: AsyncIterator[_Chunk],
    context: contextvars.Context | None,
) -> AsyncIterator[_Chunk]:
    if interrupt is None:
        assert context is not None
        # Nothing to watch: read in this task, each step of the stream in ``context`` (a
        # task of its own and its queue would cost a loop iteration per chunk).
        iterator = aiter(chunks)
        try:
            while True:
                try:
                    chunk = await _InContext(anext(iterator), context)
                except StopAsyncIteration:
                    return
                yield chunk
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                await _InContext(close(), context)
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


class _InContext(Generic[_T]):
    """``awaitable`` awaited in the awaiting task, each of its steps run in ``context``: as
    a task created in ``context`` runs its coroutine (``Context.run`` around each step),
    without the task. What the awaiting task is sent or thrown (a cancellation) goes on to
    the awaitable, in ``context`` too."""

    __slots__ = ("_awaitable", "_context")

    def __init__(self, awaitable: Awaitable[_T], context: contextvars.Context) -> None:
        self._awaitable = awaitable
        self._context = context

    def __await__(self) -> Generator[Any, Any, _T]:
        steps = self._awaitable.__await__()
        run = self._context.run
        step: Callable[[Any], Any] = steps.send
        value: Any = None
        while True:
            try:
                yielded = run(step, value)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                value = yield yielded
                step = steps.send
            except GeneratorExit:
                run(steps.close)
                raise
            except BaseException as error:  # handed on, as a task hands it on
                value, step = error, steps.throw
