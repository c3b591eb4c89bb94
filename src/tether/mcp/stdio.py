"""A stdio MCP server's process: started in a session of its own, watched, ended whole.

The SDK's ``stdio_client`` learns that a server is gone from end-of-file on its stdout,
and kills the process group only when the server outlives a grace period after its stdin
closes. So a server that exits while a helper it started still holds its stdout looks
alive (each call waits out its timeout), and a server that exits politely on close leaves
its helpers running. Here the process itself is watched (asyncio reports its exit, pipes
or not), and its whole process group is ended on close and on loss, helpers included.

POSIX only: on Windows ``McpServer`` uses the SDK's transport (a Job Object there).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from tether.sandbox import Confined, Sandbox, confine, release

if TYPE_CHECKING:
    import anyio
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage


@dataclass(frozen=True, slots=True)
class StdioTransport:
    """How a stdio server is started: its command, environment, folder and sandbox."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    env_passthrough: tuple[str, ...] = ()
    cwd: str | None = None
    sandbox: Sandbox | None = None

    def describe(self) -> str:
        return "stdio: " + " ".join([self.command, *self.args])

    @property
    def offline(self) -> bool:
        """Confined without network: the kernel keeps its tools from sending."""
        return self.sandbox is not None and self.sandbox.mode != "none" and \
            not self.sandbox.network


# How long a server gets to exit after its stdin closes, and its group after SIGTERM.
GRACE_SECS = 2.0
_POLL_SECS = 0.01  # probing a process group, which has no exit event of its own
_MAX_MESSAGE = 64 * 1024 * 1024  # one JSON-RPC line; a longer one ends the connection
_READ_AHEAD = 64  # chunks of stdout held before the pipe is paused


class _Watched(asyncio.SubprocessProtocol):
    """The child's stdout as a queue of chunks (``None``: end of file), its exit as an
    event, and flow control for writes to its stdin."""

    def __init__(self) -> None:
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.exited = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        self.transport: asyncio.SubprocessTransport | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if fd == 1:
            self.chunks.put_nowait(data if isinstance(data, bytes) else data.encode())
            if self.chunks.qsize() >= _READ_AHEAD and not self._paused:
                self._pause(True)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.chunks.put_nowait(None)

    def process_exited(self) -> None:
        self.exited.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def taken(self) -> None:
        """A chunk was consumed: read on once the backlog is short again."""
        if self._paused and self.chunks.qsize() < _READ_AHEAD // 2:
            self._pause(False)

    def _pause(self, pause: bool) -> None:
        pipe = self.transport.get_pipe_transport(1) if self.transport else None
        if isinstance(pipe, asyncio.ReadTransport):
            pipe.pause_reading() if pause else pipe.resume_reading()
            self._paused = pause


@contextlib.asynccontextmanager
async def stdio_server_streams(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    errlog: TextIO,
    on_gone: Callable[[str], None],
    sandbox: Sandbox | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                         MemoryObjectSendStream[SessionMessage]]]:
    """Run ``command`` with exactly ``env``, in a new session (so its process group holds
    it and every helper it starts), and bridge its stdin/stdout to the streams an MCP
    ``ClientSession`` reads and writes.

    ``on_gone(how)`` is called the moment the server is lost: its process exited (whoever
    holds its pipes), or it closed its stdout; ``how`` says which ("it exited with code
    3"). Then its group is ended and the read stream closes, so calls in flight fail at
    once. Leaving the context closes stdin, waits ``GRACE_SECS`` for the server to exit,
    and ends its group: SIGTERM, then SIGKILL ``GRACE_SECS`` later.

    ``sandbox``: the server runs confined (``tether.sandbox``), writing only its working
    folder and the sandbox's ``write`` paths; ``SandboxUnavailable`` when nothing here can
    confine it (it does not start).
    """
    import anyio
    from mcp.shared.message import SessionMessage

    confined = _confined([command, *args], env, cwd, sandbox)
    transport, watched = await _spawn(confined, errlog, cwd)
    group = transport.get_pid()  # the session leader: its pid is the group's id
    stdin = transport.get_pipe_transport(0)
    assert isinstance(stdin, asyncio.WriteTransport)
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    read_scope = anyio.CancelScope()
    read_done = anyio.Event()
    output_ended = asyncio.Event()  # the server closed its stdout (or sent garbage)

    async def read() -> None:
        buffer = bytearray()
        try:
            with read_scope:
                async with to_session:
                    while (chunk := await watched.chunks.get()) is not None:
                        watched.taken()
                        buffer += chunk
                        while (end := buffer.find(b"\n")) >= 0:
                            line = bytes(buffer[:end])
                            del buffer[:end + 1]
                            if line.strip():
                                await to_session.send(_parse(line))
                        if len(buffer) > _MAX_MESSAGE:
                            await to_session.send(ValueError(
                                f"the server sent a message longer than {_MAX_MESSAGE} "
                                f"bytes; the connection is closed"))
                            break
                    output_ended.set()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone: nobody reads any more
        finally:
            read_done.set()

    async def write() -> None:
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await watched.writable.wait()
                    if stdin.is_closing():
                        break
                    stdin.write(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        # The server cannot be written to: end the session's reading too, so no request
        # waits for an answer that cannot come.
        await to_session.aclose()

    async def watch() -> None:
        async with anyio.create_task_group() as either:  # the exit, or the end of its output
            for event in (watched.exited, output_ended):
                either.start_soon(_cancel_when_set, event, either.cancel_scope)
        if not watched.exited.is_set():  # an exiting process closes its output too
            with anyio.move_on_after(GRACE_SECS):
                await watched.exited.wait()
        on_gone(_how_gone(transport.get_returncode()))
        await end_group(group)  # its helpers go with it; they may hold the pipes
        with anyio.move_on_after(GRACE_SECS):
            await read_done.wait()  # what it wrote before it exited is delivered first
        read_scope.cancel()
        await to_session.aclose()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            tasks.start_soon(write)
            tasks.start_soon(watch)
            try:
                yield from_server, to_server
            finally:
                # Shielded: the process tree is ended even when the caller is cancelled.
                with anyio.CancelScope(shield=True):
                    stdin.close()
                    with anyio.move_on_after(GRACE_SECS):
                        await watched.exited.wait()
                    await end_group(group)
                    with anyio.move_on_after(GRACE_SECS):
                        await watched.exited.wait()
                tasks.cancel_scope.cancel()
    finally:
        transport.close()
        release(confined)
        for stream in (to_session, from_server, to_server, from_session):
            stream.close()


async def _spawn(confined: Confined, errlog: TextIO,
                 cwd: str | None) -> tuple[asyncio.SubprocessTransport, _Watched]:
    loop = asyncio.get_running_loop()
    try:
        return await loop.subprocess_exec(
            _Watched, *confined.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=errlog, env=confined.env, cwd=cwd, start_new_session=True)
    except BaseException:
        release(confined)  # it never started: nothing else will
        raise


def _confined(argv: list[str], env: Mapping[str, str], cwd: str | None,
              sandbox: Sandbox | None) -> Confined:
    if sandbox is None:
        return Confined(argv, dict(env), "none")
    folder = cwd or os.getcwd()
    return confine(sandbox, argv, cwd=folder, writable=[folder], env=env)


async def _cancel_when_set(event: asyncio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _how_gone(returncode: int | None) -> str:
    if returncode is None:
        return "it closed its output while running"
    if returncode < 0:
        return f"it was killed by signal {-returncode}"
    return f"it exited with code {returncode}"


async def end_group(group: int) -> None:
    """SIGTERM every process of ``group``; SIGKILL what is left ``GRACE_SECS`` later.
    Returns once none is left (or, for a process no signal ends, after the grace)."""
    import anyio

    if not _signal(group, signal.SIGTERM):
        return
    with anyio.move_on_after(GRACE_SECS):
        while group_alive(group):
            await anyio.sleep(_POLL_SECS)
        return
    _signal(group, signal.SIGKILL)
    with anyio.move_on_after(GRACE_SECS):  # a kill lands at once, not synchronously
        while group_alive(group):
            await anyio.sleep(_POLL_SECS)


def _signal(group: int, sig: int) -> bool:
    """Whether the group exists (and so may have got ``sig``)."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # some member is not ours to signal; the group is there
        return True
    return True


def group_alive(group: int) -> bool:
    """Whether a live process is left in ``group``. Zombies do not count: killed orphans
    wait for init to reap them, and some containers' init never does."""
    try:
        entries = os.scandir("/proc")
    except OSError:  # no /proc (macOS): signal 0 asks the kernel, zombies included
        return _signal(group, 0)
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(os.path.join(entry.path, "stat"), "rb") as f:
                    stat = f.read()
            except OSError:  # it ended while we looked
                continue
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            fields = stat[stat.rfind(b")") + 2:].split()
            if len(fields) > 2 and int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
                return True
    return False


def _parse(line: bytes) -> Any:
    """One JSON-RPC message, or the error the session is handed instead."""
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as e:  # pydantic's ValidationError included
        return e
