"""Blocking work (a sync tool) in a daemon thread.

Not ``asyncio.to_thread``: the default executor's threads are joined when ``asyncio.run``
ends and at interpreter exit, so a sync tool that never returns would hold ``run_sync``
and the CLI long after ``tool_timeout_secs`` gave up on it. A daemon thread is abandoned
instead: the wait ends, and the process may exit while the thread still runs.

The daemon threads are reused: starting a thread per call cost more CPU than the rest of a
model round trip. A thread that finished its work waits a while for the next; a call that
finds none idle starts a new one, so a tool that never returns only keeps its own thread.

Not for ``sys.stdin``: a daemon thread still blocked reading it (or writing ``sys.stdout``)
when the interpreter exits holds the stream's lock, and finalizing the stream aborts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# How long an idle worker waits for more work before it ends.
IDLE_SECS = 30.0

# A job does its work and returns how to hand over the outcome: a worker counts itself idle
# before it hands it over, so the caller's next call finds it idle.
_Job = Callable[[], Callable[[], None]]
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_lock = threading.Lock()
_idle = 0  # workers waiting for a job, less the jobs queued for them (under _lock)


def _submit(job: _Job) -> None:
    """Run ``job`` on an idle daemon worker, or on a new one when none is idle."""
    global _idle
    with _lock:
        if _idle > 0:
            _idle -= 1
            _jobs.put(job)
            return
    threading.Thread(target=_work, args=(job,), name="tether worker", daemon=True).start()


def _work(job: _Job) -> None:
    global _idle
    while True:
        hand_over = job()
        with _lock:
            _idle += 1
        hand_over()
        while True:
            try:
                job = _jobs.get(timeout=IDLE_SECS)
                break
            except queue.Empty:
                with _lock:
                    # A job queued under the lock is someone's to take: wait on for it.
                    if _jobs.empty():
                        _idle -= 1
                        return


async def in_daemon_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a daemon thread, awaited; cancelling the wait
    abandons the thread (Python cannot stop it). What it raises is raised here; what a
    future cannot carry (``StopIteration``, ``SystemExit``...) arrives as ``RuntimeError``
    naming it."""
    return await start_in_daemon_thread(fn, *args, **kwargs)


def start_in_daemon_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any
                           ) -> asyncio.Future[T]:
    """``in_daemon_thread`` as the future it awaits: started now, in a copy of the current
    context; cancelling the future abandons the thread. No task wraps it, so waiting on it
    costs no more than waiting on any future."""
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

    def work() -> Callable[[], None]:
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

        def hand_over() -> None:
            # The loop is closed when its run ended long ago: the outcome has nowhere to go.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, value, error)

        return hand_over

    _submit(work)
    return future
