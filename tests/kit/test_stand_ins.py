"""The stand-ins for real APIs under the kit: tools written for GitHub, Google and Slack call
their APIs (pages, writes, a route the test adds) through the whole stack on both revisions,
and the stand-in keeps deciding expiry and revocation by the tokens it issued."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses
from mcp_url_connect.testing import MODES, ApiAnswer, ApiRequest, Mcpuc

DRIVE = "https://www.googleapis.com/auth/drive.metadata.readonly"


def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    @server.tool(description="How many repositories the caller has, following GitHub's Link header.")
    @uses(broker.session, "github", scopes=("repo",))
    async def count_repos(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        url: str | None = "/user/repos?per_page=100"
        pages, names = 0, set()
        while url is not None:
            response = await api.request("GET", url)
            pages += 1
            names |= {repo["full_name"] for repo in response.json()}
            found = re.search(r'<([^>]+)>; rel="next"', response.headers.get("link", ""))
            url = found.group(1) if found else None
        return {"pages": pages, "repositories": len(names)}

    @server.tool(description="Open an issue.")
    @uses(broker.session, "github", scopes=("repo",))
    async def open_issue(
        ctx: Context[Any, Any], api: ProviderSession, repo: str, title: str
    ) -> dict[str, Any]:
        response = await api.request("POST", f"/repos/{repo}/issues", json={"title": title})
        return {"status": response.status_code, "number": response.json().get("number")}

    @server.tool(description="The caller's GitHub teams (a route the test adds).")
    @uses(broker.session, "github", scopes=("read:user",))
    async def my_teams(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        response = await api.request("GET", "/user/teams")
        return {"status": response.status_code, "body": response.json()}

    @server.tool(description="How many files the caller's Drive has.")
    @uses(broker.session, "google", scopes=("openid", "email", DRIVE))
    async def count_files(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        count, params = 0, {"pageSize": "100"}
        while True:
            page = await api.get_json("/drive/v3/files", params=params)
            count += len(page["files"])
            if "nextPageToken" not in page:
                return {"files": count}
            params["pageToken"] = page["nextPageToken"]

    @server.tool(description="Post to a Slack channel.")
    @uses(broker.session, "slack", scopes=("channels:read", "chat:write"))
    async def post(ctx: Context[Any, Any], api: ProviderSession, channel: str, text: str) -> dict[str, Any]:
        listed = await api.get_json("/conversations.list")
        [found] = [c["id"] for c in listed["channels"] if c["name"] == channel]
        sent = (await api.request("POST", "/chat.postMessage", json={"channel": found, "text": text})).json()
        return {"ok": sent["ok"], "channel": sent["channel"]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mcpuc]:
    running = Mcpuc(tmp_path_factory.mktemp("stand-ins") / "data", tools=register).start()
    try:
        yield running
    finally:
        running.stop()


async def connected(
    stack: Mcpuc, client: Any, user: str, tool: str, arguments: dict[str, Any], login: str
) -> Any:
    link = await stack.connect_url(client, tool, arguments)
    await stack.browser(user).approve(link.url, login=login)
    return await stack.retry(client, link, tool, arguments)


@pytest.mark.parametrize("mode", MODES)
async def test_three_pages_of_repositories_then_an_issue(stack: Mcpuc, mode: str) -> None:
    user, login = f"pages-{mode}", f"pager-{mode.replace('.', '')}"[:39]
    github = stack.api("github")
    github.set_repo_count(login, 250)
    async with stack.client(user, mode=mode) as client:
        result = await connected(stack, client, user, "count_repos", {}, login)
        assert result.structured_content == {"pages": 3, "repositories": 250}
        repo = f"{login}/repo-007"
        created = await client.call_tool("open_issue", {"repo": repo, "title": "Found a bug"})
        assert created.structured_content == {"status": 201, "number": 1}
    [issue] = github.issues(repo)
    assert (issue.title, issue.author) == ("Found a bug", login)
    pages = [c for c in github.calls if c.request.path == "/user/repos" and c.request.owner.login == login]
    assert [c.request.query.get("page") for c in pages] == [None, "2", "3"]


async def test_a_route_of_the_test_sees_the_owner_and_expiry_stays_the_mocks(stack: Mcpuc) -> None:
    github = stack.api("github")

    def teams(request: ApiRequest) -> ApiAnswer:
        return ApiAnswer([{"slug": f"{request.owner.login}-team"}], 200, {"X-Poll-Interval": "60"})

    route = github.route("GET", "/user/teams", handler=teams)
    try:
        async with stack.client("teams-user") as client:
            result = await connected(stack, client, "teams-user", "my_teams", {}, "octoteam")
            assert result.structured_content == {"status": 200, "body": [{"slug": "octoteam-team"}]}
            refreshes = stack.providers.refreshes
            stack.providers.expire_access_tokens()  # MockHub refuses the token; the server refreshes
            again = await client.call_tool("my_teams", {})
            assert again.structured_content == {"status": 200, "body": [{"slug": "octoteam-team"}]}
            assert stack.providers.refreshes == refreshes + 1
            assert len(route.calls) == 2  # the refused request never reached the route
    finally:
        github.unroute(route)


async def test_drive_and_slack_through_their_presets(stack: Mcpuc) -> None:
    stack.api("google").set_file_count("drive-user", 130)
    async with stack.client("drive-user") as client:
        result = await connected(stack, client, "drive-user", "count_files", {}, "drive-user")
        assert result.structured_content == {"files": 130}
    slack = stack.api("slack")
    arguments = {"channel": "random", "text": "hello"}
    async with stack.client("slack-user") as client:
        result = await connected(stack, client, "slack-user", "post", arguments, "slacker")
        assert result.structured_content["ok"] is True
    [message] = [m for m in slack.messages if m.text == "hello"]
    assert message.channel == result.structured_content["channel"]


def test_only_configured_providers_have_a_stand_in(stack: Mcpuc) -> None:
    with pytest.raises(ValueError, match="no provider 'gitlab' is configured"):
        stack.api("gitlab")
    assert stack.api("mockhub") is stack.api("github")  # both served by MockHub
