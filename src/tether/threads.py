"""Blocking work (a sync tool) in a daemon thread of its own.

Not ``asyncio.to_thread``: the default executor's threads are joined when ``asyncio.run``
ends and at interpreter exit, so a sync tool that never returns would hold ``run_sync``
and the CLI long after ``tool_timeout_secs`` gave up on it. A daemon thread is abandoned
instead: the wait ends, and the process may exit while the thread still runs.

Not for ``sys.stdin``: a daemon thread still blocked reading it (or writing ``sys.stdout``)
when the interpreter exits holds the stream's lock, and finalizing the stream aborts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def in_daemon_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a new daemon thread, awaited; cancelling the wait
    abandons the thread (Python cannot stop it). What it raises is raised here; what a
    future cannot carry (``StopIteration``, ``SystemExit``...) arrives as ``RuntimeError``
    naming it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # nobody waits any more (a timeout, a cancelled run)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(fn, *args, **kwargs)
        except (StopIteration, StopAsyncIteration) as e:  # a future refuses these two
            error = RuntimeError(f"{type(e).__name__}: {e}")
        except Exception as e:  # handed over whole, to be raised by the awaiting task
            error = e
        except BaseException as e:  # SystemExit in a tool ends the tool, not the process
            error = RuntimeError(f"{type(e).__name__}: {e}")
        # The loop is closed when its run ended long ago: the outcome has nowhere to go.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, error)

    name = getattr(fn, "__name__", "work")
    threading.Thread(target=work, name=f"tether {name}", daemon=True).start()
    return await future
