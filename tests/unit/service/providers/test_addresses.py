"""Where a remote MCP server's metadata may send us: https, and public addresses unless allowed,
checked on the names before a URL is called and on the peer of every connection opened."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import httpx2
import pytest

from service.errors import DownstreamDiscoveryError
from service.providers.addresses import (
    PrivatePeerRefused,
    peer_checks,
    require_public_downstream_address,
    require_public_peer,
)
from tests.support.settle import wait_until

RESOLVED = {
    "public.example": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "intranet.example": ["10.0.0.5"],
    "mixed.example": ["93.184.216.34", "192.168.1.10"],
    "metadata.example": ["169.254.169.254"],
    "mapped.example": ["::ffff:127.0.0.1"],
}


async def resolve(host: str) -> list[str]:
    return RESOLVED.get(host, [])


async def check(url: str, *, allow_private: bool = False) -> None:
    await require_public_downstream_address(url, allow_private=allow_private, resolve=resolve)


async def test_public_https_urls_pass() -> None:
    await check("https://public.example/mcp")
    await check("https://93.184.216.34/token")


@pytest.mark.parametrize(
    "url",
    [
        "https://intranet.example/.well-known/oauth-protected-resource",
        "https://mixed.example/token",  # one private address is enough
        "https://metadata.example/latest/meta-data",  # a cloud metadata service
        "https://mapped.example/",
        "https://127.0.0.1:9464/metrics",
        "https://[::1]/",
        "https://[fd00::1]/",
        "https://100.64.0.1/",  # shared address space (RFC 6598)
        "https://0.0.0.0/",
        "https://unknown.example/",  # does not resolve
    ],
)
async def test_private_loopback_and_unknown_addresses_are_refused(url: str) -> None:
    with pytest.raises(DownstreamDiscoveryError, match="public addresses"):
        await check(url)


async def test_allow_private_network_lifts_the_address_rule_only() -> None:
    await check("https://intranet.example/", allow_private=True)
    await check("http://127.0.0.1:8001/mcp", allow_private=True)
    with pytest.raises(DownstreamDiscoveryError, match="not an https URL"):
        await check("http://intranet.example/", allow_private=True)


async def test_plain_http_is_refused_outside_loopback() -> None:
    for url in ("http://public.example/mcp", "ftp://public.example/", "https:///no-host"):
        with pytest.raises(DownstreamDiscoveryError, match="https"):
            await check(url)


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.5", "169.254.169.254", "::1", "::ffff:192.168.1.10", "fe80::1%eth0", ""]
)
def test_a_private_or_unknown_peer_is_refused(address: str) -> None:
    with pytest.raises(PrivatePeerRefused):
        require_public_peer(address)
    require_public_peer("93.184.216.34")
    require_public_peer("2606:2800:220:1:248:1893:25c8:1946")


class Listener:
    """A loopback TCP server that records every byte it is sent (and answers any request 200)."""

    def __init__(self) -> None:
        self.received = b""
        self.connections = 0  # accepted, read to their end and closed
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with connection:
                data = connection.recv(65536)
                self.received += data
                if data:
                    connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            self.connections += 1

    def close(self) -> None:
        self._socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


async def test_a_connection_to_a_private_peer_is_closed_before_a_byte_is_sent(listener: Listener) -> None:
    """DNS rebinding: whatever the name resolved to when it was checked, the socket's peer is
    checked once connected, before TLS or HTTP, on httpx (discovery) and httpx2 (sessions, token
    requests) alike."""
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(listener.url, extensions=peer_checks(allow_private=False))
    async with httpx2.AsyncClient() as http2:
        with pytest.raises(httpx2.ConnectError):
            await http2.get(listener.url, extensions=peer_checks(allow_private=False))
    await wait_until(lambda: listener.connections == 2, "both connections closed by the check")
    assert listener.received == b""
    # Allowed on a private network: the same requests go through.
    async with httpx.AsyncClient() as http:
        response = await http.get(listener.url, extensions=peer_checks(allow_private=True))
    assert response.status_code == 200 and listener.received.startswith(b"GET / HTTP/1.1")
