"""The server's door: who may ask it anything.

Every request is checked before any route sees it, in this order:

1. ``Host`` must name the address served (``127.0.0.1:PORT``; ``localhost:PORT`` and
   ``[::1]:PORT`` too on loopback): a page on another site whose name was re-pointed at
   127.0.0.1 (DNS rebinding) sends its own name, and gets 403.
2. Everything but the page itself (``/`` and its script and style, which hold nothing)
   needs ``Authorization: Bearer TOKEN``, compared in constant time: else 401. Paths
   another module serves to callers who do not hold the page's token (``tether serve
   --a2a``: the agent card and the A2A endpoint) are "open": they skip this check alone,
   and that module's own rule judges its callers' tokens (the page's token is no token to
   it, and its tokens are none to the page).
3. A POST must be JSON (``Content-Type: application/json``: a form another site's page
   posts cannot be), and its ``Origin``, when sent, the page's own: else 403.

No CORS headers are ever sent, so no other origin's script may read an answer. Every
answer carries headers that keep the page to itself: a Content-Security-Policy allowing
only its own script and style (no inline script, so text shown as HTML by mistake still
runs nothing), no referrer (the token is in the URL first opened), no framing, no caching.
The token is never logged: the server logs no request lines.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from tether.errors import ConfigError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# What anyone may GET without the token: the page, which holds no data and no secret.
PUBLIC_PATHS = frozenset({"/", "/page.js", "/page.css"})

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
     b"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def new_token() -> str:
    """A random token: 32 bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is every address of the machine (``0.0.0.0``, ``::``)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def exposure(host: str) -> str | None:
    """What ``tether serve --host HOST`` must say before it listens: None on loopback (only
    this machine reaches it); else that other machines can reach the page, that they still
    need the token, and that nothing is encrypted. ``ConfigError`` for every address at
    once: the ``Host`` check needs the one name browsers will use (else every request from
    another machine is refused as DNS rebinding)."""
    if is_loopback(host):
        return None
    if is_wildcard(host):
        raise ConfigError(f"--host {host} listens on every address, but the page only "
                          f"answers requests naming the address it serves (a check "
                          f"against DNS rebinding): give the address other machines will "
                          f"use, such as --host 192.168.1.20")
    return (f"listening on {host}, beyond this machine: anyone who can reach it still needs "
            f"the token in the URL (every request but the page itself is refused without "
            f"it), and the traffic is not encrypted (no TLS): share the URL only over a "
            f"channel you trust, or put a TLS proxy in front")


def served_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` header values that name the address served."""
    bare = host.strip("[]")
    named = f"[{bare}]" if ":" in bare else bare
    hosts = {f"{named}:{port}"}
    if is_loopback(host):
        hosts |= {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    return frozenset(hosts)


def page_url(host: str, port: int, token: str) -> str:
    bare = host.strip("[]")
    named = f"[{bare}]" if ":" in bare else bare
    return f"http://{named}:{port}/?token={token}"


class Guard:
    """ASGI middleware: the checks above, around ``app``. ``extra_public`` adds paths that
    need no token to GET (another module's page); ``open_paths``, paths that need no page
    token whatever the method (another module's endpoint, which checks its own callers:
    exact paths, never a prefix)."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: Iterable[str],
                 extra_public: Iterable[str] = (), open_paths: Iterable[str] = ()) -> None:
        self.app = app
        self._token = token.encode()
        self.hosts = frozenset(h.lower() for h in hosts)
        self.origins = frozenset(f"http://{h}" for h in self.hosts)
        self.public = PUBLIC_PATHS | frozenset(extra_public)
        self.open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self.refusal(scope, headers)

        async def send_secured(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        if refusal is not None:
            status, text, extra = refusal
            await _refuse(send_secured, status, text, extra)
            return
        await self.app(scope, receive, send_secured)

    def refusal(self, scope: Scope, headers: dict[str, str]
                ) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        """(status, why, headers) of a request that may not pass, or None."""
        if headers.get("host", "").lower() not in self.hosts:
            return 403, "the Host header does not name the address served", []
        method, path = scope["method"], scope["path"]
        if method == "OPTIONS":
            return 403, "no cross-origin requests", []
        if not (method in ("GET", "HEAD") and path in self.public) and \
                path not in self.open and not self.authorized(headers.get("authorization", "")):
            return 401, "a token is needed: Authorization: Bearer TOKEN (tether serve " \
                        "printed the page's URL with it)", [(b"www-authenticate", b"Bearer")]
        if method not in ("GET", "HEAD"):
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return 403, "a request that changes anything must be JSON", []
            origin = headers.get("origin")
            if origin is not None and origin.lower() not in self.origins:
                return 403, "the request comes from another site's page", []
        return None

    def authorized(self, header: str) -> bool:
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            # Compared all the same, so a missing header takes as long as a wrong one.
            hmac.compare_digest(self._token, self._token[::-1])
            return False
        return hmac.compare_digest(given.strip().encode(), self._token)


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in scope.get("headers", []):
        out.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return out


async def _refuse(send: Send, status: int, text: str,
                  extra: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": text}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})
