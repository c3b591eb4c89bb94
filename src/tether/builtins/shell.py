"""``shell``: run a command with ``/bin/sh`` in the workspace. Off unless ``[tools] enabled``
names it.

It can read anything the user can, change anything, and reach the network, so it declares
all of that (private + destructive + external_send): every call passes the approval gate,
and the trifecta interlock treats it as a way out. Approval is per call ("allow for this
session" is not offered: one approved command says nothing about the next).

The command runs in its own process group (session); when it exceeds its time, or the call
is cancelled, the whole group is killed, so nothing it started keeps running. Output
(stdout and stderr together) is capped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from tether.tools.function import tool
from tether.tools.tool import Tool, ToolContext, ToolOutput
from tether.trust import Capabilities

SHELL_CAPABILITIES = Capabilities(private_data=True, destructive=True, external_send=True)


def make_shell(*, timeout_secs: float = 120.0, max_output_bytes: int = 30_000) -> Tool:
    """A ``shell`` tool with its own time bound and output cap."""

    async def shell(ctx: ToolContext, command: str) -> ToolOutput:
        """Run a shell command (/bin/sh -c) in the workspace folder and return its output
        (stdout and stderr together) and exit code. Long-running commands are stopped.

        Args:
            command: the command line, e.g. "ls -la" or "python -m pytest -q".
        """
        if os.name != "posix":
            return ToolOutput("Error: the shell tool runs on POSIX systems only.",
                              is_error=True, from_outside=False)
        if not command.strip():
            return ToolOutput("Error: the command is empty.", is_error=True)
        return await _run(command, ctx, timeout_secs, max_output_bytes)

    return tool(name="shell", capabilities=SHELL_CAPABILITIES, cache_approval=False)(shell)


async def _run(command: str, ctx: ToolContext, timeout: float, cap: int) -> ToolOutput:
    proc = await asyncio.create_subprocess_shell(
        command, cwd=ctx.workspace, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # its own process group: killpg reaches all it starts
    )
    output = bytearray()
    dropped = 0

    async def pump() -> None:
        nonlocal dropped
        assert proc.stdout is not None
        # Read to the end even past the cap: a full pipe would block the command.
        while chunk := await proc.stdout.read(65536):
            room = cap - len(output)
            if room > 0:
                output.extend(chunk[:room])
            dropped += max(0, len(chunk) - max(room, 0))
        await proc.wait()

    timed_out = False
    try:
        async with asyncio.timeout(timeout):
            await pump()
    except TimeoutError:
        timed_out = True
    finally:
        # Always, also on cancellation: whatever the command left behind (a background
        # job, a child holding the pipe) is stopped with it.
        _kill_group(proc.pid)
        if proc.returncode is None:
            await proc.wait()
    text = output.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[... output cut: {dropped} more bytes not shown]"
    if timed_out:
        return ToolOutput(f"Error: the command did not finish within {timeout:g}s; it and "
                          f"every process it started were killed. Output so far:\n{text}",
                          is_error=True)
    code = proc.returncode
    return ToolOutput(f"{text}\n[exit code {code}]" if text else f"[exit code {code}]",
                      is_error=code != 0)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pgid, signal.SIGKILL)


shell: Tool = make_shell()
