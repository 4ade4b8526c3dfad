"""A remote MCP server's challenge and protected-resource metadata (RFC 9728, RFC 6750 §3)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.errors import DownstreamDiscoveryError
from service.providers.protected_resource import (
    Challenge,
    bearer_challenge,
    bearer_params,
    discover_protected_resource,
    metadata_candidates,
    probe,
    require_metadata_for_resource,
    require_metadata_on_resource_origin,
)

URL = "https://mcp.example/v1/mcp"
PATH_PRM = "https://mcp.example/.well-known/oauth-protected-resource/v1/mcp"
ROOT_PRM = "https://mcp.example/.well-known/oauth-protected-resource"


async def public(host: str) -> list[str]:
    return ["93.184.216.34"]


def serving(documents: dict[str, tuple[int, Any]], asked: list[str] | None = None) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if asked is not None:
            asked.append(str(request.url))
        status, body = documents.get(str(request.url), (404, {}))
        return httpx.Response(status, json=body)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def test_the_bearer_challenge_is_read_among_others() -> None:
    header = (
        'Basic realm="old", Bearer error="insufficient_scope", scope="files:read files:write", '
        'resource_metadata="https://mcp.example/.well-known/oauth-protected-resource", '
        'error_description="needs \\"write\\""'
    )
    params = bearer_params(header)
    assert params["error"] == "insufficient_scope"
    assert params["error_description"] == 'needs "write"'
    challenge = bearer_challenge(403, header)
    assert challenge.scope == ("files:read", "files:write")
    assert challenge.resource_metadata == ROOT_PRM
    assert bearer_params("bearer resource_metadata=https://x.example/prm, scope=read") == {
        "resource_metadata": "https://x.example/prm",
        "scope": "read",
    }
    assert bearer_params('Basic realm="x"') == {}
    assert bearer_challenge(401, None) == Challenge(status=401)


def test_metadata_is_looked_for_where_the_challenge_says_then_at_the_well_known_urls() -> None:
    named = Challenge(401, resource_metadata="https://mcp.example/custom.json")
    assert metadata_candidates(URL, named) == [
        ("https://mcp.example/custom.json", URL),
        (PATH_PRM, URL),
        (ROOT_PRM, "https://mcp.example"),
    ]
    assert metadata_candidates("https://mcp.example", Challenge(401)) == [(ROOT_PRM, "https://mcp.example")]


def test_metadata_named_on_another_origin_is_refused() -> None:
    require_metadata_on_resource_origin("https://mcp.example/custom.json", URL)
    for elsewhere in ("https://evil.example/prm", "http://mcp.example/prm", "https://mcp.example:8443/prm"):
        with pytest.raises(DownstreamDiscoveryError, match="another origin"):
            require_metadata_on_resource_origin(elsewhere, URL)


def test_metadata_for_another_resource_is_refused() -> None:
    assert require_metadata_for_resource({"resource": URL}, URL) == URL
    for other in ("https://mcp.example/other", f"{URL}/", "HTTPS://mcp.example/v1/mcp", None):
        with pytest.raises(DownstreamDiscoveryError, match="another resource"):
            require_metadata_for_resource({"resource": other}, URL)


async def test_discovery_follows_the_challenge_and_checks_the_resource() -> None:
    asked: list[str] = []
    document = {
        "resource": URL,
        "authorization_servers": ["https://as.example"],
        "scopes_supported": ["read"],
    }
    http = serving({"https://mcp.example/custom.json": (200, document)}, asked)
    found = await discover_protected_resource(
        http,
        URL,
        Challenge(401, resource_metadata="https://mcp.example/custom.json"),
        allow_private=False,
        resolve=public,
    )
    assert (found.resource, found.authorization_servers, found.scopes_supported) == (
        URL,
        ("https://as.example",),
        ("read",),
    )
    assert asked == ["https://mcp.example/custom.json"]


async def test_discovery_falls_back_to_the_root_document_for_the_origin() -> None:
    root = {"resource": "https://mcp.example", "authorization_servers": ["https://as.example"]}
    http = serving({ROOT_PRM: (200, root)})
    found = await discover_protected_resource(http, URL, Challenge(401), allow_private=False, resolve=public)
    assert found.resource == "https://mcp.example"  # the identifier sent as RFC 8707 `resource`
    assert found.scopes_supported is None


async def test_lying_metadata_is_refused() -> None:
    lying = {"resource": "https://another.example/mcp", "authorization_servers": ["https://as.example"]}
    with pytest.raises(DownstreamDiscoveryError, match="another resource"):
        await discover_protected_resource(
            serving({PATH_PRM: (200, lying)}), URL, Challenge(401), allow_private=False, resolve=public
        )
    with pytest.raises(DownstreamDiscoveryError, match="another origin"):
        await discover_protected_resource(
            serving({}),
            URL,
            Challenge(401, resource_metadata="https://evil.example/prm"),
            allow_private=False,
            resolve=public,
        )
    nothing = {"resource": URL, "authorization_servers": []}
    with pytest.raises(DownstreamDiscoveryError, match="no authorization server"):
        await discover_protected_resource(
            serving({PATH_PRM: (200, nothing)}), URL, Challenge(401), allow_private=False, resolve=public
        )
    with pytest.raises(DownstreamDiscoveryError, match="no protected-resource metadata"):
        await discover_protected_resource(
            serving({}), URL, Challenge(401), allow_private=False, resolve=public
        )


async def test_the_probe_reads_the_first_401_challenge() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.content.decode())
        if b'"initialize"' in request.content:
            return httpx.Response(200, json={"jsonrpc": "2.0", "id": 0, "result": {}})
        return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer scope="mcp:basic"'})

    challenge = await probe(httpx.AsyncClient(transport=httpx.MockTransport(handler)), URL)
    assert challenge == Challenge(401, scope=("mcp:basic",))
    assert len(calls) == 2 and "Authorization" not in calls[0]
