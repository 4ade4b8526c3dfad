"""A GitHub tool package's tools against the kit's stand-in for GitHub's API: a write checked
in the stand-in's world, and an endpoint the test adds."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses
from mcp_url_connect.testing import MODES, ApiAnswer, ApiRequest, Mcpuc


@pytest.fixture(scope="session")
def mcpuc_tools() -> Any:
    def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
        @server.tool(description="Open an issue in one of your repositories.")
        @uses(broker.session, "github", scopes=("repo",))
        async def report_bug(
            ctx: Context[Any, Any], api: ProviderSession, repo: str, title: str
        ) -> dict[str, Any]:
            issue = await api.post_json(f"/repos/{repo}/issues", {"title": title, "labels": ["bug"]})
            return {"number": issue["number"]}

        @server.tool(description="The teams you are in.")
        @uses(broker.session, "github", scopes=("read:org",))
        async def my_teams(ctx: Context[Any, Any], api: ProviderSession) -> list[str]:
            return [team["slug"] for team in await api.get_json("/user/teams")]

    return register


async def connected(mcpuc: Mcpuc, client: Any, user: str, tool: str, arguments: dict[str, Any]) -> Any:
    link = await mcpuc.connect_url(client, tool, arguments)
    await mcpuc.browser(user).approve(link.url, login="octocat")
    return await mcpuc.retry(client, link, tool, arguments)


@pytest.mark.parametrize("mode", MODES)
async def test_report_bug_creates_the_issue(mcpuc: Mcpuc, mode: str) -> None:
    async with mcpuc.client("alice", mode=mode) as client:
        result = await connected(
            mcpuc, client, "alice", "report_bug", {"repo": "octocat/repo-001", "title": "Crash"}
        )
        assert result.structured_content == {"number": 1}
    [issue] = mcpuc.api("github").issues("octocat/repo-001")
    assert (issue.title, issue.labels, issue.author) == ("Crash", ["bug"], "octocat")


async def test_an_endpoint_the_test_adds(mcpuc: Mcpuc) -> None:
    def teams(request: ApiRequest) -> ApiAnswer:
        return ApiAnswer([{"slug": f"{request.owner.login}-admins"}], 200)

    route = mcpuc.api("github").route("GET", "/user/teams", handler=teams)
    async with mcpuc.client("bob") as client:
        result = await connected(mcpuc, client, "bob", "my_teams", {})
        assert result.structured_content == {"result": ["octocat-admins"]}
        # The token expires at MockHub: the request is refused there, the server refreshes, the
        # route answers the retry.
        mcpuc.providers.expire_access_tokens()
        assert (await client.call_tool("my_teams", {})).structured_content == {"result": ["octocat-admins"]}
    assert len(route.calls) == 2
