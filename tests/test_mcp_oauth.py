"""Remote OAuth 2.1 for MCP servers, against a real authorization server on loopback (the
SDK's own server-side auth: tests/mcp_servers/signin.py). The test plays the browser: it
follows the sign-in URL tether shows with httpx, as a person's browser would, to the
loopback redirect tether listens on."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether.mcp import McpServer
from tether.mcp.oauth import AddressRule, OAuth, OAuthRefused, TokenFile

SIGNIN = str(Path(__file__).parent / "mcp_servers" / "signin.py")


@contextlib.contextmanager
def signin_server() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, SIGNIN], stdout=subprocess.PIPE,
                            text=True, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def signin_url() -> Iterator[str]:
    """One server for the module's tests that sign in as it is (a client each)."""
    with signin_server() as url:
        yield url


class Browser:
    """Follows the sign-in URLs it is shown to the redirect, as a person's browser does."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.landed: list[httpx.Response] = []

    async def __call__(self, url: str) -> None:
        self.shown.append(url)
        async with httpx.AsyncClient() as browser:
            authorize = await browser.get(url)
            assert authorize.status_code in (302, 303, 307), authorize.text
            self.landed.append(await browser.get(authorize.headers["location"]))


def table(entries: dict[str, Sequence[str]]):
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host in entries:
            return entries[host]
        raise OSError(f"{host} is not in the test's table")
    return resolve


async def whoami(server: McpServer) -> str:
    notices = await server.start()
    try:
        assert server.error is None, notices
        output = await server.call("whoami", {})
        return output.content
    finally:
        await server.aclose()


async def test_the_whole_flow_signs_in_once_keeps_the_tokens_0600_and_refreshes_them(
        tmp_path: Path, signin_url: str) -> None:
    tmp_path = tmp_path / "oauth"  # a folder tether makes
    browser = Browser()
    with contextlib.nullcontext(signin_url) as url:
        server = McpServer.http("s", url, oauth=OAuth(token_dir=tmp_path, sign_in=browser))
        assert "signed in; issued 1, refreshed 0" in await whoami(server)
        [shown] = browser.shown
        query = httpx.URL(shown).params
        assert query["code_challenge_method"] == "S256" and query["code_challenge"]
        assert query["resource"] == url  # the token is bound to this server (RFC 8707)
        assert query["redirect_uri"].startswith("http://127.0.0.1:")
        assert browser.landed[0].status_code == 200
        [token_file] = list(tmp_path.iterdir())
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700
        stored = json.loads(token_file.read_text())
        assert stored["resource"] == url and stored["tokens"]["access_token"]
        assert stored["issuer"] == url.removesuffix("/mcp")

        # Started again: the stored token, no sign-in.
        again = McpServer.http("s", url, oauth=OAuth(token_dir=tmp_path))
        assert "issued 1, refreshed 0" in await whoami(again)

        # The token expired meanwhile: refreshed, no person needed.
        stored["expires_at"] = 0
        TokenFile(tmp_path, url).write(stored)
        refreshed = McpServer.http("s", url, oauth=OAuth(token_dir=tmp_path))
        assert "issued 1, refreshed 1" in await whoami(refreshed)
        assert len(browser.shown) == 1


async def test_without_a_person_a_server_that_needs_signing_in_does_not_start(
        tmp_path: Path, signin_url: str) -> None:
    with contextlib.nullcontext(signin_url) as url:
        server = McpServer.http("s", url, oauth=OAuth(token_dir=tmp_path))
        notices = await server.start()
        await server.aclose()
    assert server.error is not None and "tether mcp login s" in server.error, notices


async def test_a_token_file_others_can_read_is_refused_and_not_sent(
        tmp_path: Path, signin_url: str) -> None:
    browser = Browser()
    with contextlib.nullcontext(signin_url) as url:
        server = McpServer.http("s", url, oauth=OAuth(token_dir=tmp_path, sign_in=browser))
        await whoami(server)
        [token_file] = list(tmp_path.iterdir())
        os.chmod(token_file, 0o644)
        again = McpServer.http("s", url, oauth=OAuth(token_dir=tmp_path, sign_in=browser))
        await again.start()
        await again.aclose()
    assert again.error is not None and "can be read or written by others (mode 0644)" in \
        again.error
    assert len(browser.shown) == 1  # no sign-in was started over it either


@pytest.mark.parametrize(("issuer", "names"), [
    ("https://169.254.169.254", "a link-local address"),
    ("https://10.1.2.3", "a private address"),
    ("https://login.example.test", "login.example.test resolves to 192.168.7.7"),
    ("https://[::ffff:192.168.0.1]", "an IPv4-mapped form of 192.168.0.1"),
])
async def test_discovery_that_points_at_a_private_address_is_refused(
        tmp_path: Path, issuer: str, names: str) -> None:
    from tests.servers.http import Canned, LoopbackServer, Recorded

    with LoopbackServer() as hostile:
        def answer(request: Recorded) -> Canned:
            if request.path.startswith("/.well-known/oauth-protected-resource"):
                return Canned.json({"resource": f"{hostile.url}/mcp",
                                    "authorization_servers": [issuer]})
            return Canned(401, b"", {"www-authenticate": "Bearer"})

        hostile.queue(*[answer] * 10)
        browser = Browser()
        resolve = table({"127.0.0.1": ["127.0.0.1"], "login.example.test": ["192.168.7.7"]})
        server = McpServer.http("s", f"{hostile.url}/mcp", oauth=OAuth(
            token_dir=tmp_path, sign_in=browser, resolve=resolve))
        await server.start()
        await server.aclose()
    assert server.error is not None and names in server.error, server.error
    assert browser.shown == [] and list(tmp_path.iterdir()) == []


async def test_the_address_rule_exempts_the_server_and_loopback_only_beside_loopback() -> None:
    resolve = table({"mcp.example.test": ["93.184.216.34"], "localhost": ["127.0.0.1"],
                     "auth.example.test": ["93.184.216.35"], "inner.example.test": ["10.0.0.1"],
                     "127.0.0.1": ["127.0.0.1"]})
    remote = await AddressRule.for_server("https://mcp.example.test/mcp", resolve)
    assert await remote.check("https://mcp.example.test/.well-known/x", "discovery") == []
    assert await remote.check("https://auth.example.test/token", "t") == ["93.184.216.35"]
    for refused in ("http://localhost:8080/token", "https://inner.example.test/",
                    "http://auth.example.test/token", "https://[::1]/", "file:///etc/passwd",
                    "https://[::ffff:10.0.0.1]/"):
        with pytest.raises(OAuthRefused):
            await remote.check(refused, "a request to")
    local = await AddressRule.for_server("http://127.0.0.1:9000/mcp", resolve)
    assert await local.check("http://localhost:8080/token", "t") == ["127.0.0.1"]
    with pytest.raises(OAuthRefused, match="a private address"):
        await local.check("https://inner.example.test/", "a request to")


async def test_the_redirect_listener_takes_only_its_own_callback(tmp_path: Path) -> None:
    from tether.mcp.oauth import LoopbackRedirect

    redirect = LoopbackRedirect()
    await redirect.open()
    try:
        async with httpx.AsyncClient() as browser:
            base = redirect.uri.removesuffix("/callback")
            assert (await browser.get(f"{base}/elsewhere?code=x")).status_code == 404
            assert (await browser.get(f"{base}/callback?nothing=1")).status_code == 404
            assert (await browser.get(f"{redirect.uri}?code=c1&state=s1")).status_code == 200
            assert (await browser.get(f"{redirect.uri}?code=c2&state=s2")).status_code == 404
        result = await redirect.wait(5)
    finally:
        await redirect.close()
    assert (result.code, result.state) == ("c1", "s1")


# --- the command line -----------------------------------------------------------------------

def test_tether_mcp_login_prints_the_url_waits_for_the_redirect_and_logout_forgets(
        tmp_path: Path, signin_url: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
           "TETHER_CONFIG": os.devnull, "XDG_DATA_HOME": str(tmp_path / "data")}
    tether = [sys.executable, "-m", "tether.cli", "-w", str(ws), "mcp"]
    with contextlib.nullcontext(signin_url) as url:
        (ws / "tether.toml").write_text(
            f'[[mcp]]\nname = "s"\nurl = "{url}"\nauth = "oauth"\n')
        login = subprocess.Popen([*tether, "login", "s"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env)
        assert login.stderr is not None
        said = [login.stderr.readline(), login.stderr.readline()]
        assert "MCP server s needs you to sign in" in said[0]
        shown = said[1].strip()
        assert shown.startswith("http://127.0.0.1:") and "code_challenge=" in shown
        with httpx.Client() as browser:  # the person opens it
            redirect = browser.get(shown).headers["location"]
            assert browser.get(redirect).status_code == 200
        _, rest = login.communicate(timeout=60)
        assert login.returncode == 0, rest
        assert "signed in to s" in rest
        assert len(list((tmp_path / "data" / "tether" / "oauth").iterdir())) == 1
        logout = subprocess.run([*tether, "logout", "s"], capture_output=True, text=True,
                                env=env, timeout=60)
    assert logout.returncode == 0 and "its tokens and registration were removed" in \
        logout.stderr
    assert list((tmp_path / "data" / "tether" / "oauth").iterdir()) == []


# --- hostile servers -------------------------------------------------------------------------

async def test_a_discovery_redirect_to_another_host_is_not_followed(tmp_path: Path) -> None:
    from tests.servers.http import Canned, LoopbackServer, Recorded

    with LoopbackServer() as hostile, LoopbackServer() as elsewhere:
        def answer(request: Recorded) -> Canned:
            if request.path.startswith("/mcp"):
                return Canned(401, b"", {"www-authenticate":
                                         f'Bearer resource_metadata="{hostile.url}/prm"'})
            if request.path == "/prm":  # metadata "moved" to another origin
                return Canned(302, b"", {"location": f"{elsewhere.url}/prm"})
            return Canned(404, b"")

        hostile.queue(*[answer] * 30)
        browser = Browser()
        server = McpServer.http("s", f"{hostile.url}/mcp",
                                oauth=OAuth(token_dir=tmp_path, sign_in=browser))
        await server.start()
        await server.aclose()
    assert server.error is not None
    assert elsewhere.requests == [] and browser.shown == []
    assert list(tmp_path.iterdir()) == []


class Forger(Browser):
    """Answers the sign-in with a code of its own: the redirect tether listens for, hit
    with what an attacker's page would send it."""

    async def __call__(self, url: str) -> None:
        self.shown.append(url)
        redirect = httpx.URL(url).params["redirect_uri"]
        async with httpx.AsyncClient() as browser:
            self.landed.append(await browser.get(redirect, params={"code": "forged",
                                                                   "state": "guessed"}))


async def test_a_redirect_that_does_not_carry_the_sign_ins_state_is_refused(
        tmp_path: Path, signin_url: str) -> None:
    server = McpServer.http("s", signin_url, oauth=OAuth(token_dir=tmp_path, sign_in=Forger()))
    await server.start()
    await server.aclose()
    assert server.error is not None and "State parameter mismatch" in server.error
    stored = [json.loads(p.read_text()) for p in tmp_path.iterdir()]
    assert all("tokens" not in s for s in stored)


async def test_a_challenge_naming_metadata_at_a_private_address_is_refused(
        tmp_path: Path) -> None:
    from tests.servers.http import Canned, LoopbackServer

    with LoopbackServer() as hostile:
        hostile.queue(*[Canned(401, b"", {"www-authenticate":
                                          'Bearer resource_metadata="https://10.0.0.9/prm"'})]
                      * 5)
        server = McpServer.http("s", f"{hostile.url}/mcp", oauth=OAuth(token_dir=tmp_path))
        await server.start()
        await server.aclose()
    assert server.error is not None
    assert "https://10.0.0.9/prm points at 10.0.0.9, a private address" in server.error


def test_a_token_file_that_is_a_link_or_not_this_servers_is_refused(tmp_path: Path) -> None:
    import asyncio

    mine = TokenFile(tmp_path / "t", "https://a.example/mcp")
    mine.write({"tokens": {"access_token": "x", "token_type": "Bearer"}})
    assert asyncio.run(mine.get_tokens()) is not None
    other = TokenFile(tmp_path / "t", "https://b.example/mcp")
    other.path.symlink_to(mine.path)
    with pytest.raises(OAuthRefused):
        asyncio.run(other.get_tokens())
    other.path.unlink()
    other.path.write_bytes(mine.path.read_bytes())  # a copy: another server's tokens
    os.chmod(other.path, 0o600)
    with pytest.raises(OAuthRefused, match="is not this server's"):
        asyncio.run(other.get_tokens())


@pytest.mark.parametrize("endpoint", ["https://10.0.0.8/authorize",
                                      "http://login.example.test/authorize"])
async def test_a_sign_in_page_at_a_private_address_or_over_http_is_never_shown(
        tmp_path: Path, endpoint: str) -> None:
    from tests.servers.http import Canned, LoopbackServer, Recorded

    with LoopbackServer() as hostile:
        def answer(request: Recorded) -> Canned:
            if request.path.startswith("/.well-known/oauth-protected-resource"):
                return Canned.json({"resource": f"{hostile.url}/mcp",
                                    "authorization_servers": [hostile.url]})
            if request.path.startswith("/.well-known/oauth-authorization-server"):
                return Canned.json({
                    "issuer": hostile.url, "authorization_endpoint": endpoint,
                    "token_endpoint": f"{hostile.url}/token",
                    "registration_endpoint": f"{hostile.url}/register",
                    "code_challenge_methods_supported": ["S256"]})
            if request.path == "/register":
                return Canned.json({**request.body, "client_id": "c1"}, 201)
            return Canned(401, b"", {"www-authenticate": "Bearer"})

        hostile.queue(*[answer] * 10)
        browser = Browser()
        server = McpServer.http("s", f"{hostile.url}/mcp", oauth=OAuth(
            token_dir=tmp_path, sign_in=browser,
            resolve=table({"127.0.0.1": ["127.0.0.1"], "login.example.test": ["93.184.216.34"]})))
        await server.start()
        await server.aclose()
    assert server.error is not None and "the sign-in page" in server.error, server.error
    assert browser.shown == []


def test_auth_oauth_is_for_url_servers_and_builds_an_oauth_server() -> None:
    from pydantic import ValidationError

    from tether.config import McpSection, servers_from_config

    [server] = servers_from_config([McpSection(name="t", url="https://x.example/mcp",
                                               auth="oauth", scope="read")])
    assert server.transport.oauth == OAuth(scope="read")  # type: ignore[union-attr]
    assert server.transport.describe() == "http: https://x.example/mcp, oauth"
    wrongs: tuple[dict[str, Any], ...] = (
        {"command": "x", "auth": "oauth"}, {"url": "https://x/mcp", "scope": "r"},
        {"url": "https://x/mcp", "auth": "basic"})
    for wrong in wrongs:
        with pytest.raises(ValidationError):
            McpSection(name="t", **wrong)


async def test_a_neighbour_on_loopback_is_reached_at_the_address_checked_under_its_name(
        tmp_path: Path) -> None:
    from tests.servers.http import Canned, LoopbackServer, Recorded

    with LoopbackServer() as server_side:
        port = server_side.url.rsplit(":", 1)[1]
        issuer = f"http://neighbour.test:{port}"

        def answer(request: Recorded) -> Canned:
            if request.path.startswith("/.well-known/oauth-protected-resource"):
                return Canned.json({"resource": f"{server_side.url}/mcp",
                                    "authorization_servers": [issuer]})
            if request.path.startswith("/.well-known/"):
                return Canned(404, b"")
            return Canned(401, b"", {"www-authenticate": "Bearer"})

        server_side.queue(*[answer] * 10)
        server = McpServer.http("s", f"{server_side.url}/mcp", oauth=OAuth(
            token_dir=tmp_path, resolve=table({"127.0.0.1": ["127.0.0.1"],
                                               "neighbour.test": ["127.0.0.1"]})))
        await server.start()
        await server.aclose()
    # neighbour.test is no name the system resolves: it was reached at the address the
    # rule checked, and asked for under its own name.
    asked = [r for r in server_side.requests
             if r.path.startswith("/.well-known/oauth-authorization-server")]
    assert asked and asked[0].headers["host"] == f"neighbour.test:{port}"
    assert server.error is not None


# --- an HTTP(S) proxy from the environment --------------------------------------------------


class ForwardProxy:
    """A forward HTTP proxy on loopback (one request per connection, as ``Connection:
    close`` makes it): records the target each request asked it for, and its Host."""

    def __init__(self) -> None:
        import socketserver

        self.asked: list[tuple[str, str]] = []
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                import socket
                from urllib.parse import urlsplit

                head = self.rfile.readline().decode("latin-1")
                method, target, version = head.split()
                lines: list[str] = []
                while (line := self.rfile.readline().decode("latin-1")) not in ("\r\n", ""):
                    lines.append(line)
                headers = {k.strip().lower(): v.strip() for k, v in
                           (line.split(":", 1) for line in lines)}
                outer.asked.append((target, headers.get("host", "")))
                body = self.rfile.read(int(headers.get("content-length", "0") or 0))
                parts = urlsplit(target)
                kept = [line for line in lines if not line.lower().startswith(
                    ("connection:", "proxy-"))]
                with socket.create_connection((parts.hostname, parts.port or 80)) as up:
                    path = parts.path + (f"?{parts.query}" if parts.query else "")
                    up.sendall((f"{method} {path} {version}\r\n{''.join(kept)}"
                                f"Connection: close\r\n\r\n").encode("latin-1") + body)
                    reply = b""
                    while chunk := up.recv(65536):
                        reply += chunk
                status, _, rest = reply.partition(b"\r\n")
                self.wfile.write(status + b"\r\nConnection: close\r\n" + rest)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ForwardProxy:
        import threading

        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("where", ["neighbour", "private"])
async def test_a_proxy_from_the_environment_is_asked_only_for_the_address_the_rule_checked(
        tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The proxy is where the connection goes; what it is asked for is the address the rule
    # checked (never a name it would resolve again), and a request the rule refuses never
    # reaches it.
    from tests.servers.http import Canned, LoopbackServer, Recorded

    with LoopbackServer() as server_side, ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        port = server_side.url.rsplit(":", 1)[1]
        issuer = f"http://{where}.test:{port}"

        def answer(request: Recorded) -> Canned:
            if request.path.startswith("/.well-known/oauth-protected-resource"):
                return Canned.json({"resource": f"{server_side.url}/mcp",
                                    "authorization_servers": [issuer]})
            if request.path.startswith("/.well-known/"):
                return Canned(404, b"")
            return Canned(401, b"", {"www-authenticate": "Bearer"})

        server_side.queue(*[answer] * 10)
        server = McpServer.http("s", f"{server_side.url}/mcp", oauth=OAuth(
            token_dir=tmp_path, resolve=table({"127.0.0.1": ["127.0.0.1"],
                                               "neighbour.test": ["127.0.0.1"],
                                               "private.test": ["10.1.2.3"]})))
        await server.start()
        await server.aclose()
    assert server.error is not None
    # The server's own origin went through the proxy too.
    assert any(target.startswith(f"{server_side.url}/mcp") for target, _ in proxy.asked)
    metadata = [(t, h) for t, h in proxy.asked if "oauth-authorization-server" in t]
    if where == "neighbour":
        assert metadata and all(t.startswith(f"http://127.0.0.1:{port}/") and
                                h == f"neighbour.test:{port}" for t, h in metadata)
    else:
        assert metadata == [] and "10.1.2.3" in server.error, server.error
        assert not any("private.test" in t or "10.1.2.3" in t for t, _ in proxy.asked)


def test_the_proxy_for_a_url_follows_the_environment_and_no_proxy() -> None:
    from tether.mcp.oauth import proxy_for

    env = {"HTTPS_PROXY": "http://proxy.corp:3128", "http_proxy": "http://plain:8080",
           "NO_PROXY": "internal.example, .corp.test,auth.example:8443"}
    assert proxy_for("https://auth.example.com/token", env) == "http://proxy.corp:3128"
    assert proxy_for("http://auth.example.com/", env) == "http://plain:8080"
    assert proxy_for("https://internal.example/x", env) is None
    assert proxy_for("https://login.corp.test/x", env) is None
    assert proxy_for("https://auth.example:8443/x", env) is None
    assert proxy_for("https://auth.example/x", env) == "http://proxy.corp:3128"
    assert proxy_for("https://auth.example.com/", {}) is None
    assert proxy_for("https://a.example/", {"ALL_PROXY": "http://all:1", "NO_PROXY": "*"}) \
        is None
