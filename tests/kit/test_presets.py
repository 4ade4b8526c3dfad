"""Under the kit, `github`, `google` and `slack` come from their presets and the mocks answer at
the real APIs' paths: a tool written for the real provider (the example tool package's, or one
calling GitHub's `GET /user`) passes unchanged; so does `GET /user` at the demo's MockHub."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses
from mcp_url_connect.testing import MODES, Mcpuc


@pytest.fixture(scope="session")
def mcpuc_tools() -> Any:
    def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
        @server.tool(description="The caller's GitHub login, as a tool for the real GitHub asks it.")
        @uses(broker.session, "github", scopes=("read:user",))
        async def github_login(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
            return {"login": (await api.get_json("/user"))["login"]}

        @server.tool(description="The caller's MockHub login, through MockHub's API base.")
        @uses(broker.session, "mockhub", scopes=("read:user",))
        async def hub_api_login(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
            return {"login": (await api.get_json("/user"))["login"]}

    return [register, "provider-tools"]  # and the example package, by its entry point's name


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ["github_login", "hub_api_login"])
async def test_get_user_relative_to_the_api_base(mcpuc: Mcpuc, mode: str, tool: str) -> None:
    user = f"{tool}-{mode}"
    async with mcpuc.client(user, mode=mode) as client:
        link = await mcpuc.connect_url(client, tool, {})
        await mcpuc.browser(user).approve(link.url, login="octocat")
        result = await mcpuc.retry(client, link, tool, {})
        assert result.structured_content == {"login": "octocat"}


@pytest.mark.parametrize(
    ("tool", "login", "expected"),
    [
        ("github_profile", "octocat", {"login": "octocat"}),
        ("google_profile", "alice", {"email": "alice@mockgoogle.test", "email_verified": True}),
        ("slack_identity", "alice", {"user": "alice"}),
    ],
)
async def test_the_example_packages_tools_run_unchanged(
    mcpuc: Mcpuc, tool: str, login: str, expected: dict[str, Any]
) -> None:
    async with mcpuc.client(f"{tool}-user", mode="legacy") as client:
        link = await mcpuc.connect_url(client, tool, {})
        await mcpuc.browser(f"{tool}-user").approve(link.url, login=login)
        result = await mcpuc.retry(client, link, tool, {})
        assert not result.is_error
        assert expected.items() <= result.structured_content.items()
