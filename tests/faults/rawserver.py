"""A TCP server on 127.0.0.1 that answers HTTP requests with exactly the bytes a test scripts.

``tests/servers/http.py`` speaks correct HTTP; this one is for servers that do not: a
status line cut short, a chunk size that lies, a gzip body that is not gzip, a byte split
in the middle of a UTF-8 character, a connection reset halfway through a stream.

Each queued ``Script`` answers the next request, whatever its path. A script is a list
of steps: ``bytes`` are written as they are (one ``sendall`` each), ``Close`` ends the
connection with a FIN, ``Reset`` with a RST, a ``threading.Event`` holds the connection
there until it is set (or the server stops). A connection whose script neither closed
nor reset is read again for the next request (keep-alive).

    with RawServer() as srv:
        srv.queue(Script([head(200, {"content-length": "2"}), b"{}"]))
        srv.url   # http://127.0.0.1:PORT
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# How often a blocked read looks whether the server is stopping.
_POLL = 0.05


class Close:
    """End the connection politely (FIN) at this point of the script."""


class Reset:
    """End the connection with a RST at this point of the script (SO_LINGER 0)."""


Step = bytes | Close | Reset | threading.Event


@dataclass
class Script:
    steps: Sequence[Step]


@dataclass
class RawRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class RawServer:
    """See the module docstring. ``requests`` records every request read, in order."""

    requests: list[RawRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._scripts: list[Script] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.05)  # the accept loop notices stop() within this
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._connections: list[socket.socket] = []

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def queue(self, *scripts: Script) -> None:
        with self._lock:
            self._scripts.extend(scripts)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join()
        self._sock.close()
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):  # wakes a write waiting on its client
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()

    # --- serving --------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = _Reader(conn, self._stopping)
        try:
            while True:
                request = reader.request()
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                    script = self._scripts.pop(0) if self._scripts else _NOTHING_QUEUED
                if not self._play(conn, script):
                    return
        except OSError:
            return  # the client hung up: nothing more to serve on this connection
        finally:
            conn.close()

    def _play(self, conn: socket.socket, script: Script) -> bool:
        """Write ``script``; False when it ended the connection. Its writes wait for the
        client however long it takes to read (the reader's short timeout polls for the
        server's stop; on a write it would break the connection whenever the client was
        slower than it, as under load, and a test would see a broken stream it never
        scripted)."""
        conn.settimeout(None)
        try:
            return self._steps(conn, script)
        finally:
            conn.settimeout(_POLL)

    def _steps(self, conn: socket.socket, script: Script) -> bool:
        for step in script.steps:
            if isinstance(step, bytes):
                conn.sendall(step)
            elif isinstance(step, Close):
                conn.shutdown(socket.SHUT_WR)
                return False
            elif isinstance(step, Reset):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return False
            else:
                while not step.wait(0.05):
                    if self._stopping.is_set():
                        return False
        return True


class _Reader:
    """Reads requests (head, then a content-length body) off one connection."""

    def __init__(self, conn: socket.socket, stopping: threading.Event) -> None:
        self.conn = conn
        self.stopping = stopping
        self.buffer = b""
        conn.settimeout(_POLL)

    def _more(self) -> bool:
        while not self.stopping.is_set():
            try:
                data = self.conn.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return False
            self.buffer += data
            return True
        return False

    def request(self) -> RawRequest | None:
        while b"\r\n\r\n" not in self.buffer:
            if not self._more():
                return None
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        while len(self.buffer) < length:
            if not self._more():
                return None
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return RawRequest(method, path, headers, body)


# --- building answers ---------------------------------------------------------------------


def head(status: int = 200, headers: Mapping[str, str] | None = None,
         reason: str = "OK") -> bytes:
    """A status line and headers, ending with the blank line."""
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def encoded(encoding: str) -> dict[str, Any]:
    """The content-encoding header, for ``**`` into ``whole`` or ``chunked`` (a header's
    name has a dash: it cannot be written as a keyword)."""
    return {"content-encoding": encoding}


def whole(body: bytes, status: int = 200, content_type: str = "application/json",
          **headers: str) -> Script:
    """A complete answer with a content-length body."""
    return Script([head(status, {"content-type": content_type,
                                 "content-length": str(len(body)), **headers}), body])


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked transfer-encoded body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def chunked(pieces: Iterable[bytes | threading.Event | Close | Reset], status: int = 200,
            content_type: str = "text/event-stream", end: bool = True,
            **headers: str) -> Script:
    """A chunked answer: each bytes piece is one HTTP chunk (so the client's decoder sees
    it as a piece of its own); events, ``Close`` and ``Reset`` are steps in between.
    ``end=False`` leaves out the last chunk (the body never ends properly)."""
    steps: list[Step] = [head(status, {"content-type": content_type,
                                       "transfer-encoding": "chunked", **headers})]
    closed = False
    for piece in pieces:
        if isinstance(piece, bytes):
            steps.append(chunk(piece))
        else:
            steps.append(piece)
            closed = closed or isinstance(piece, Close | Reset)
    if end and not closed:
        steps.append(LAST_CHUNK)
    return Script(steps)


def sse_bytes(events: Iterable[Any], named: bool = False) -> list[bytes]:
    """Each event as its SSE bytes: a JSON payload, ``(name, payload)`` when ``named``, or
    ``str``/``bytes`` data written as it is."""
    out = []
    for item in events:
        name = None
        if named:
            name, item = item
        data = item if isinstance(item, bytes | str) else json.dumps(item)
        data = data.encode() if isinstance(data, str) else data
        prefix = f"event: {name}\n".encode() if name else b""
        out.append(prefix + b"data: " + data + b"\n\n")
    return out


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data)


_NOTHING_QUEUED = whole(b'{"error": {"message": "raw server: nothing queued"}}', 500)
