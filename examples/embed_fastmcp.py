"""Our connect flow in your own FastMCP server (`pip install "mcp-url-connect[fastmcp]"`), with
FastMCP's own JWT verifier. docs/embedding.md explains each step.

Run it against the development authorization server and MockHub (two terminals):

    mcp-url-connect mock-providers --mcp-public-url http://127.0.0.1:8000 --data-dir .embed
    env $(cat .embed/serve.env) MCPUC_AUTH_JWKS_URL=http://127.0.0.1:8001/jwks.json \
        python examples/embed_fastmcp.py                                # http://127.0.0.1:8000/mcp

Its tests drive the whole flow through it on both protocol revisions, with the testing kit:
tests/kit/test_embedding.py.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import JWTVerifier
from starlette.applications import Starlette

from mcp_url_connect import ProviderSession, Settings, UrlConnect, load_settings, run_server
from mcp_url_connect.fastmcp import ProviderConnection, UrlConnectMiddleware


def build_server(settings: Settings, connect: UrlConnect) -> FastMCP:
    """Your FastMCP server: your tools, FastMCP's authentication; the connect flow added in three
    places (and `connect.install` below)."""
    mcp = FastMCP(
        "acme-tools",
        auth=JWTVerifier(
            jwks_uri=settings.auth_jwks_url,
            issuer=settings.auth_issuer,
            audience=settings.resource_url,
            base_url=settings.public_url,
        ),
        request_state_security=connect.request_state_security(),  # 1. 2026-07-28 retries
    )
    mcp.add_middleware(UrlConnectMiddleware(connect))  # 2. answers "connect first" for the tools

    @mcp.tool(description="The caller's MockHub login.")
    async def hub_login(
        api: ProviderSession = ProviderConnection("mockhub", scopes=("read:user",)),  # 3. per tool
    ) -> dict[str, Any]:
        profile = await api.get_json(api.provider.userinfo_url)
        return {"login": profile["login"]}

    return mcp


def build_app(settings: Settings) -> Starlette:
    connect = UrlConnect(settings)  # the flow: store, browser pages, completion delivery
    return connect.install(build_server(settings, connect).http_app(path="/mcp"))


if __name__ == "__main__":
    settings = load_settings()
    # As `mcp-url-connect serve` serves its own app: slow request heads and bodies bounded.
    run_server(build_app(settings), settings)
