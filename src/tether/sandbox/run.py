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
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import _landlock_exec
from .bwrap import bwrap_argv
from .probe import Mechanism, bwrap_path, choose
from .settings import (
    SYSTEM_READ,
    Sandbox,
    confined_environment,
    expand,
    hidden_paths,
    program_paths,
    protected_paths,
)


@dataclass(frozen=True, slots=True)
class Confined:
    """A command ready to start: its argv and environment, and what confines it.
    ``absent``: protected paths that did not exist and that the mechanism cannot keep from
    being made (bubblewrap cannot cover a name that is not there): ``run_confined`` removes
    whatever the command made of them. Whoever starts it calls ``release`` when it ends."""

    argv: list[str]
    env: dict[str, str]
    mechanism: Mechanism
    absent: tuple[str, ...] = ()
    scratch: str | None = None  # its own temporary folder (TMPDIR), removed by ``release``


def confine(sandbox: Sandbox, argv: Sequence[str], *, cwd: str | Path,
            writable: Sequence[str | Path], protected: Sequence[str | Path] = (),
            env: Mapping[str, str] | None = None) -> Confined:
    """``argv`` as it runs inside ``sandbox``: it writes ``writable`` and the sandbox's
    ``write`` paths, reads the rest but the hidden secrets and the ``protected`` files
    (tether's own files the configuration names: a configuration may hold a key, and a
    command that rewrote one would run unconfined next time, so they are hidden as the
    secrets are, neither read nor written). ``env``: its environment (default: the
    allowlist of ``confined_environment`` over ``os.environ``). Raises
    ``SandboxUnavailable`` when no mechanism can enforce it."""
    mechanism = choose(sandbox)
    env = confined_environment(sandbox.env) if env is None else dict(env)
    if mechanism == "none":
        return Confined(list(argv), env, mechanism)
    hidden = hidden_paths()
    write = expand([*writable, *sandbox.write])
    read = expand(sandbox.read)
    base = ("/",) if sandbox.read_all else (
        *SYSTEM_READ, *program_paths(argv, cwd), *expand([cwd]), *read, *write)
    own = protected_paths([*protected, *sandbox.hide])
    if mechanism == "bwrap":
        path = bwrap_path()
        assert path is not None  # choose found it
        return Confined(bwrap_argv(path, argv, cwd=str(Path(cwd).resolve()),
                                   network=sandbox.network, base=base, writable=write,
                                   read=read, hidden=hidden, protected=own), env, mechanism,
                        absent=_makeable(own, hidden, write))
    # Landlock's write rules carve the hidden paths out of the writable ones too; /tmp is
    # shared (Landlock has no private mounts). A protected file is carved out like a
    # secret: the folder holding it is then granted entry by entry, so no new file can be
    # made directly in it (its subfolders take them), the price of not being able to
    # rewrite the configuration the next run obeys.
    protected_files = [p for p in own if p not in hidden]
    # A command that does not read everything does not read the shared /tmp either: it
    # gets a temporary folder of its own.
    scratch = None if sandbox.read_all else tempfile.mkdtemp(prefix="tether-sandbox-")
    if scratch is not None:
        env["TMPDIR"] = scratch
    spec = json.dumps({"read": list(base), "write": [*expand(writable), scratch or "/tmp"],
                       "hidden": [*hidden, *protected_files],
                       "also_read": read, "also_write": expand(sandbox.write),
                       "network": sandbox.network})
    launcher = [sys.executable, "-I", "-S", _landlock_exec.__file__, spec, "--"]
    return Confined([*launcher, *argv], env, mechanism, scratch=scratch)


def release(confined: Confined) -> None:
    """What ``confine`` made for a command that has ended: its temporary folder."""
    if confined.scratch is not None:
        shutil.rmtree(confined.scratch, ignore_errors=True)


def _makeable(protected: Sequence[str], hidden: Sequence[str],
              write: Sequence[str]) -> tuple[str, ...]:
    """The protected paths a command could make: absent now, beneath a writable folder.
    Not the hidden ones (the session store's journal files come and go as tether itself
    writes them: removing one would lose its data)."""
    def writable(path: str) -> bool:
        return any(path.startswith(root.rstrip("/") + "/") for root in write)
    return tuple(p for p in protected
                 if p not in hidden and writable(p) and not os.path.lexists(p))


@dataclass(frozen=True, slots=True)
class Completed:
    """What a bounded run gave: the output (stdout and stderr together, cut at the cap),
    how many bytes were cut, the exit code (None when it was killed for its time), and the
    protected paths the command made, which were removed."""

    output: bytes
    dropped: int
    returncode: int | None
    timed_out: bool
    removed: tuple[str, ...] = ()


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
        removed = remove_made(confined.absent)
        release(confined)
    return Completed(bytes(output), dropped, None if timed_out else proc.returncode, timed_out,
                     removed)


def remove_made(paths: Sequence[str]) -> tuple[str, ...]:
    """Remove whichever of ``paths`` exist now (they did not when the command started: a
    ``tether.toml`` or a hook file it made would be obeyed, unconfined, by the next run)."""
    removed = []
    for path in paths:
        if not os.path.lexists(path):
            continue
        with contextlib.suppress(OSError):  # gone again, or not ours to remove: say so anyway
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        removed.append(path)
    return tuple(removed)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pgid, signal.SIGKILL)
