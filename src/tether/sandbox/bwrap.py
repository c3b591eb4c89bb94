"""bubblewrap's command line for a confined command.

The root file system read-only; the writable folders bound read-write over it; a private
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
               writable: Sequence[str], read: Sequence[str], hidden: Sequence[str],
               protected: Sequence[str]) -> list[str]:
    out = [bwrap, "--die-with-parent", "--unshare-all", "--new-session"]
    if network:
        out.append("--share-net")
    out += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in writable:  # after /tmp: a workspace under /tmp is bound over the private one
        if os.path.exists(path):
            out += ["--bind", path, path]
    for path in hidden:
        if os.path.isdir(path):
            out += ["--tmpfs", path]
        elif os.path.exists(path):
            out += ["--ro-bind", "/dev/null", path]
    for path in read:  # what the configuration names is seen, even beneath a hidden folder
        if os.path.exists(path):
            out += ["--ro-bind", path, path]
    for path in protected:  # after the writable binds: hidden inside them too
        if path in hidden:
            continue
        if os.path.isdir(path):  # a tool file's __pycache__: what it holds would be run
            out += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            out += ["--ro-bind", "/dev/null", path]
    out += ["--chdir", cwd, "--", *argv]
    return out
