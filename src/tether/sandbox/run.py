"""Running a command confined: the command line that confines it, and a bounded run of it.

``confine`` turns a command into the one that runs it inside the chosen mechanism;
``run_confined`` runs that in its own process group with a time bound and an output cap,
and kills the whole group on timeout or cancellation (inside bubblewrap, the PID namespace
goes with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import _landlock_exec
from .bwrap import bwrap_argv
from .probe import Mechanism, bwrap_path, choose
from .settings import Sandbox, confined_environment, expand, files_only, hidden_paths


@dataclass(frozen=True, slots=True)
class Confined:
    """A command ready to start: its argv and environment, and what confines it."""

    argv: list[str]
    env: dict[str, str]
    mechanism: Mechanism


def confine(sandbox: Sandbox, argv: Sequence[str], *, cwd: str | Path,
            writable: Sequence[str | Path], protected: Sequence[str | Path] = (),
            env: Mapping[str, str] | None = None) -> Confined:
    """``argv`` as it runs inside ``sandbox``: it writes ``writable`` and the sandbox's
    ``write`` paths, reads the rest but the hidden secrets and, under bubblewrap, the
    ``protected`` files (tether's own files the configuration names: hidden as the secrets
    are, neither read nor written; Landlock would have to carve them out of the workspace,
    and no new file could then be made beside them). ``env``: its environment (default:
    the allowlist of ``confined_environment`` over ``os.environ``). Raises
    ``SandboxUnavailable`` when no mechanism can enforce it."""
    mechanism = choose(sandbox)
    env = confined_environment(sandbox.env) if env is None else dict(env)
    if mechanism == "none":
        return Confined(list(argv), env, mechanism)
    hidden = hidden_paths()
    write = expand([*writable, *sandbox.write])
    read = expand(sandbox.read)
    if mechanism == "bwrap":
        path = bwrap_path()
        assert path is not None  # choose found it
        return Confined(bwrap_argv(path, argv, cwd=str(Path(cwd).resolve()),
                                   network=sandbox.network, writable=write, read=read,
                                   hidden=hidden, protected=files_only(expand(protected))), env,
                                   mechanism)
    # Landlock's write rules carve the hidden paths out of the writable ones too; /tmp is
    # shared (Landlock has no private mounts).
    spec = json.dumps({"read": ["/"], "write": [*expand(writable), "/tmp"], "hidden": hidden,
                       "also_read": read, "also_write": expand(sandbox.write),
                       "network": sandbox.network})
    launcher = [sys.executable, "-I", "-S", _landlock_exec.__file__, spec, "--"]
    return Confined([*launcher, *argv], env, mechanism)


@dataclass(frozen=True, slots=True)
class Completed:
    """What a bounded run gave: the output (stdout and stderr together, cut at the cap),
    how many bytes were cut, the exit code (None when it was killed for its time)."""

    output: bytes
    dropped: int
    returncode: int | None
    timed_out: bool


async def run_confined(confined: Confined, *, cwd: str | Path, timeout: float,
                       max_output_bytes: int) -> Completed:
    """Run ``confined`` in its own process group; past ``timeout`` seconds, or when the
    caller is cancelled, the whole group is killed."""
    proc = await asyncio.create_subprocess_exec(
        *confined.argv, cwd=cwd, env=confined.env, stdin=asyncio.subprocess.DEVNULL,
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
            room = max_output_bytes - len(output)
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
        kill_group(proc.pid)
        if proc.returncode is None:
            await proc.wait()
    return Completed(bytes(output), dropped, None if timed_out else proc.returncode, timed_out)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pgid, signal.SIGKILL)
