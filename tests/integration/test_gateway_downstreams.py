"""Remote MCP servers nobody here wrote, behind our server (docs/gateway.md): a FastMCP server and
an MCP Python SDK server, each protected by its own oidc-provider (npm; tests/integration/node,
`oidc_provider_resource.mjs`): RFC 7591 registration, RFC 8707 resource-bound JWT access tokens
that each server verifies itself (FastMCP's `JWTVerifier` with its `RemoteAuthProvider`; the SDK's
`AuthSettings` with the same verifier), oidc-provider's own login and consent pages.

On both of our revisions: the user calls a downstream tool, gets the connect link, authorizes at the
downstream's authorization server, and the retried call returns the downstream's answer; a second
user gets their own session and token, never the first's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.server.auth import RemoteAuthProvider
from fastmcp.server.auth.providers.jwt import JWTVerifier
from fastmcp.server.dependencies import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.downstream import resolved_providers
from mock_providers.testing.servers import HOST, DemoServers, ThreadedServers, free_port
from tests.integration.node_servers import NodeServer, need_node
from token_store import UserRef

pytestmark = pytest.mark.integration

PROVIDER = "ext"
SCOPE = "read"


def fastmcp_app(base: str, issuer: str) -> Any:
    """A FastMCP server whose tokens come from `issuer`, for the resource `<base>/mcp`."""
    verifier = JWTVerifier(
        jwks_uri=f"{issuer}/jwks", issuer=issuer, audience=f"{base}/mcp", required_scopes=[SCOPE]
    )
    server = FastMCP("fast", auth=RemoteAuthProvider(verifier, [issuer], base_url=base))  # type: ignore[list-item]

    @server.tool
    def whoami() -> dict[str, Any]:
        """The account this server knows the caller as."""
        token = get_access_token()
        return {"sub": token.claims.get("sub") if token else None, "server": "fastmcp"}

    @server.tool
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    return server.http_app(path="/mcp")


def sdk_app(base: str, issuer: str) -> Any:
    """The MCP Python SDK's server, its tokens from `issuer`, checked by the same JWT verifier."""
    verifier = JWTVerifier(jwks_uri=f"{issuer}/jwks", issuer=issuer, audience=f"{base}/mcp")
    server: MCPServer[Any] = MCPServer(
        "sdk",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=issuer,  # type: ignore[arg-type]
            resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
            required_scopes=[SCOPE],
            validate_token_resource=False,  # the verifier checks the audience itself
        ),
    )

    @server.tool(description="The account this server knows the caller as.")
    def whoami() -> dict[str, Any]:
        from mcp.server.auth.middleware.auth_context import get_access_token as sdk_token

        token = sdk_token()
        return {"sub": token.subject if token else None, "server": "sdk"}

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    return server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )


DOWNSTREAMS: dict[str, Callable[[str, str], Any]] = {"fastmcp": fastmcp_app, "sdk": sdk_app}


@pytest.fixture(params=sorted(DOWNSTREAMS))
def downstream(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, NodeServer]]:
    """(its MCP URL, its authorization server): the downstream served on a loopback port."""
    port = free_port()
    base = f"http://{HOST}:{port}"
    node = need_node("oidc-provider", (20, 19))
    authorization = NodeServer(
        node, "oidc_provider_resource.mjs", [str(free_port()), f"{base}/mcp"], tmp_path / "as.log"
    ).start()
    served = ThreadedServers([(DOWNSTREAMS[request.param](base, authorization.issuer), port)])
    served.start()
    yield f"{base}/mcp", authorization
    served.stop()
    authorization.stop()


@pytest.fixture
async def stack(tmp_path: Path, downstream: tuple[str, NodeServer]) -> Iterator[DemoServers]:
    url, _ = downstream
    servers = DemoServers(tmp_path / "data")
    table = {"kind": "mcp", "url": url, "display_name": "External", "allow_private_network": True}
    servers.providers = await resolved_providers(servers.demo.settings, {PROVIDER: table})
    servers.start()
    yield servers
    servers.stop()


async def whoami_after_connecting(stack: DemoServers, mode: str, user: str, login: str) -> dict[str, Any]:
    async with Browser() as browser, mcp_client(stack, user, mode, on_url=accept) as (client, _):
        link = await connect_url(client, f"{PROVIDER}_whoami")
        page = await browser.complete_connect(link.url, username=user, login=login)
        assert page.status_code == 200, page.text
        assert "return to your MCP client" in page.text
        result = await retry(client, link, f"{PROVIDER}_whoami")
        assert not result.is_error, result
        assert result.structured_content is not None
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert {f"{PROVIDER}_whoami", f"{PROVIDER}_echo"} <= listed
        echoed = await client.call_tool(f"{PROVIDER}_echo", {"text": "hi"})
        assert echoed.content[0].text == "hi"  # type: ignore[union-attr]
        return {**result.structured_content, "_seen": [result.model_dump(), echoed.model_dump()]}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_downstream_answers_its_user_through_our_server(
    stack: DemoServers, downstream: tuple[str, NodeServer], mode: str
) -> None:
    url, authorization = downstream
    alice = await whoami_after_connecting(stack, mode, "alice", "alice-at-idp")
    bob = await whoami_after_connecting(stack, mode, "bob", "bob-at-idp")
    assert alice["sub"] == "alice-at-idp" and bob["sub"] == "bob-at-idp"
    # One registration at the downstream's authorization server, every token for its resource.
    assert len(authorization.events_of("register")) == 1
    assert {e["resource"] for e in authorization.events_of("token")} == {url}
    # No token the downstream's server issued reached our clients; each user has their own session.
    seen = repr([alice["_seen"], bob["_seen"]])
    for token in authorization.issued_tokens():
        assert token not in seen
    pool = stack.apps["mcp"].state.gateway.sessions
    issuer = stack.demo.settings.auth_issuer
    sessions = [pool.find(PROVIDER, UserRef(issuer, user)) for user in ("alice", "bob")]
    assert all(sessions) and sessions[0].token.access_token != sessions[1].token.access_token
