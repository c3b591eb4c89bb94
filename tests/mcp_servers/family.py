"""An MCP server (the SDK's MCPServer) that starts helper processes, as real servers do (a
language server they spawn, the ``sleep`` of a shell script).

Before it serves, it starts one helper that inherits its stdin and stdout, the wire to
tether, so the pipes stay open after the server exits (the SDK moves the wire off fds 0
and 1 once it serves, so later helpers do not inherit it). Tools: ``pipe_holder`` is that
helper's pid; ``helper`` starts another and returns its pid; ``nested`` starts a helper
that starts its own child and returns the grandchild's pid; ``stubborn`` starts a helper
that ignores SIGTERM; ``leave`` exits before it answers; ``pid`` is the server's own.
``mute`` closes its end of the wire and keeps running. ``--helper-file PATH`` writes the
pipe holder's pid to PATH; ``--no-pipe-holder`` starts none (``true`` instead).
"""

from __future__ import annotations

import os
import subprocess
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

NESTED = ("import subprocess, sys\n"
          "child = subprocess.Popen(['sleep', '1000'])\n"
          "print(child.pid, flush=True)\n"
          "child.wait()\n")

WIRE_OUT = os.readlink("/proc/self/fd/1") if os.path.exists("/proc/self/fd/1") else ""
# Inherits fds 0 and 1, the wire (unless --no-pipe-holder).
PIPE_HOLDER = subprocess.Popen(["true" if "--no-pipe-holder" in sys.argv else "sleep", "1000"])
server = MCPServer("family")


def pipe_holder() -> str:
    return str(PIPE_HOLDER.pid)


def helper() -> str:
    return str(subprocess.Popen(["sleep", "1000"]).pid)


def nested() -> str:
    middle = subprocess.Popen([sys.executable, "-c", NESTED], stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    return middle.stdout.readline().strip()


def stubborn() -> str:
    return str(subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 1000 & wait; wait"]).pid)


def leave() -> str:
    os._exit(3)


def pid() -> str:
    return str(os.getpid())


def mute() -> str:
    """Closes its end of the wire to tether and keeps running: every fd on that pipe is
    pointed at /dev/null, so what the server writes next vanishes without an error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in range(256):
        try:
            if fd != devnull and os.readlink(f"/proc/self/fd/{fd}") == WIRE_OUT:
                os.dup2(devnull, fd)
        except OSError:
            continue
    return "never seen"


for fn in (pipe_holder, helper, nested, stubborn, leave, pid, mute):
    server.add_tool(fn, name=fn.__name__, description=f"the {fn.__name__} tool",
                    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))

if __name__ == "__main__":
    if "--helper-file" in sys.argv:
        with open(sys.argv[sys.argv.index("--helper-file") + 1], "w") as f:
            f.write(str(PIPE_HOLDER.pid))
    server.run("stdio")
