"""An MCP server whose tools try what a sandbox must stop: ``read`` a file, ``write`` one,
``connect`` to a TCP port on loopback; each answers what happened (the text read, "wrote",
"connected", or the error). ``send`` is declared open world, so it would be external_send."""

from __future__ import annotations

import socket
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("prober")


@app.tool(annotations=ToolAnnotations(open_world_hint=True))
def read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        return f"error: {e.strerror}"


@app.tool(annotations=ToolAnnotations(open_world_hint=True))
def write(path: str) -> str:
    try:
        Path(path).write_text("x")
    except OSError as e:
        return f"error: {e.strerror}"
    return "wrote"


@app.tool(annotations=ToolAnnotations(open_world_hint=True))
def connect(port: int) -> str:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError as e:
        return f"error: {e.strerror}"
    return "connected"


if __name__ == "__main__":
    app.run()
