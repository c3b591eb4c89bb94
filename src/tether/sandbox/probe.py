"""Which mechanism confines commands on this machine, probed once and remembered.

``choose(sandbox)`` answers ``"bwrap"``, ``"landlock"`` or ``"none"`` (only for
``mode = "none"``), or raises ``SandboxUnavailable`` saying what to install or how to opt
out: a sandboxed tool never runs unconfined because a mechanism is missing.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tether.errors import SandboxUnavailable

from . import _landlock_exec
from .settings import Sandbox

Mechanism: TypeAlias = Literal["bwrap", "landlock", "none"]

_INSTALL = ("install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf "
            "install bubblewrap; Arch: pacman -S bubblewrap)")
_OPT_OUT = ('or run unconfined on purpose: [sandbox] mode = "none" in tether.toml '
            '(Sandbox(mode="none") in Python)')


@dataclass(frozen=True, slots=True)
class Probe:
    """What this machine offers: bubblewrap's path and whether it works, the Landlock ABI,
    and, for each one that does not work, why."""

    bwrap: str | None
    bwrap_problem: str | None
    landlock_abi: int


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def _probe_bwrap(path: str) -> str | None:
    """Why ``path`` cannot confine a command (None: it can). A container without user
    namespaces, or a bwrap that is not setuid where it must be, fails here once."""
    try:
        done = subprocess.run(
            [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
             "--die-with-parent", "--", "true"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{path} could not be run ({e})"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[:300]
        return f"{path} failed to start a sandbox: {said or f'exit code {done.returncode}'}"
    return None


@functools.cache
def landlock_abi() -> int:
    return _landlock_exec.abi() if sys.platform.startswith("linux") else 0


def probe() -> Probe:
    path = bwrap_path()
    return Probe(path, None if path is None else _probe_bwrap(path), landlock_abi())


def choose(sandbox: Sandbox) -> Mechanism:
    """The mechanism that runs ``sandbox``'s commands, or ``SandboxUnavailable``."""
    if sandbox.mode == "none":
        return "none"
    found = probe()
    if sandbox.mode in ("auto", "bwrap") and found.bwrap and not found.bwrap_problem:
        return "bwrap"
    if sandbox.mode == "bwrap":
        why = found.bwrap_problem or "bwrap is not on the PATH"
        raise SandboxUnavailable(f'[sandbox] mode = "bwrap": {why}; {_INSTALL}, or set mode '
                                 f'= "auto" to use Landlock where the kernel has it, '
                                 f'{_OPT_OUT}')
    landlock = landlock_problem(found.landlock_abi, sandbox.network)
    if landlock is None:
        return "landlock"
    if sandbox.mode == "landlock":
        raise SandboxUnavailable(f'[sandbox] mode = "landlock": {landlock}; {_INSTALL} and '
                                 f'set mode = "bwrap" or "auto", {_OPT_OUT}')
    bwrap = found.bwrap_problem or "bwrap is not on the PATH"
    raise SandboxUnavailable(f"no sandbox works on this machine ({bwrap}; Landlock: "
                             f"{landlock}), so the sandboxed tool does not run: {_INSTALL}, "
                             f"{_OPT_OUT}")


def landlock_problem(abi: int, network: bool) -> str | None:
    """Why Landlock cannot enforce a sandbox with ``network`` (None: it can)."""
    if abi < 1:
        return "this kernel has no Landlock (Linux 5.13 or later, with it enabled)"
    if not network and abi < 4:
        return (f"this kernel's Landlock (ABI {abi}) cannot refuse network connections "
                f"(ABI 4, Linux 6.7, can); set network = true to allow them")
    return None


def describe(sandbox: Sandbox) -> str:
    """One line for ``tether doctor``: the mechanism in force and why, or why none is."""
    try:
        mechanism = choose(sandbox)
    except SandboxUnavailable as e:
        return f"none works: {e}"
    found = probe()
    if mechanism == "none":
        return 'off ([sandbox] mode = "none"): commands run with all of your rights'
    if mechanism == "bwrap":
        return f"bubblewrap ({found.bwrap}; mode = {sandbox.mode!r})"
    why = "" if sandbox.mode == "landlock" else \
        f"; bubblewrap: {found.bwrap_problem or 'not on the PATH'}"
    return f"Landlock (ABI {found.landlock_abi}; mode = {sandbox.mode!r}{why})"
