"""The stand-ins for real APIs under the kit: tools written for GitHub, Google and Slack call
their APIs (pages, writes, a route the test adds) through the whole stack on both revisions,
and the stand-in keeps deciding expiry and revocation by the tokens it issued."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses
from mcp_url_connect.testing import MODES, ApiAnswer, ApiRequest, Mcpuc

DRIVE = "https://www.googleapis.com/auth/drive.metadata.readonly"


def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    @server.tool(description="How many repositories the caller has, every page of them.")
    @uses(broker.session, "github", scopes=("repo",))
    async def count_repos(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        names = {repo["full_name"] async for repo in api.pages("/user/repos", params={"per_page": 100})}
        return {"repositories": len(names)}

    @server.tool(description="Open an issue.")
    @uses(broker.session, "github", scopes=("repo",))
    async def open_issue(
        ctx: Context[Any, Any], api: ProviderSession, repo: str, title: str
    ) -> dict[str, Any]:
        return {"number": (await api.post_json(f"/repos/{repo}/issues", {"title": title}))["number"]}

    @server.tool(description="The caller's GitHub teams (a route the test adds).")
    @uses(broker.session, "github", scopes=("read:user",))
    async def my_teams(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        response = await api.request("GET", "/user/teams")
        return {"status": response.status_code, "body": response.json()}

    @server.tool(description="How many files the caller's Drive has.")
    @uses(broker.session, "google", scopes=("openid", "email", DRIVE))
    async def count_files(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        files = api.pages("/drive/v3/files", params={"pageSize": 100}, items="files")
        return {"files": len([file async for file in files])}

    @server.tool(description="Post to a Slack channel.")
    @uses(broker.session, "slack", scopes=("channels:read", "chat:write"))
    async def post(ctx: Context[Any, Any], api: ProviderSession, channel: str, text: str) -> dict[str, Any]:
        channels = api.pages("/conversations.list", params={"limit": 100}, items="channels")
        [found] = [c["id"] async for c in channels if c["name"] == channel]
        sent = await api.post_json("/chat.postMessage", {"channel": found, "text": text})
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
        assert result.structured_content == {"repositories": 250}
        repo = f"{login}/repo-007"
        created = await client.call_tool("open_issue", {"repo": repo, "title": "Found a bug"})
        assert created.structured_content == {"number": 1}
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
    stack.api("google").set_file_count("drive-user", 230)
    async with stack.client("drive-user") as client:
        result = await connected(stack, client, "drive-user", "count_files", {}, "drive-user")
        assert result.structured_content == {"files": 230}  # three pages, by nextPageToken
    slack = stack.api("slack")
    slack.channel_count = 150  # two pages, by response_metadata.next_cursor
    arguments = {"channel": "random", "text": "hello"}
    async with stack.client("slack-user") as client:
        result = await connected(stack, client, "slack-user", "post", arguments, "slacker")
        assert result.structured_content["ok"] is True
    [message] = [m for m in slack.messages if m.text == "hello"]
    assert message.channel == result.structured_content["channel"]
    listed = [c.request.query.get("cursor") for c in slack.calls if c.request.path == "/conversations.list"]
    assert len(listed) == 2 and listed[0] is None and listed[1]


async def test_rate_limit_knobs_drive_the_servers_waiting(stack: Mcpuc) -> None:
    """A 429 with a near Retry-After is waited out within the call; GitHub's secondary limit with
    a reset an hour away is a tool error naming when to retry."""
    github = stack.api("github")
    async with stack.client("limited-user") as client:
        await connected(stack, client, "limited-user", "count_repos", {}, "limited")
        github.throttle(times=1, retry_after=1)
        result = await client.call_tool("count_repos", {})
        assert result.structured_content == {"repositories": 3}
        statuses = [c.status for c in github.calls if c.request.owner.login == "limited"]
        assert statuses[-2:] == [429, 200]
        github.secondary_limit(times=1, reset_in=3600)
        refused = await client.call_tool("count_repos", {})
        assert refused.is_error and refused.structured_content["status"] == 403
        assert 3500 <= refused.structured_content["retry_after"] <= 3600


def test_only_configured_providers_have_a_stand_in(stack: Mcpuc) -> None:
    with pytest.raises(ValueError, match="no provider 'gitlab' is configured"):
        stack.api("gitlab")
    assert stack.api("mockhub") is stack.api("github")  # both served by MockHub
