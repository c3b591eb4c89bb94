"""An MCP server (the SDK's MCPServer) that starts helper processes, as real servers do (a
language server they spawn, the ``sleep`` of a shell script).

Before it serves, it starts one helper that inherits its stdin and stdout, the wire to
tether, so the pipes stay open after the server exits (the SDK moves the wire off fds 0
and 1 once it serves, so later helpers do not inherit it). Tools: ``pipe_holder`` is that
helper's pid; ``helper`` starts another and returns its pid; ``nested`` starts a helper
that starts its own child and returns the grandchild's pid; ``stubborn`` starts a helper
that ignores SIGTERM; ``leave`` exits before it answers; ``pid`` is the server's own.
``--helper-file PATH`` writes the pipe holder's pid to PATH.
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

PIPE_HOLDER = subprocess.Popen(["sleep", "1000"])  # inherits fds 0 and 1: the wire
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


for fn in (pipe_holder, helper, nested, stubborn, leave, pid):
    server.add_tool(fn, name=fn.__name__, description=f"the {fn.__name__} tool",
                    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))

if __name__ == "__main__":
    if "--helper-file" in sys.argv:
        with open(sys.argv[sys.argv.index("--helper-file") + 1], "w") as f:
            f.write(str(PIPE_HOLDER.pid))
    server.run("stdio")
