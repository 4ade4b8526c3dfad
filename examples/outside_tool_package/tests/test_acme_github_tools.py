"""acme_github_tools against the kit's stand-in for GitHub, on both protocol revisions: three
pages of 100 repositories, and an issue opened in one of them."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_url_connect.testing import MODES, Mcpuc


@pytest.fixture(scope="session")
def mcpuc_tools() -> Any:
    return "acme-github"  # this package, installed: its entry point's name


async def connected(mcpuc: Mcpuc, client: Any, user: str, tool: str, arguments: dict[str, Any]) -> Any:
    """The first call asks for GitHub; the user approves as `login`; the retry answers."""
    link = await mcpuc.connect_url(client, tool, arguments)
    await mcpuc.browser(user).approve(link.url, login=f"{user}-gh")
    return await mcpuc.retry(client, link, tool, arguments)


@pytest.mark.parametrize("mode", MODES)
async def test_every_page_of_repositories(mcpuc: Mcpuc, mode: str) -> None:
    mcpuc.api("github").set_repo_count("alice-gh", 300)
    async with mcpuc.client("alice", mode=mode) as client:
        result = await connected(mcpuc, client, "alice", "my_repos", {})
        assert len(result.structured_content["repos"]) == 300 and result.structured_content["more"] is False
        fewer = await client.call_tool("my_repos", {"limit": 150})
        assert len(fewer.structured_content["repos"]) == 150 and fewer.structured_content["more"] is True
    pages = [
        c.request.query.get("page") for c in mcpuc.api("github").calls if c.request.path == "/user/repos"
    ]
    assert pages[:3] == [None, "2", "3"]  # the first call: three pages of 100


@pytest.mark.parametrize("mode", MODES)
async def test_open_an_issue(mcpuc: Mcpuc, mode: str) -> None:
    arguments = {"repo": "bob-gh/repo-002", "title": "The build is red", "body": "since Tuesday"}
    async with mcpuc.client("bob", mode=mode) as client:
        result = await connected(mcpuc, client, "bob", "open_issue", arguments)
        assert result.structured_content["number"] == 1
        assert result.structured_content["url"].endswith("/bob-gh/repo-002/issues/1")
    [issue] = mcpuc.api("github").issues("bob-gh/repo-002")
    assert (issue.title, issue.body, issue.author) == ("The build is red", "since Tuesday", "bob-gh")


async def test_a_missing_repository_is_a_tool_error_the_model_reads(mcpuc: Mcpuc) -> None:
    arguments = {"repo": "carol-gh/nowhere", "title": "t"}
    async with mcpuc.client("carol") as client:
        result = await connected(mcpuc, client, "carol", "open_issue", arguments)
        assert result.is_error and result.structured_content["status"] == 404
