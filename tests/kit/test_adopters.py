"""The kit as adopters use it: clients that declare no URL mode (most in use), tool packages
registered once and only when asked for, and a server whose token verifier blocks its event loop."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcpuc_provider_tools import register as provider_tools
from starlette.applications import Starlette

from mcp_url_connect import Settings, ToolPackageError, UrlConnect
from mcp_url_connect.testing import ELICITATIONS, MODES, Mcpuc


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("elicitation", ["form", "none"])
async def test_a_client_without_url_mode_gets_the_link_in_a_tool_error(
    mcpuc: Mcpuc, mode: str, elicitation: str
) -> None:
    user = f"{elicitation}-{mode}"
    async with mcpuc.client(user, mode=mode, elicitation=elicitation) as client:  # type: ignore[arg-type]
        link = await mcpuc.connect_url(client, "whoami", {})
        assert link.via == "tool_error" and link.request_state is None
        assert link.url in link.text and "Call this same tool again" in link.text
        await mcpuc.browser(user).approve(link.url, login="octocat")
        result = await mcpuc.retry(client, link, "whoami", {})  # as the model does, after "done"
        assert not result.is_error and result.structured_content["login"] == "octocat"
        assert mcpuc.recorder(client).elicitations == []  # nothing was ever asked of the client


async def test_a_url_mode_client_is_still_asked_by_elicitation(mcpuc: Mcpuc) -> None:
    assert ELICITATIONS == ("url", "form", "none")
    async with mcpuc.client("url-user", elicitation="url") as client:
        link = await mcpuc.connect_url(client, "whoami", {})
        assert link.via == "elicitation"


async def tool_names(stack: Mcpuc) -> set[str]:
    stack.start()
    try:
        async with stack.client("lister") as client:
            return {tool.name for tool in (await client.list_tools()).tools}
    finally:
        stack.stop()


async def test_an_installed_package_named_twice_registers_once_and_no_other_comes_along(
    tmp_path: Path,
) -> None:
    """The entry point's name, its reference and the function itself are one package."""
    tools = ["provider-tools", "mcpuc_provider_tools:register", provider_tools]
    names = await tool_names(Mcpuc(tmp_path / "twice", tools=tools))
    assert {"github_profile", "google_profile", "slack_identity"} <= names
    names = await tool_names(Mcpuc(tmp_path / "alone"))
    assert "github_profile" not in names and "whoami" in names  # installed, but not asked for


def test_a_package_that_is_not_installed_is_named(tmp_path: Path) -> None:
    with pytest.raises(ToolPackageError, match="no installed tool package has the entry point 'acme-tools'"):
        Mcpuc(tmp_path / "data", tools="acme-tools").start()


class BlockingVerifier:
    """A verifier as adopters write them: PyJWT's `PyJWKClient` fetches the keys synchronously,
    inside the event loop (the example, examples/embed_sdk.py, moves it to a thread)."""

    def __init__(self, settings: Settings) -> None:
        self._keys = jwt.PyJWKClient(settings.auth_jwks_url, timeout=5)
        self._settings = settings

    async def verify_token(self, token: str) -> AccessToken | None:
        key = self._keys.get_signing_key_from_jwt(token)  # blocks this server's loop, on purpose
        claims = jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            audience=self._settings.resource_url,
            issuer=self._settings.auth_issuer,
        )
        return AccessToken(
            token=token,
            client_id="",
            scopes=[],
            expires_at=int(claims["exp"]),
            resource=self._settings.resource_url,
            subject=str(claims["sub"]),
            claims={"iss": claims["iss"]},
        )


def blocking_app(settings: Settings) -> Starlette:
    connect = UrlConnect(settings)
    server = MCPServer(
        "blocking",
        token_verifier=BlockingVerifier(settings),
        auth=AuthSettings(
            issuer_url=settings.auth_issuer,  # type: ignore[arg-type]  # pydantic coerces str
            resource_server_url=settings.resource_url,  # type: ignore[arg-type]
            validate_token_resource=True,
        ),
        request_state_security=connect.request_state_security(),
    )
    connect.add_connection_tools(server)
    return connect.install(server.streamable_http_app())


async def test_a_blocking_token_verifier_still_reaches_the_dev_authorization_server(tmp_path: Path) -> None:
    """The mock providers run on their own thread and loop: the server's blocked loop is not theirs."""
    stack = Mcpuc(tmp_path / "data", app=blocking_app).start()
    try:
        async with stack.client("alice") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
    finally:
        stack.stop()
    assert "whoami" in names
