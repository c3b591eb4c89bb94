"""MCP servers leave nothing behind: closing or losing a stdio server ends its whole process
tree, helpers included, and a server that exits while a helper holds its pipes is seen
gone at once. Real servers built with the official SDK (tests/mcp_servers/family.py).

No sleeps: the helpers' state is read from /proc right after the operation under test
returns, because closing returns only once the tree is gone. The asyncio.timeout bounds
are far below each server's call timeout (600 s): a hang would fail them, they never wait.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import statuses
from tests.faults.test_pipes import into_a_closed_pipe
from tests.test_cli import workspace
from tether import Agent
from tether.cli.common import EXIT_PIPE
from tether.mcp import McpServer
from tether.providers import Scripted, call
from tether.sandbox import Sandbox

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

FAMILY = str(Path(__file__).parent.parent / "mcp_servers" / "family.py")
BOUND = 60.0  # far below the 600 s call timeout


# These tests follow the host's processes by the pids a server reports. Landlock confines
# without a PID namespace, so those pids are the host's (under bubblewrap they would be the
# sandbox's own); tests/test_sandbox.py checks that a bubblewrapped server ends whole.
HOST_PIDS = Sandbox(mode="landlock", network=True)


def stdio(*args: Any, **kw: Any) -> McpServer:
    return McpServer.stdio(*args, sandbox=HOST_PIDS, **kw)


def family(*flags: str) -> McpServer:
    return stdio("f", sys.executable, [FAMILY, *flags], timeout_secs=600)


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for init, which may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


@asynccontextmanager
async def started(server: McpServer) -> AsyncIterator[McpServer]:
    notices = await server.start()
    assert server.error is None, notices
    try:
        yield server
    finally:
        await server.aclose()


def ended(pid: int) -> bool:
    """Whether ``pid`` ended, waiting (up to ``BOUND``) on its pidfd for a process already
    killed: a SIGKILL takes effect when the kernel next runs the process, which on a loaded
    machine is a moment after the kill returned."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        select.select([fd], [], [], BOUND)  # readable once it has exited
    finally:
        os.close(fd)
    return not running(pid)


async def pid_of(server: McpServer, tool: str) -> int:
    out = await server.call(tool, {})
    assert not out.is_error, out.content
    return int(out.content)


@pytest.mark.parametrize("tool", ["pipe_holder", "helper", "nested", "stubborn"])
async def test_closing_a_server_ends_the_helpers_it_started(tool: str) -> None:
    server = family()
    async with started(server):
        server_pid = await pid_of(server, "pid")
        helper = await pid_of(server, tool)
        assert running(helper)
    assert ended(server_pid)
    assert ended(helper)


async def test_closing_an_agent_ends_every_servers_helpers() -> None:
    a, b = stdio("a", sys.executable, [FAMILY]), \
        stdio("b", sys.executable, [FAMILY])
    async with Agent(Scripted([]), tools=[a, b]):
        helpers = [await pid_of(a, "pipe_holder"), await pid_of(a, "helper"),
                   await pid_of(b, "pipe_holder"), await pid_of(b, "nested")]
    assert all(ended(pid) for pid in helpers)


async def test_a_server_that_exits_mid_call_while_its_helper_holds_the_pipes_is_seen_gone(
        ) -> None:
    server = family()
    async with started(server):
        helper = await pid_of(server, "pipe_holder")
        async with asyncio.timeout(BOUND):
            out = await server.call("leave", {})
            assert out.is_error and "stopped during the call" in out.content
            again = await server.call("pid", {})
        assert again.is_error and "not running (it exited with code 3)" in again.content
        assert "it exited with code 3" in (server.error or "")
        assert ended(helper)  # losing the server ended its tree


async def test_a_server_killed_between_calls_is_seen_gone_and_later_calls_fail_at_once(
        ) -> None:
    server = family()
    async with started(server):
        server_pid = await pid_of(server, "pid")
        helper = await pid_of(server, "pipe_holder")  # holds the server's stdin and stdout
        os.kill(server_pid, signal.SIGKILL)
        async with asyncio.timeout(BOUND):
            first = await server.call("pid", {})  # sent before or after the exit is seen
            second = await server.call("pid", {})
        assert first.is_error and second.is_error
        assert "not running (it was killed by signal 9)" in second.content
        assert ended(helper)


async def test_a_run_whose_server_exits_mid_call_ends_promptly_with_an_error_result() -> None:
    server = family()
    model = Scripted([call("f__leave"), call("f__pid"), "it left"])
    async with Agent(model, tools=[server]) as agent:
        helper = await pid_of(server, "pipe_holder")
        async with asyncio.timeout(BOUND):
            result = await agent.run("go")
        assert ended(helper)
    assert result.text == "it left" and statuses(result) == ["error", "error"]
    assert "stopped during the call" in result.tool_calls[0].output
    assert "not running (it exited with code 3)" in result.tool_calls[1].output


async def test_a_server_that_exits_while_starting_with_a_helper_holding_its_pipes(
        tmp_path: Path) -> None:
    pidfile = tmp_path / "helper.pid"
    quitter = stdio("q", sys.executable, ["-c", (
        "import subprocess, sys\n"
        f"open({str(pidfile)!r}, 'w').write(str(subprocess.Popen(['sleep', '1000']).pid))\n"
        "sys.exit('no API key')\n")], start_timeout_secs=600)
    async with asyncio.timeout(BOUND):
        [notice] = await quitter.start()
    assert "did not start" in notice.message and "no API key" in notice.message
    assert ended(int(pidfile.read_text()))
    await quitter.aclose()


def test_tether_tools_leaves_no_helper_behind_even_into_a_closed_pipe(tmp_path: Path) -> None:
    helper_file = tmp_path / "helper.pid"
    # The server writes its helper's pid outside its folder (listed in write); Landlock,
    # for the host's pids (see HOST_PIDS).
    ws = workspace(tmp_path, "http://127.0.0.1:9/v1",
                   f'[sandbox]\nmode = "landlock"\n'
                   f'[[mcp]]\nname = "f"\ncommand = {sys.executable!r}\n'
                   f'args = [{FAMILY!r}, "--helper-file", {str(helper_file)!r}]\n'
                   f'write = [{str(tmp_path)!r}]\n')
    env = {**os.environ, "TETHER_CONFIG": os.devnull}
    out = subprocess.run([sys.executable, "-m", "tether.cli", "-w", str(ws), "tools", "--json"],
                         capture_output=True, text=True, env=env, timeout=BOUND)
    assert out.returncode == 0, out.stderr and "f__helper" in out.stdout
    assert ended(int(helper_file.read_text()))
    helper_file.unlink()
    piped = into_a_closed_pipe(ws, "tools", "--json")
    assert piped.returncode == EXIT_PIPE, piped.stderr
    assert ended(int(helper_file.read_text()))


async def test_a_server_that_ignores_its_stdin_closing_and_sigterm_is_killed_on_close(
        tmp_path: Path) -> None:
    fifo = tmp_path / "deaf.pid"
    os.mkfifo(fifo)  # opening it blocks until both ends are open: a rendezvous, no polling
    deaf = stdio("deaf", sys.executable, ["-c", (
        "import os, signal\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(fifo)!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n"
        "    signal.pause()\n")], start_timeout_secs=600)
    notices = asyncio.create_task(deaf.start())
    async with asyncio.timeout(BOUND):
        pid = int(await asyncio.to_thread(fifo.read_text))  # the server is up
        await deaf.aclose()  # stdin closed, 2 s, SIGTERM ignored, 2 s, SIGKILL
        [notice] = await notices
    assert "closed while starting" in notice.message
    assert ended(pid)


async def test_a_call_past_the_servers_timeout_says_it_may_still_take_effect() -> None:
    server = stdio("k", sys.executable, [
        str(Path(__file__).parent.parent / "mcp_servers" / "kitchen.py")],
        timeout_secs=0.3, start_timeout_secs=60)
    async with started(server):
        out = await server.call("hang", {})
    assert out.is_error and "did not answer within 0.3s" in out.content
    assert "may still take effect" in out.content


async def test_a_server_that_closes_its_output_but_keeps_running_is_lost_and_ended() -> None:
    mute = stdio("m", sys.executable, [FAMILY, "--no-pipe-holder"], timeout_secs=600)
    async with started(mute):
        server_pid = await pid_of(mute, "pid")
        async with asyncio.timeout(BOUND):
            out = await mute.call("mute", {})
            assert out.is_error and "stopped during the call" in out.content
            # Bounded by BOUND: the exit tether waits for (an exiting process closes its
            # output too) does not come, so the 2 s grace runs out and the group is ended.
            while running(server_pid):
                await asyncio.sleep(0.05)
        assert "closed its output while running" in (mute.error or "")
        later = await mute.call("pid", {})
        assert later.is_error and "closed its output while running" in later.content
