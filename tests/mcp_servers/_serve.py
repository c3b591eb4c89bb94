"""Run a test MCP server over stdio, or over streamable HTTP on 127.0.0.1.

With ``--http`` the socket is bound and listening *before* the port is printed, so the
test that reads the port can connect at once: no waiting, no polling.
"""

from __future__ import annotations

import socket
import sys
from typing import Any


def serve_http(app: Any) -> None:
    sock = listening()
    print(sock.getsockname()[1], flush=True)
    serve_on(sock, app)


def listening() -> socket.socket:
    """A socket on 127.0.0.1 that listens already (its port is known before the app is
    built: a server that names its own URL needs it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def serve_on(sock: socket.socket, app: Any) -> None:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    server.run(sockets=[sock])


def wants_http() -> bool:
    return "--http" in sys.argv[1:]
