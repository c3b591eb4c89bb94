"""Which network addresses are private or internal (``blocked_address``), and the
system's resolver: what ``fetch_url`` (``security.block_private_ips``) and an MCP server's
OAuth discovery refuse to reach, judged the same way.

A leaf: the standard library only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``async (host, port) -> addresses``: how a hostname becomes IPs (tests give a table)."""


async def system_resolve(host: str, port: int) -> list[str]:
    """The operating system's resolver (getaddrinfo), addresses in its order, deduplicated."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


# --- which addresses are refused ------------------------------------------------------------

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

_BLOCKED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "an unspecified ('this network') address"),
    (_V4("10.0.0.0/8"), "a private address (RFC 1918)"),
    (_V4("100.64.0.0/10"), "a shared carrier-grade NAT address (RFC 6598)"),
    (_V4("127.0.0.0/8"), "a loopback address"),
    (_V4("169.254.0.0/16"), "a link-local address (cloud metadata services live here)"),
    (_V4("172.16.0.0/12"), "a private address (RFC 1918)"),
    (_V4("192.0.0.0/24"), "an IETF protocol assignment address"),
    (_V4("192.0.2.0/24"), "a documentation address"),
    (_V4("192.88.99.0/24"), "a 6to4 relay anycast address"),
    (_V4("192.168.0.0/16"), "a private address (RFC 1918)"),
    (_V4("198.18.0.0/15"), "a benchmarking address"),
    (_V4("198.51.100.0/24"), "a documentation address"),
    (_V4("203.0.113.0/24"), "a documentation address"),
    (_V4("224.0.0.0/4"), "a multicast address"),
    (_V4("240.0.0.0/4"), "a reserved address"),
)
_BLOCKED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "the unspecified address"),
    (_V6("::1/128"), "a loopback address"),
    (_V6("::/96"), "a reserved (IPv4-compatible) address"),
    (_V6("::ffff:0:0/96"), "an IPv4-mapped address"),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_V6("100::/64"), "a discard-only address"),
    (_V6("2001::/23"), "an IETF protocol assignment address (Teredo and others)"),
    (_V6("2001:db8::/32"), "a documentation address"),
    (_V6("fc00::/7"), "a unique local address (ULA, private)"),
    (_V6("fe80::/10"), "a link-local address"),
    (_V6("fec0::/10"), "a site-local address"),
    (_V6("ff00::/8"), "a multicast address"),
)
_NAT64 = _V6("64:ff9b::/96")
_V4_COMPATIBLE = _V6("::/96")


def blocked_address(address: str) -> str | None:
    """Why ``address`` may not be fetched with ``block_private_ips`` on, or None when it is
    a public address. IPv6 spellings that embed an IPv4 address are judged by that address.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded, form = _embedded_v4(ip)
        if embedded is not None:
            why = blocked_address(str(embedded))
            if why is not None:
                return f"{form} of {embedded}, {why}"
            if ip in _NAT64:
                # A public IPv4 address through the well-known NAT64 prefix: how IPv6-only
                # networks (DNS64) reach every IPv4 site. The stdlib calls ::/8 reserved.
                return None
        for network, why in _BLOCKED_V6:
            if ip in network:
                return why
    else:
        for network4, why in _BLOCKED_V4:
            if ip in network4:
                return why
    # Belt and braces: whatever the stdlib knows is not globally reachable is refused too.
    if not ip.is_global or ip.is_multicast or ip.is_reserved:
        return "not a public address"
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address | None, str]:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "an IPv4-mapped form"
    if ip.sixtofour is not None:
        return ip.sixtofour, "a 6to4 form"
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "a NAT64 form"
    if ip in _V4_COMPATIBLE and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "an IPv4-compatible form"
    return None, ""


# --- which hosts are refused ------------------------------------------------------------------
