"""tether.tools.threads: sync work in reused daemon threads, never held by one that hangs."""

from __future__ import annotations

import asyncio
import threading

from tether.tools.threads import in_daemon_thread


def _thread_name_and_daemon() -> tuple[int, bool]:
    current = threading.current_thread()
    return current.ident or 0, current.daemon


async def test_work_runs_in_daemon_threads_that_are_reused_for_the_next_calls() -> None:
    first = await in_daemon_thread(_thread_name_and_daemon)
    assert first[1] and first[0] != threading.get_ident()
    existing = {t.ident for t in threading.enumerate()}
    later = [await in_daemon_thread(_thread_name_and_daemon) for _ in range(20)]
    # One call at a time: an idle worker takes each, no new thread is started.
    assert all(daemon and ident in existing for ident, daemon in later)


async def test_a_call_that_never_returns_keeps_only_its_own_thread() -> None:
    release = threading.Event()
    started = threading.Event()

    def hang() -> str:
        started.set()
        release.wait()
        return "late"

    hung = asyncio.ensure_future(in_daemon_thread(hang))
    await asyncio.to_thread(started.wait)
    try:
        # Other calls still run, side by side, while the first one hangs.
        results = await asyncio.gather(*(in_daemon_thread(lambda n=n: n * 2) for n in range(5)))
        assert results == [0, 2, 4, 6, 8]
    finally:
        release.set()
    assert await hung == "late"


async def test_what_the_work_raises_is_raised_to_the_caller() -> None:
    def fail() -> None:
        raise ValueError("broken")

    try:
        await in_daemon_thread(fail)
    except ValueError as e:
        assert str(e) == "broken"
    else:
        raise AssertionError("no error")
    # The worker that raised is still there for the next call.
    assert await in_daemon_thread(lambda: 42) == 42


def test_a_process_exits_cleanly_with_idle_and_hung_workers_left() -> None:
    # Workers wait for more work (idle, in a queue) or never return (hung): daemon threads,
    # which an exiting interpreter leaves behind without joining them or crashing.
    import subprocess
    import sys

    program = """
import asyncio, threading
from tether.tools.threads import in_daemon_thread

hang = threading.Event()

async def main():
    await asyncio.gather(*(in_daemon_thread(sum, [n, 1]) for n in range(8)))
    try:
        await asyncio.wait_for(in_daemon_thread(hang.wait), 0.01)
    except TimeoutError:
        pass
    print("done", flush=True)

asyncio.run(main())
"""
    for _ in range(5):  # a crash at interpreter exit need not happen every time
        done = subprocess.run([sys.executable, "-c", program], capture_output=True,
                              text=True, timeout=60, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (0, "done\n", "")
