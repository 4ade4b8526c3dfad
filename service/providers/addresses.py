"""Where a remote MCP server's metadata may send this server: https to public addresses.

A downstream names the URLs this server then calls (its metadata document, its authorization
server, that server's endpoints). Without a rule, a downstream could make this server call its
own admin port, a cloud metadata service or an intranet host (server-side request forgery,
OWASP SSRF Prevention Cheat Sheet). The rule is checked twice:

- `require_public_downstream_address` on each such URL before it is first called: https, and
  every address its host resolves to then is public;
- `require_public_peer` on every connection opened to a downstream, its metadata, its
  authorization server and that server's endpoints, once its TCP handshake is done and before
  TLS or a byte of HTTP (`peer_checks`: httpcore's `trace` request extension, which reports each
  new connection's socket): the address is the socket's peer, so a name whose DNS answer changes
  after the first check (DNS rebinding) is checked where we really connect.

`allow_private_network` (a provider's setting, for development and intranets) lifts the address
part of both.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import httpx2

from service.errors import DownstreamDiscoveryError
from service.providers.catalogue import ProviderConfig
from service.urls import https_unless_loopback

# The addresses a host name resolves to (IPv4 and IPv6, as text); injectable for tests.
Resolve = Callable[[str], Awaitable[list[str]]]
# httpcore's (and httpcore2's) trace event when a new connection's TCP handshake is done; its
# `return_value` is the connected stream.
CONNECTED = "connection.connect_tcp.complete"


# Both libraries' `request` property is typed for their own Request: one exception serves both.
class PrivatePeerRefused(httpx.ConnectError, httpx2.ConnectError):  # type: ignore[misc]
    """A connection to a downstream reached a private address: closed before a byte was sent. A
    connect error of both HTTP libraries (the check runs under either), so that every caller
    handles it as the failed connection it is."""


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


def require_public_peer(address: str) -> None:
    """The peer of a connection opened for a remote MCP server is a public address (the rule of
    `require_public_downstream_address`, RFC 6890), whatever the host name resolved to when its
    URL was checked: a DNS answer that changes between the check and the connection (DNS
    rebinding) cannot steer our requests, and a user's code, token or client secret, into the
    network inside. An unknown peer is refused like a private one."""
    try:
        public = _is_public(address)
    except ValueError:
        public = False
    # mutant: gateway.public_downstream_peer
    if not public:
        raise PrivatePeerRefused(
            "a connection for a remote MCP server reached a private address; closed before sending "
            "(set allow_private_network for a downstream on a private network)"
        )


async def _check_peer(event: str, info: dict[str, Any]) -> None:
    """httpcore's `trace` callback: on a new connection, the peer its socket is connected to."""
    if event != CONNECTED:
        return
    stream = info["return_value"]
    peer = stream.get_extra_info("server_addr")
    try:
        require_public_peer(str(peer[0]) if peer else "")
    except PrivatePeerRefused:
        await stream.aclose()
        raise


def peer_checks(allow_private: bool) -> dict[str, Any]:
    """Request extensions under which every connection the request opens is checked
    (`require_public_peer`); none when `allow_private`. `trace` is httpx's and httpx2's documented
    request extension for watching a request's network steps; the libraries have no other hook
    that sees the connected socket (their transports take no network backend)."""
    return {} if allow_private else {"trace": _check_peer}


def downstream_peer_checks(provider: ProviderConfig) -> dict[str, Any]:
    """`peer_checks` for a provider's requests: a remote MCP server and its authorization server
    were named by the downstream; other providers' endpoints are the operator's own."""
    return peer_checks(provider.allow_private_network) if provider.kind == "mcp" else {}


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else "a URL without a host"
