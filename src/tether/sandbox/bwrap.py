"""bubblewrap's command line for a confined command.

The root file system read-only (or, for a command that does not read everything, the
system's folders and its own); the writable folders bound read-write over it; a private
``/tmp``, a minimal ``/dev`` and a ``/proc`` of the sandbox's own processes; new PID, IPC,
UTS, cgroup and (unless the network is allowed) network namespaces; the user's secrets
covered by empty folders (or ``/dev/null`` for a file), tether's protected files too (a
configuration may hold a key: they are neither read nor written). ``--die-with-parent``:
when the command's runner kills bubblewrap, everything inside goes with it (the PID
namespace's init dies).
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def bwrap_argv(bwrap: str, argv: Sequence[str], *, cwd: str, network: bool,
               base: Sequence[str], writable: Sequence[str], read: Sequence[str],
               hidden: Sequence[str], protected: Sequence[str]) -> list[str]:
    out = [bwrap, "--die-with-parent", "--unshare-all", "--new-session"]
    if network:
        out.append("--share-net")
    for path in base:  # what it reads: "/", or the folders a server may see
        if os.path.islink(path):  # /bin -> usr/bin on a merged /usr: the same link inside
            out += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            out += ["--ro-bind", path, path]
    out += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in writable:  # after /tmp: a workspace under /tmp is bound over the private one
        if os.path.exists(path):
            out += ["--bind", path, path]
    out += _covered(hidden)
    for path in read:  # what the configuration names is seen, even beneath a hidden folder
        if os.path.exists(path):
            out += ["--ro-bind", path, path]
    # After the writable binds: hidden inside them too. A folder (a tool file's
    # __pycache__: what it holds would be run) is covered read-only, not left writable.
    out += _covered([p for p in protected if p not in hidden], read_only=True)
    out += ["--chdir", cwd, "--", *argv]
    return out


def _covered(paths: Sequence[str], *, read_only: bool = False) -> list[str]:
    """Each of ``paths`` covered: a folder by an empty one, a file by ``/dev/null``."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            out += ["--tmpfs", path, *(["--remount-ro", path] if read_only else [])]
        elif os.path.exists(path):
            out += ["--ro-bind", "/dev/null", path]
    return out
