"""How long an MCP server's tools list holds: the current revision's time to live.

A server that serves no change stream cannot say its tools changed; each page of its
tools list carries ``ttlMs`` instead (0: stale at once). ``Freshness`` keeps when the list
runs out, so a call of its tools reads the list again first (``McpServer.freshen``) and a
tool redefined under the same name is judged by what it says now. While a change stream
serves the server's tool changes (the handshake era's notifications, the current
revision's subscription), or no page gave a time to live, the list holds until the server
says it changed, and checking costs one comparison.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


class Freshness:
    """When the tools list last read runs out (``expires``, monotonic seconds; None:
    never)."""

    __slots__ = ("expires", "stream_failed", "ttl_ms")

    def __init__(self) -> None:
        self.ttl_ms: int | None = None
        self.stream_failed = False
        self.expires: float | None = None

    def listed(self, ttls: Sequence[int], streamed: bool) -> None:
        """The list was read, its pages giving ``ttls`` (the shortest counts);
        ``streamed``: the server says it serves its tool changes."""
        self.ttl_ms = min(ttls) if ttls else None
        self._restart(streamed)

    def stream_ended(self) -> None:
        """The change stream failed or ended: no change is said now, the time to live holds
        (counted from now)."""
        self.stream_failed = True
        self._restart(False)

    def withdrawn(self) -> None:
        """The list could not be read again: nothing to expire until it is."""
        self.expires = None

    @property
    def stale(self) -> bool:
        expires = self.expires
        return expires is not None and time.monotonic() >= expires

    def _restart(self, streamed: bool) -> None:
        ttl = self.ttl_ms
        self.expires = None if ttl is None or (streamed and not self.stream_failed) \
            else time.monotonic() + ttl / 1000
