"""ProviderSession sends the user's token only to the provider's own API (DESIGN invariant 6)."""

from __future__ import annotations

import httpx
import pytest

from service.errors import ProviderApiError
from service.flow.lifecycle import TokenLifecycle
from service.mcp.provider_session import ProviderSession
from service.providers.catalogue import build_provider
from service.providers.outbound_http import OutboundHttp
from token_store import Connection, ConnectionKey, TokenSet, UserRef


def session(seen: list[httpx.Request]) -> ProviderSession:
    provider = build_provider(
        "github", {"preset": "github", "client_id": "c"}, {"MCPUC_PROVIDER_GITHUB_CLIENT_SECRET": "s"}
    )
    connection = Connection(
        ConnectionKey(UserRef("https://as", "alice"), "github", "1"), TokenSet("gho_secret"), "a", 1, 1
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"login": "octocat"})

    async def reconnect() -> Connection:
        raise AssertionError("not expected")

    return ProviderSession(
        connection,
        provider,
        TokenLifecycle(lambda: None, OutboundHttp(1.0), timeout_seconds=1),  # type: ignore[arg-type,return-value]
        httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        tool="test",
        reconnect=reconnect,
    )


async def test_paths_go_to_the_api_base_with_the_token() -> None:
    seen: list[httpx.Request] = []
    assert await session(seen).get_json("/user") == {"login": "octocat"}
    assert str(seen[0].url) == "https://api.github.com/user"
    assert seen[0].headers["authorization"] == "Bearer gho_secret"


@pytest.mark.parametrize(
    "url",
    ["https://evil.example/user", "http://api.github.com/user", "https://api.github.com.evil.example/x"],
)
async def test_the_token_never_goes_to_another_host(url: str) -> None:
    seen: list[httpx.Request] = []
    with pytest.raises(ProviderApiError, match="another host"):
        await session(seen).get_json(url)
    assert seen == []
