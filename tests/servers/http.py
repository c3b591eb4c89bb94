"""A real HTTP server on 127.0.0.1 that plays back scripted responses, for adapter tests.

Each queued ``Canned`` response is served to the next request, whatever its path; every
request is recorded (method, path, headers, JSON body). A body may be a list of chunks
(an SSE stream written piece by piece); a ``threading.Event`` among the chunks makes the
server wait there (a stalled stream) until the event is set, the server stops, or the
client hangs up (``disconnected`` is then set, as it is when a write finds the client gone).
A ``delay`` makes it answer that many seconds late, status line included: a model that
takes that long to write a whole answer.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    status: int = 200
    body: bytes | str | Sequence[bytes | str | threading.Event] | Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds before anything is sent (a slow model, not a wait for something).
    delay: float = 0.0

    @classmethod
    def json(cls, data: Any, status: int = 200, **headers: str) -> Canned:
        return cls(status, json.dumps(data).encode(),
                   {"content-type": "application/json", **headers})

    @classmethod
    def sse(cls, events: Sequence[Any | threading.Event], *, done: bool = True,
            named: bool = False) -> Canned:
        """An SSE stream: each item a JSON payload (or ``(event, payload)`` when ``named``)."""
        chunks: list[bytes | str | threading.Event] = []
        for item in events:
            if isinstance(item, threading.Event):
                chunks.append(item)
            elif named:
                name, payload = item
                chunks.append(f"event: {name}\ndata: {json.dumps(payload)}\n\n")
            else:
                chunks.append(f"data: {json.dumps(item)}\n\n")
        if done:
            chunks.append("data: [DONE]\n\n")
        return cls(200, chunks, {"content-type": "text/event-stream"})


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    # The client's (host, port): two requests with the same peer shared one connection.
    peer: tuple[str, int] | None = None


def _hung_up(connection: socket.socket) -> bool:
    """Whether the client closed ``connection`` (an end of file or a reset waits to be
    read), seen without reading anything it sent."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:  # reset by the peer
        return True


class LoopbackServer:
    """``with LoopbackServer() as srv: srv.queue(Canned.json({...})); srv.url``"""

    def __init__(self) -> None:
        self._queue: list[Canned | Callable[[Recorded], Canned]] = []
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.received = threading.Condition()
        # Set when a client hung up while a streamed body was still being written.
        self.disconnected = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle(self) -> None:
                # A client that hung up between requests is not a server error.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    super().handle()

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                with server._lock:
                    server.requests.append(Recorded(self.command, self.path,
                                                    {k.lower(): v for k, v in self.headers.items()},
                                                    body, self.client_address[:2]))
                    canned = server._queue.pop(0) if server._queue else Canned.json(
                        {"error": {"message": "loopback server: nothing queued"}}, 500)
                if callable(canned):
                    # A responder computed from the request (e.g. naming a generated tool).
                    canned = canned(server.requests[-1])
                with server.received:
                    server.received.notify_all()
                server._write(self, canned)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval: shutdown() waits for the serving loop to notice (0.5 s default).
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.02}, daemon=True)

    def _write(self, handler: BaseHTTPRequestHandler, canned: Canned) -> None:
        if canned.delay and self._stopping.wait(canned.delay):
            return
        body = canned.body
        handler.send_response(canned.status)
        for k, v in canned.headers.items():
            handler.send_header(k, v)
        if isinstance(body, bytes | str):
            data = body.encode() if isinstance(body, str) else body
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        try:
            for chunk in body:
                if isinstance(chunk, threading.Event):
                    while not chunk.wait(0.05):
                        if self._stopping.is_set():
                            return
                        if _hung_up(handler.connection):
                            self.disconnected.set()
                            return
                    continue
                data = chunk.encode() if isinstance(chunk, str) else chunk
                handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.disconnected.set()

    def _wait(self, event: threading.Event) -> bool:
        """Wait until ``event`` is set (True) or the server stops (False)."""
        while not event.wait(0.05):
            if self._stopping.is_set():
                return False
        return True

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}"

    def queue(self, *responses: Canned | Callable[[Recorded], Canned]) -> None:
        with self._lock:
            self._queue.extend(responses)

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def bodies(self) -> Iterator[Any]:
        return (r.body for r in self.requests)
