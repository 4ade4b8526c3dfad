"""Where a remote MCP server's metadata may send us: https, and public addresses unless allowed."""

from __future__ import annotations

import pytest

from service.errors import DownstreamDiscoveryError
from service.providers.addresses import require_public_downstream_address

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
