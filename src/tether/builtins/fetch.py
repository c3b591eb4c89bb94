"""``fetch_url``: one HTTP(S) GET to the open world, under the network rules of
``SecurityConfig``.

What it enforces, in order, before anything is sent:

1. http and https only;
2. ``blocked_domains``, then ``allowed_domains`` (suffix match on whole labels:
   ``example.com`` covers ``docs.example.com``, never ``notexample.com``);
3. the host is resolved once, and with ``block_private_ips`` every address it resolves to
   must be public (loopback, RFC 1918, link-local, CGNAT, ULA, unspecified, multicast,
   reserved, and the IPv4-mapped/compatible, 6to4 and NAT64 spellings of those are refused);
4. the connection goes to the address that was checked (the URL is rebuilt with the IP;
   the Host header and TLS SNI/certificate check keep the hostname), so a second DNS
   answer cannot redirect it (DNS rebinding).

Redirects are returned to the model as a result naming the Location, never followed; the
model may fetch that URL, which is checked like any other. Time and body size are bounded.
``make_fetch_url`` builds the tool with another resolver or transport (tests, proxies).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urljoin, urlsplit, urlunsplit

from tether.network import Resolver, blocked_address, system_resolve
from tether.tools.function import tool
from tether.tools.tool import Tool, ToolContext, ToolOutput
from tether.trust import Capabilities, SecurityConfig

from .html_text import html_to_text

if TYPE_CHECKING:
    import httpx

FETCH_CAPABILITIES = Capabilities(untrusted_input=True, external_send=True)

@dataclass(frozen=True, slots=True)
class FetchLimits:
    """Bounds of one fetch: the whole exchange (resolution included) within
    ``timeout_secs``; at most ``max_bytes`` of (decompressed) body are read."""

    timeout_secs: float = 20.0
    max_bytes: int = 2_000_000
    user_agent: str = "tether-fetch/0.1 (+https://github.com/tether)"


def _normalize_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _matches(host: str, domain: str) -> bool:
    d = _normalize_host(domain.lstrip("."))
    return bool(d) and (host == d or host.endswith("." + d))


def domain_refusal(host: str, security: SecurityConfig) -> str | None:
    """Why ``host`` is refused by the domain lists (blocked first, then allowed), or None."""
    for domain in security.blocked_domains:
        if _matches(host, domain):
            return f"{host} is in security.blocked_domains ({domain})"
    if security.allowed_domains and not any(_matches(host, d) for d in
                                            security.allowed_domains):
        return (f"{host} is not in security.allowed_domains "
                f"({', '.join(security.allowed_domains)})")
    return None


# --- the tool ---------------------------------------------------------------------------------


class _Refused(Exception):
    """A fetch refused before anything was sent; the message is for the model."""


@dataclass(frozen=True, slots=True)
class _Target:
    url: str  # as the model gave it
    parts: SplitResult
    host: str  # normalized hostname (or IP literal without brackets)
    port: int
    host_header: str
    is_ip_literal: bool


def _parse(url: str, security: SecurityConfig) -> _Target:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        shown = f"{parts.scheme}:" if parts.scheme else "no scheme"
        raise _Refused(f"only http and https URLs can be fetched, not {shown}")
    if not parts.hostname:
        raise _Refused("the URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise _Refused("the URL's port is not a number from 0 to 65535") from None
    try:
        ipaddress.ip_address(parts.hostname.split("%")[0])
        is_ip, host = True, parts.hostname
    except ValueError:
        is_ip, host = False, _normalize_host(parts.hostname)
    if not host:
        raise _Refused("the URL has no host")
    why = domain_refusal(host, security)
    if why is not None:
        raise _Refused(why)
    bracketed = f"[{host}]" if ":" in host else host
    header = bracketed if parts.port is None else f"{bracketed}:{port}"
    return _Target(url.strip(), parts, host, port, header, is_ip)


async def _addresses(target: _Target, security: SecurityConfig,
                     resolve: Resolver) -> Sequence[str]:
    """The addresses to connect to, in order, every one of them checked."""
    if target.is_ip_literal:
        addresses: Sequence[str] = [target.host]
    else:
        try:
            addresses = list(await resolve(target.host, target.port))
        except OSError as e:
            raise _Refused(f"{target.host} could not be resolved ({e})") from None
        if not addresses:
            raise _Refused(f"{target.host} did not resolve to any address")
    if security.block_private_ips:
        for address in addresses:
            why = blocked_address(address)
            if why is not None:
                via = "" if target.is_ip_literal else f"{target.host} resolves to {address}, "
                raise _Refused(
                    f"{via}{address} is {why}; fetch_url does not reach private or "
                    f"internal networks (security.block_private_ips)")
    return addresses


def _pinned_url(target: _Target, address: str) -> str:
    host = address.replace("%", "%25")  # an IPv6 zone id, escaped as RFC 6874 asks
    netloc = f"[{host}]:{target.port}" if ":" in address else f"{host}:{target.port}"
    p = target.parts
    return urlunsplit((p.scheme, netloc, p.path or "/", p.query, ""))


def make_fetch_url(
    *,
    resolve: Resolver = system_resolve,
    limits: FetchLimits | None = None,
    transport: Callable[[], httpx.AsyncBaseTransport] | None = None,
) -> Tool:
    """A ``fetch_url`` tool with its own resolver, bounds, or HTTP transport factory.

    The network rules come from the running agent's ``SecurityConfig`` (``ToolContext``),
    never from here: nothing passed to this factory can turn a security check off.
    """
    bounds = limits or FetchLimits()

    async def fetch_url(ctx: ToolContext, url: str) -> ToolOutput:
        """Fetch a web page or file over http(s) (GET) and return its readable text.
        Redirects are reported with their target, not followed.

        Args:
            url: the absolute http:// or https:// URL to fetch.
        """
        try:
            async with asyncio.timeout(bounds.timeout_secs):
                return await _fetch(url, ctx.security, resolve, bounds, transport)
        except _Refused as e:
            return ToolOutput(f"Error: fetch_url refused {url}: {e}. Nothing was sent.",
                              is_error=True, from_outside=False)
        except TimeoutError:
            return ToolOutput(f"Error: {url} did not answer within {bounds.timeout_secs:g}s.",
                              is_error=True, from_outside=False)

    # The URL is where the request goes and what it carries (a query string is data out): a
    # destination, traced whole.
    return tool(name="fetch_url", capabilities=FETCH_CAPABILITIES,
                destination_params=["url"])(fetch_url)


async def _fetch(url: str, security: SecurityConfig, resolve: Resolver, limits: FetchLimits,
                 transport: Callable[[], httpx.AsyncBaseTransport] | None) -> ToolOutput:
    import httpx

    target = _parse(url, security)
    addresses = await _addresses(target, security, resolve)
    extensions: dict[str, Any] = {}
    if target.parts.scheme == "https" and not target.is_ip_literal:
        # Connect to the checked IP, but speak TLS to the hostname: SNI and the certificate
        # check use it, so pinning costs no verification.
        extensions["sni_hostname"] = target.host
    headers = {"Host": target.host_header, "User-Agent": limits.user_agent,
               "Accept": "text/html,application/xhtml+xml,text/plain,application/json;q=0.9,"
                         "*/*;q=0.5"}
    # trust_env=False: an HTTP(S)_PROXY from the environment would decide where the request
    # goes, after the address check.
    client = httpx.AsyncClient(transport=transport() if transport else None,
                               follow_redirects=False, trust_env=False,
                               timeout=httpx.Timeout(limits.timeout_secs))
    try:
        response: httpx.Response | None = None
        for address in addresses:  # each was checked; try the next when one is unreachable
            request = client.build_request("GET", _pinned_url(target, address),
                                           headers=headers, extensions=extensions)
            try:
                response = await client.send(request, stream=True)
                break
            except httpx.ConnectError as e:
                failure: Exception = e
            except httpx.TimeoutException as e:
                return ToolOutput(f"Error: could not fetch {url}: {type(e).__name__}: {e}",
                                  is_error=True, from_outside=False)
            except httpx.HTTPError as e:  # the server answered something that is not HTTP
                return ToolOutput(f"Error: could not fetch {url}: {type(e).__name__}: {e}",
                                  is_error=True, from_outside=True)
        if response is None:
            return ToolOutput(f"Error: could not connect to {url}: {failure}",
                              is_error=True, from_outside=False)
        try:
            return await _read(url, response, limits)
        finally:
            await response.aclose()
    finally:
        await client.aclose()


_REDIRECTS = frozenset({301, 302, 303, 307, 308})


async def _read(url: str, response: httpx.Response, limits: FetchLimits) -> ToolOutput:
    import httpx

    status = response.status_code
    location = response.headers.get("location")
    if status in _REDIRECTS and location:
        absolute = urljoin(url, location)
        return ToolOutput(
            f"{url} answered {status} {response.reason_phrase}: a redirect to {absolute}\n"
            f"The redirect was not followed. To fetch the target, call fetch_url with that "
            f"URL; it is checked like any other.", from_outside=True)
    body = bytearray()
    cut = False
    try:
        async for chunk in response.aiter_bytes():
            room = limits.max_bytes - len(body)
            if len(chunk) > room:
                body += chunk[:room]
                cut = True
                break
            body += chunk
    except httpx.HTTPError as e:
        return ToolOutput(f"Error: reading {url} failed: {type(e).__name__}: {e}",
                          is_error=True, from_outside=True)
    ctype = response.headers.get("content-type", "")
    text = _body_text(bytes(body), ctype, response.charset_encoding)
    head = f"URL: {url}\nStatus: {status} {response.reason_phrase}\n" \
           f"Content-Type: {ctype or 'unknown'}\n\n"
    if cut:
        text += f"\n[... body cut at {limits.max_bytes} bytes]"
    return ToolOutput(head + text, is_error=status >= 400, from_outside=True)


def _body_text(body: bytes, content_type: str, charset: str | None) -> str:
    mime = content_type.split(";")[0].strip().lower()
    textual = (not mime or mime.startswith("text/") or mime.endswith(("+json", "+xml"))
               or mime in ("application/json", "application/xml", "application/javascript",
                           "application/xhtml+xml"))
    if not textual or b"\x00" in body[:8192]:
        return f"({len(body)} bytes of {mime or 'binary data'}; not shown as text)"
    try:
        text = body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = body.decode("utf-8", errors="replace")
    if mime in ("text/html", "application/xhtml+xml") or (not mime and "<html" in text[:512]
                                                           .lower()):
        return html_to_text(text)
    return text


fetch_url: Tool = make_fetch_url()
