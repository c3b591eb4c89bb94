"""Serving the app with uvicorn, and stopping it cleanly.

The socket is bound before anything is printed, so the URL printed is one that answers (a
port taken is an error, said plainly; port 0 picks a free one, which the URL names). The
first Ctrl-C (or SIGTERM) interrupts every run in flight (each ends ``interrupted`` and is
stored so), lets their streams finish, and stops; calls waiting for approval stay pending
in the store. No request line is logged: the page's first URL holds the token.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from tether.errors import ConfigError
from tether.serve.runs import Runs


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: a free port)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e} (another "
                          f"program may use the port: pick another with --port)") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, whose stop signal first interrupts the runs in flight, and is not
    raised again once stopped (the command ends as a clean stop, not an interruption)."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop = on_stop

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True
            return
        self._on_stop()
        self.should_exit = True


async def serve(app: Any, runs: Runs, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until a stop signal; then the runs are interrupted and
    waited for."""
    loop = asyncio.get_running_loop()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=30, server_header=False)

    def stop() -> None:
        loop.call_soon_threadsafe(runs.interrupt_all)

    server = _Server(config, stop)
    try:
        await server.serve(sockets=[sock])
    finally:
        await runs.close()
