"""Remote OAuth 2.1 for an MCP server reached over HTTP (``[[mcp]] auth = "oauth"``).

The SDK's ``OAuthClientProvider`` does the protocol: discovery (protected resource
metadata, then the authorization server's), dynamic client registration, PKCE, the
``resource`` parameter (RFC 8707: tokens bound to this server), the code exchange and
refresh. tether adds what is its own:

- ``TokenFile``: the client registration and tokens of one server in tether's data folder
  (``tether.paths.oauth_dir``), one file per server URL, written 0600 (a folder it makes,
  0700),
  bound to the issuer that issued them (another issuer discards them), refused when anyone
  but its owner can read or write it;
- ``LoopbackRedirect``: the redirect's listener on 127.0.0.1 (a port of its own per sign-in),
  which takes the first answer on ``/callback`` and nothing else;
- ``AddressGuard``: every request the flow makes goes through it: discovery, registration
  and token requests (and their redirects, which the SDK follows only within an origin)
  must reach public addresses, as ``fetch_url``'s rule (``tether.network``), the connection
  pinned to the address checked. Exempt: the server's own origin (the user configured it),
  and loopback addresses when that server is itself on loopback (a process on this machine
  names a neighbour on it: nothing is reached that the server could not reach itself). An
  HTTP(S) proxy the environment names is used, asked for the address checked (``proxy_for``);
- the sign-in URL, checked by the same rule, goes to ``OAuth.sign_in`` (the command line
  prints it; tether never opens a browser). Without ``sign_in`` a server whose tokens are
  missing, or can no longer be refreshed, does not start: ``tether mcp login NAME``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import ipaddress
import json
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tether.display import inline
from tether.network import Resolver, blocked_address, system_resolve
from tether.paths import oauth_dir

if TYPE_CHECKING:
    import httpx2
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

SignIn = Callable[[str], Awaitable[None]]
"""``async (url) -> None``: show a person the URL to open to sign in (never opened by
tether). Returning does not mean they did: tether waits for the redirect."""


@dataclass(frozen=True, slots=True)
class OAuth:
    """How a remote MCP server is signed in to with OAuth 2.1.

    ``scope``: the scopes asked for (default: what the server's metadata says);
    ``client_name``: the name tether registers under; ``token_dir``: where tokens are kept
    (default: ``tether.paths.oauth_dir``); ``sign_in``: how a person is shown the sign-in
    URL (``None``: no person; the server starts only with tokens that are valid or can be
    refreshed); ``sign_in_timeout_secs``: how long the redirect is waited for;
    ``resolve``: the resolver the address rule uses (tests give a table)."""

    scope: str | None = None
    client_name: str = "tether"
    token_dir: Path | None = None
    sign_in: SignIn | None = None
    sign_in_timeout_secs: float = 300.0
    resolve: Resolver = system_resolve


class OAuthRefused(Exception):
    """Sign-in refused by tether's own rules (an address, a token file, no person to sign
    in); the message is for the user."""


# --- tokens on disk --------------------------------------------------------------------------

class TokenFile:
    """One server's registration and tokens (the SDK's ``TokenStorage``), in a file only
    its owner may read and write. ``redirect_uri`` is this sign-in's: a registration made
    for another redirect is not used (a new one is made)."""

    def __init__(self, directory: Path, resource: str, redirect_uri: str = "") -> None:
        digest = hashlib.sha256(resource.encode()).hexdigest()[:32]
        self.path = directory / f"{digest}.json"
        self.resource = resource
        self.redirect_uri = redirect_uri

    def read(self) -> dict[str, Any]:
        """What the file holds ({} when there is none). Raises ``OAuthRefused`` for a file
        anyone but its owner may read or write, a link, or one that is not tether's JSON."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise OAuthRefused(f"the token file {self.path} cannot be read ({e})") from None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise OAuthRefused(f"the token file {self.path} is not a regular file")
            mode = stat.S_IMODE(info.st_mode)
            if mode & 0o077 or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
                raise OAuthRefused(
                    f"the token file {self.path} can be read or written by others (mode "
                    f"{mode:04o}); tether uses tokens only from a file only you can read and "
                    f"write: remove it (tether mcp logout) and sign in again, or chmod 600 it")
            raw = f.read(1_000_000)
        try:
            data = json.loads(raw)
        except ValueError:
            raise OAuthRefused(f"the token file {self.path} is not JSON") from None
        if not isinstance(data, dict) or data.get("resource") != self.resource:
            raise OAuthRefused(f"the token file {self.path} is not this server's")
        return data

    def write(self, data: dict[str, Any]) -> None:
        """Replace the file at once (a temporary file renamed), 0600; a folder it makes is
        0700 (one that exists is left as it is: it may be yours)."""
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = directory / f".{self.path.name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({**data, "resource": self.resource}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)

    def remove(self) -> bool:
        """Forget the server's registration and tokens; whether there were any."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    # The SDK's TokenStorage protocol.

    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken

        data = self.read()
        if not isinstance(data.get("tokens"), dict):
            return None
        token = OAuthToken.model_validate(data["tokens"])
        expires_at = data.get("expires_at")
        if isinstance(expires_at, int | float):
            # What is left of its life, so a token that expired while tether was not
            # running is refreshed before it is used.
            token.expires_in = max(0, int(expires_at - time.time()))
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        data = self.read()
        data["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        data["expires_at"] = None if tokens.expires_in is None \
            else time.time() + int(tokens.expires_in)
        self.write(data)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        client = self.read().get("client")
        if not isinstance(client, dict):
            return None
        info = OAuthClientInformationFull.model_validate(client)
        if self.redirect_uri and self.redirect_uri not in [str(u) for u in
                                                           info.redirect_uris or ()]:
            return None  # registered for another sign-in's port: register again
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        data = self.read()
        data["client"] = client_info.model_dump(mode="json", exclude_none=True)
        data["issuer"] = client_info.issuer
        self.write(data)


# --- the redirect ----------------------------------------------------------------------------

_PAGE = ("<!doctype html><meta charset=utf-8><title>tether</title><p>{}</p>")


class LoopbackRedirect:
    """The listener the authorization server redirects the browser to: 127.0.0.1 on a port
    of its own, path ``/callback``. The first request there that carries a ``code`` or an
    ``error`` is the answer; any other request gets 404 and changes nothing."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._answer: asyncio.Future[dict[str, str]] | None = None
        self.port = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def open(self, port: int = 0) -> None:
        """Listen on ``port`` (the one a stored registration names), or on a new one when
        it is taken or none is given."""
        self._answer = asyncio.get_running_loop().create_future()
        try:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", port,
                                                      limit=16_384)
        except OSError:
            if not port:
                raise
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0,
                                                      limit=16_384)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def wait(self, timeout: float) -> AuthorizationCodeResult:
        from mcp.shared.auth import AuthorizationCodeResult

        assert self._answer is not None
        try:
            async with asyncio.timeout(timeout):
                query = await asyncio.shield(self._answer)
        except TimeoutError:
            raise OAuthRefused(f"nobody signed in within {timeout:g}s") from None
        if "error" in query:
            raise OAuthRefused(f"the authorization server answered "
                               f"{inline(query['error'])}: "
                               f"{inline(query.get('error_description', ''))}")
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"),
                                       iss=query.get("iss"))

    async def _serve(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                line = await reader.readline()
                while (await reader.readline()).strip():  # the headers, unread
                    pass
            method, _, rest = line.decode("latin-1").partition(" ")
            target = rest.rsplit(" ", 1)[0]
            parts = urlsplit(target)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            answer = self._answer
            if method != "GET" or parts.path != "/callback" or \
                    not ({"code", "error"} & query.keys()) or answer is None or answer.done():
                await _respond(writer, 404, "Not the sign-in tether is waiting for.")
                return
            answer.set_result(query)
            said = "Signed in. You can close this tab and go back to tether." \
                if "code" in query else f"Sign-in failed: {query['error']}"
            await _respond(writer, 200, said)
        except (TimeoutError, ValueError, OSError, asyncio.LimitOverrunError,
                asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _respond(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = _PAGE.format(html.escape(text)).encode()
    reason = "OK" if status == 200 else "Not Found"
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n"
                 f"Cache-Control: no-store\r\n\r\n".encode() + body)
    await writer.drain()


# --- where the flow may go -------------------------------------------------------------------

def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https"
                                                                  else 80)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class AddressRule:
    """Where the flow may send a request: the configured server's own origin; anything
    else only over https to public addresses (and, when the server is on loopback, to
    loopback over http or https)."""

    server_url: str
    resolve: Resolver
    loopback_ok: bool

    @classmethod
    async def for_server(cls, server_url: str, resolve: Resolver) -> AddressRule:
        host = _origin(server_url)[1]
        try:
            addresses = [host] if _is_ip(host) else \
                list(await resolve(host, _origin(server_url)[2]))
        except OSError:
            addresses = []
        loopback = bool(addresses) and all(_is_loopback(a) for a in addresses)
        return cls(server_url, resolve, loopback)

    async def check(self, url: str, what: str) -> list[str]:
        """The addresses ``url`` may be reached at, each checked (empty: the server's own
        origin, reached as configured). Raises ``OAuthRefused`` naming ``what``."""
        scheme, host, port = _origin(url)
        if (scheme, host, port) == _origin(self.server_url):
            return []
        if scheme not in ("http", "https") or not host:
            raise OAuthRefused(f"{what} {inline(url)} is not an http(s) URL")
        try:
            addresses = [host.strip("[]")] if _is_ip(host) else \
                list(await self.resolve(host, port))
        except OSError as e:
            raise OAuthRefused(f"{what} {inline(url)}: {inline(host)} could not be resolved "
                               f"({e})") from None
        if not addresses:
            raise OAuthRefused(f"{what} {inline(url)}: {inline(host)} has no address")
        for address in addresses:
            if self.loopback_ok and _is_loopback(address):
                continue
            why = blocked_address(address)
            if why is not None:
                via = "" if address == host.strip("[]") else f"{inline(host)} resolves to "
                raise OAuthRefused(f"{what} {inline(url)} points at {via}{address}, {why}; "
                                   f"an MCP server's sign-in does not reach private or "
                                   f"internal networks")
            if scheme != "https":
                raise OAuthRefused(f"{what} {inline(url)} is not https")
        return addresses


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False
    return True


def proxy_for(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy ``environ`` names for ``url`` (``HTTPS_PROXY``/``HTTP_PROXY`` by its scheme,
    ``ALL_PROXY``, either case; none for a host ``NO_PROXY`` names), or None."""
    scheme, host, port = _origin(url)
    lowered = {k.lower(): v for k, v in environ.items() if v}
    proxy = lowered.get(f"{scheme}_proxy") or lowered.get("all_proxy")
    if not proxy:
        return None
    for entry in (e.strip().lower() for e in lowered.get("no_proxy", "").split(",")):
        if not entry:
            continue
        if entry == "*":
            return None
        name, _, only_port = entry.partition(":")
        name = name.lstrip(".")
        if (host == name or host.endswith("." + name)) and \
                (not only_port or only_port == str(port)):
            return None
    return proxy


def guarded_transport(rule: AddressRule,
                      environ: Mapping[str, str] | None = None) -> httpx2.AsyncBaseTransport:
    """An httpx2 transport that sends a request only where ``rule`` allows, connected to
    the address it checked (the Host header and TLS keep the name: a second DNS answer
    cannot move it).

    An HTTP(S) proxy the environment names (``proxy_for``) is honoured the same way: the
    connection goes to the proxy (the person's own setting, as the server's URL is), and
    the proxy is asked for the address the rule checked, never for a name it would
    resolve again (so it cannot be sent where the rule refused: a private address)."""
    import httpx2

    env = os.environ if environ is None else environ

    class AddressGuard(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._direct = httpx2.AsyncHTTPTransport()
            self._proxied: dict[str, httpx2.AsyncHTTPTransport] = {}

        def _via(self, url: str) -> httpx2.AsyncBaseTransport:
            proxy = proxy_for(url, env)
            if proxy is None:
                return self._direct
            scheme = urlsplit(proxy).scheme
            if scheme not in ("http", "https"):
                raise OAuthRefused(f"the proxy {inline(proxy)} the environment names is not "
                                   f"an http(s) proxy")
            if proxy not in self._proxied:
                self._proxied[proxy] = httpx2.AsyncHTTPTransport(proxy=proxy)
            return self._proxied[proxy]

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            try:
                addresses = await rule.check(str(request.url), "a sign-in request to")
                inner = self._via(str(request.url))
            except OAuthRefused as e:
                raise httpx2.ConnectError(str(e), request=request) from e
            if addresses and not _is_ip(request.url.host):
                if request.url.scheme == "https":
                    request.extensions = {**request.extensions,
                                          "sni_hostname": request.url.host}
                request.url = request.url.copy_with(host=addresses[0])
            return await inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._direct.aclose()
            for inner in self._proxied.values():
                await inner.aclose()

    return AddressGuard()


# --- the provider ----------------------------------------------------------------------------

_QUIET = logging.NullHandler()


def _registered_port(stored: dict[str, Any]) -> int:
    client = stored.get("client")
    uris = client.get("redirect_uris") if isinstance(client, dict) else None
    for uri in uris if isinstance(uris, list) else ():
        parts = urlsplit(str(uri))
        with contextlib.suppress(ValueError):
            if parts.hostname == "127.0.0.1" and parts.port:
                return parts.port
    return 0


@contextlib.asynccontextmanager
async def oauth_client(name: str, server_url: str, oauth: OAuth, headers: dict[str, str],
                       timeout: httpx2.Timeout) -> AsyncIterator[httpx2.AsyncClient]:
    """An httpx2 client that signs in to the server at ``server_url`` (named ``name`` in
    messages) as ``oauth`` says, every request through the address rule."""
    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata
    from mcp.shared.auth_utils import resource_url_from_server_url

    class Provider(OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            # A stored token's expiry (the SDK keeps it only in memory), so one that
            # expired meanwhile is refreshed instead of sent.
            if self.context.current_tokens is not None:
                self.context.update_token_expiry(self.context.current_tokens)

    # The SDK logs a failed sign-in with its traceback; tether reports it in words. (A
    # handler of the application's own still gets the record.)
    logging.getLogger("mcp.client.auth.oauth2").addHandler(_QUIET)
    rule = await AddressRule.for_server(server_url, oauth.resolve)
    storage = TokenFile(oauth.token_dir or oauth_dir(os.environ),
                        resource_url_from_server_url(server_url))
    redirect = LoopbackRedirect()
    # The port the stored registration names, so it stays usable (and refreshable).
    await redirect.open(_registered_port(storage.read()))
    try:
        storage.redirect_uri = redirect.uri

        async def show(url: str) -> None:
            if oauth.sign_in is None:
                raise OAuthRefused(f"the server needs you to sign in: run `tether mcp login "
                                   f"{name}`")
            await rule.check(url, "the sign-in page")
            await oauth.sign_in(url)

        async def callback() -> AuthorizationCodeResult:
            return await redirect.wait(oauth.sign_in_timeout_secs)

        metadata = OAuthClientMetadata(
            client_name=oauth.client_name, redirect_uris=[redirect.uri],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            token_endpoint_auth_method="none", scope=oauth.scope)
        provider = Provider(server_url, metadata, storage, redirect_handler=show,
                            callback_handler=callback)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, auth=provider,
                                      transport=guarded_transport(rule),
                                      trust_env=False) as client:
            yield client
    finally:
        await redirect.close()
