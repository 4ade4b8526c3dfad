"""Where a remote MCP server's metadata may send this server: https to public addresses.

A downstream names the URLs this server then calls (its metadata document, its authorization
server, that server's endpoints). Without a rule, a downstream could make this server call its
own admin port, a cloud metadata service or an intranet host (server-side request forgery,
OWASP SSRF Prevention Cheat Sheet). `require_public_downstream_address` checks each such URL
before it is called; `allow_private_network` (a provider's setting, for development and
intranets) lifts the address part.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import anyio

from service.errors import DownstreamDiscoveryError
from service.urls import https_unless_loopback

# The addresses a host name resolves to (IPv4 and IPv6, as text); injectable for tests.
Resolve = Callable[[str], Awaitable[list[str]]]


async def resolve_host(host: str) -> list[str]:
    """Every address `host` resolves to, through the system resolver (off the event loop)."""
    try:
        infos = await anyio.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return sorted({str(info[4][0]) for info in infos})


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index names no other host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def require_public_downstream_address(url: str, *, allow_private: bool, resolve: Resolve) -> None:
    """`url` is https (plain http only to loopback: RFC 6749 §3.1/§3.2, "MUST require the use of
    TLS"), and, unless `allow_private`, its host resolves only to global addresses (IANA
    special-purpose registries, RFC 6890): never loopback, private (RFC 1918, RFC 4193),
    link-local (RFC 3927: cloud metadata services), shared (RFC 6598) or reserved. A host that does
    not resolve is refused too. The check is at discovery, before each URL is first called."""
    if not https_unless_loopback(url):
        raise DownstreamDiscoveryError(f"{_where(url)} is not an https URL")
    if allow_private:
        return
    host = urlsplit(url).hostname or ""
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        addresses = await resolve(host)
    # mutant: gateway.public_downstream_address
    if not addresses or not all(_is_public(address) for address in addresses):
        raise DownstreamDiscoveryError(
            f"{_where(url)} does not resolve to public addresses only "
            "(set allow_private_network for a downstream on a private network)"
        )


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else "a URL without a host"
