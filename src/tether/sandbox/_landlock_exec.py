"""Landlock through its three system calls, and a launcher that confines itself, then execs.

Run as ``python -I -S _landlock_exec.py SPEC -- ARGV...``: it builds a ruleset from SPEC (a
JSON object: ``read``, ``write``, ``hidden`` paths and ``network``), restricts itself
(no new privileges, then ``landlock_restrict_self``) and replaces itself with ARGV. The
restriction is inherited by everything ARGV starts. A launcher process, not a
``preexec_fn``: the parent is threaded, and only exec is safe after fork there.

Standard library only (it is run by path, isolated, before anything of tether's is
importable), so it is also imported by ``tether.sandbox.probe`` for ``abi()``.

Landlock only allows: a rule grants rights beneath a folder, and nothing takes them away
below it. So a hidden path inside a readable tree is left out by granting its siblings one
by one, down the path to it ("carving"); a file created later beside a hidden path, in one
of those carved folders, is not readable.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Iterable, Sequence

# The system call numbers: the same on every architecture (new calls share one table).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

# File-system rights (linux/landlock.h), and the ABI that brought each.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_DIR_WRITES = sum(1 << i for i in range(4, 13))  # remove, make (char, dir, reg, sock, ...)
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | _DIR_WRITES,
              2: REFER, 3: TRUNCATE, 5: IOCTL_DEV}
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a file may carry
_READ = EXECUTE | READ_FILE | READ_DIR
_WRITE = ~0  # every right the ABI handles
_BIND_TCP, _CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

# The devices a command may use; the rest of /dev (disks, above all, for root) is not readable.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
           "/dev/pts", "/dev/ptmx", "/dev/shm")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or not on Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _fs_rights(version: int) -> int:
    return sum(bits for since, bits in _FS_BY_ABI.items() if version >= since)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def carve(roots: Iterable[str], hidden: Sequence[str]) -> list[str]:
    """The paths whose rules grant ``roots`` without any of ``hidden``: a root with no hidden
    path beneath it stands whole; one with some is replaced by its entries, each carved in
    turn, and a hidden path itself is left out."""
    out: list[str] = []
    for root in roots:
        if any(_under(root, h) for h in hidden):
            continue
        inside = [h for h in hidden if _under(h, root)]
        if not inside:
            out.append(root)
            continue
        try:
            names = sorted(os.listdir(root))
        except OSError:  # not a folder, or gone: nothing to grant beneath it
            continue
        # A symbolic link is not granted: a rule on it would hold for its target, which
        # may be (or hold) a hidden path; what it points at is granted under its own name.
        entries = (os.path.join(root, n) for n in names)
        out.extend(carve((e for e in entries if not os.path.islink(e)), inside))
    return out


def _add_path(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:  # it went away, or cannot be reached: nothing to grant
        return
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        rule = _PathBeneath(access, fd)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def restrict(read: Sequence[str], write: Sequence[str], hidden: Sequence[str], network: bool,
             also_read: Sequence[str] = (), also_write: Sequence[str] = ()) -> None:
    """Confine this process (and all it will start): read ``read``, read and write
    ``write``, neither beneath ``hidden``; read ``also_read`` and write ``also_write`` even
    there (the configuration named them); no TCP unless ``network``."""
    version = abi()
    if version < 1:
        raise OSError("this kernel has no Landlock")
    if not network and version < 4:
        raise OSError(f"Landlock ABI {version} cannot refuse TCP (4 or later can)")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    fs = _fs_rights(version)
    net = 0 if network else _BIND_TCP | _CONNECT_TCP
    scoped = _SCOPE_SIGNAL | (0 if network else _SCOPE_ABSTRACT_UNIX) if version >= 6 else 0
    attr = _RulesetAttr(fs, net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else 16 if version >= 4 else 8
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        # /proc is left out: Landlock does not keep a process from reading another's
        # /proc/PID/environ (tether's own, with its keys), so none of it is readable.
        for path in carve(read, [*hidden, "/dev", "/proc"]):
            _add_path(libc, ruleset, path, _READ & fs)
        for path in DEVICES:
            if not any(_under(path, h) for h in hidden):
                _add_path(libc, ruleset, path, (_READ | WRITE_FILE | IOCTL_DEV) & fs)
        for path in carve(write, hidden):
            _add_path(libc, ruleset, path, _WRITE & fs)
        for path in also_read:
            _add_path(libc, ruleset, path, _READ & fs)
        for path in also_write:
            _add_path(libc, ruleset, path, _WRITE & fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _landlock_exec.py SPEC -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    try:
        restrict(spec["read"], spec["write"], spec["hidden"], spec["network"],
                 spec.get("also_read", ()), spec.get("also_write", ()))
    except OSError as e:
        print(f"tether sandbox (landlock): {e}", file=sys.stderr)
        return 126
    try:
        os.execvp(argv[2], list(argv[2:]))
    except OSError as e:
        print(f"tether sandbox (landlock): cannot run {argv[2]!r}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
