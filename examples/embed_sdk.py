"""Our connect flow in your own MCP server, built on the official SDK's `MCPServer`, with your own
token verifier. docs/embedding.md explains each step.

Run it against the development authorization server and MockHub (two terminals):

    mcp-url-connect mock-providers --mcp-public-url http://127.0.0.1:8000 --data-dir .embed
    env $(cat .embed/serve.env) python examples/embed_sdk.py     # http://127.0.0.1:8000/mcp

Its tests drive the whole flow through it on both protocol revisions, with the testing kit:
tests/kit/test_embedding.py.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import httpx
import jwt
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette

from mcp_url_connect import ProviderSession, Settings, UrlConnect, load_settings, run_server, uses


class AcmeTokenVerifier:
    """Your authentication, as it was before the connect flow: here, RFC 9068 JWT access tokens
    checked with pyjwt against the authorization server's published keys. The connect flow needs
    one thing from it: `subject` and `claims["iss"]` on the `AccessToken`, the user."""

    def __init__(self, issuer: str, audience: str) -> None:
        self._issuer = issuer
        self._audience = audience
        self._keys: jwt.PyJWKClient | None = None

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            keys = await self._signing_keys()
            key = await anyio.to_thread.run_sync(keys.get_signing_key_from_jwt, token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256", "PS256", "ES256", "EdDSA"],
                audience=self._audience,
                issuer=self._issuer,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.PyJWTError, httpx.HTTPError, KeyError, ValueError):
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            resource=self._audience,
            subject=str(claims["sub"]),
            claims={"iss": claims["iss"]},
        )

    async def _signing_keys(self) -> jwt.PyJWKClient:
        if self._keys is None:  # the issuer's metadata names its keys (RFC 8414 §3)
            async with httpx.AsyncClient(timeout=10) as http:
                metadata = (await http.get(f"{self._issuer}/.well-known/openid-configuration")).json()
            if metadata["issuer"] != self._issuer:
                raise ValueError("the metadata names another issuer")
            self._keys = jwt.PyJWKClient(metadata["jwks_uri"])
        return self._keys


def build_app(settings: Settings) -> Starlette:
    """Your server: your tools, your verifier; the connect flow added in three places."""
    connect = UrlConnect(settings)  # 1. the flow: store, browser pages, completion delivery
    server = MCPServer(
        "acme-tools",
        token_verifier=AcmeTokenVerifier(settings.auth_issuer, settings.resource_url),
        auth=AuthSettings(
            issuer_url=settings.auth_issuer,  # type: ignore[arg-type]  # pydantic coerces str
            resource_server_url=settings.resource_url,  # type: ignore[arg-type]
            validate_token_resource=True,  # refuse tokens issued for another resource
        ),
        request_state_security=connect.request_state_security(),  # 2. 2026-07-28 retries
    )

    @server.tool(description="The caller's MockHub login.")
    @uses(connect.session, "mockhub", scopes=("read:user",))  # 3. what each tool needs
    async def hub_login(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        profile = await api.get_json(api.provider.userinfo_url)
        return {"login": profile["login"]}

    connect.add_connection_tools(server)  # optional: list_connections, disconnect, whoami
    return connect.install(server.streamable_http_app())


if __name__ == "__main__":
    settings = load_settings()
    # As `mcp-url-connect serve` serves its own app: slow request heads and bodies bounded.
    run_server(build_app(settings), settings)
