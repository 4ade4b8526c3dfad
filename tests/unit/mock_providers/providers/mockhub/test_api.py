"""mock_providers/providers/mockhub/api.py: GitHub's REST API as MockHub stands in for it, over
ASGI: repositories paged by Link headers, issues read and created, GitHub's rate limits, and the
routes a test adds, all behind MockHub's own token check."""

from __future__ import annotations

import re

import httpx
import pytest

from mock_providers import MockHub
from mock_providers.api.exchange import ApiRequest
from tests.support.mock_provider_setup import HUB_CLIENT_ID, bearer, hub_refresh, hub_tokens


def token(hub: MockHub, login: str = "octocat", scope: str = "read:user repo") -> dict[str, str]:
    """A live MockHub access token for `login`, as a code exchange would have stored it."""
    record = hub.store_token(
        {"access_token": f"mhat_test_{login}_{len(hub.tokens)}", "scope": scope}, HUB_CLIENT_ID, login
    )
    return bearer(record.access_token)


def next_link(response: httpx.Response) -> str | None:
    found = re.search(r'<([^>]+)>; rel="next"', response.headers.get("link", ""))
    return found.group(1) if found else None


async def test_user_repos_come_in_pages_of_per_page_linked_by_the_link_header(
    client: httpx.AsyncClient, hub: MockHub
) -> None:
    hub.api.set_repo_count("octocat", 250)
    headers = token(hub)
    url: str | None = "/mockhub/user/repos?per_page=100"
    pages = []
    while url is not None:
        response = await client.get(url, headers=headers)
        assert response.status_code == 200, response.text
        pages.append(response)
        url = next_link(response)
    assert [len(p.json()) for p in pages] == [100, 100, 50]
    names = [repo["full_name"] for page in pages for repo in page.json()]
    assert names == sorted(set(names)) and names[0] == "octocat/repo-001" and len(names) == 250
    assert 'rel="last"' in pages[0].headers["link"] and 'rel="prev"' in pages[2].headers["link"]
    # A page weighs what GitHub's does: every repository carries its *_url fields.
    assert len(pages[0].content) > 400_000
    repo = pages[0].json()[0]
    assert repo["owner"]["login"] == "octocat" and repo["issues_url"].endswith(
        "/octocat/repo-001/issues{/number}"
    )
    assert repo["permissions"]["push"] is True
    default = await client.get("/mockhub/user/repos", headers=headers)
    assert len(default.json()) == 30  # GitHub's default per_page
    pushed = (await client.get("/mockhub/user/repos?sort=pushed&per_page=100", headers=headers)).json()
    assert [r["pushed_at"] for r in pushed] == sorted((r["pushed_at"] for r in pushed), reverse=True)
    oldest = (await client.get("/mockhub/user/repos?sort=created&direction=asc", headers=headers)).json()
    assert oldest[0]["full_name"] == "octocat/repo-001"


async def test_the_identity_endpoint_counts_the_repositories(client: httpx.AsyncClient, hub: MockHub) -> None:
    hub.api.set_repo_count("octocat", 7)
    profile = (await client.get("/mockhub/user", headers=token(hub))).json()
    assert profile["public_repos"] == 7 and profile["html_url"] == "https://mockhub.test/octocat"


async def test_issues_are_created_listed_and_read(client: httpx.AsyncClient, hub: MockHub) -> None:
    headers = token(hub)
    created = await client.post(
        "/mockhub/repos/octocat/repo-001/issues",
        json={"title": "Crash on start", "body": "Stack trace", "assignees": ["octocat"], "labels": ["bug"]},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    issue = created.json()
    assert (issue["number"], issue["title"], issue["user"]["login"]) == (1, "Crash on start", "octocat")
    assert created.headers["location"] == issue["url"]
    await client.post("/mockhub/repos/octocat/repo-001/issues", json={"title": "Unassigned"}, headers=headers)
    listed = await client.get("/mockhub/repos/octocat/repo-001/issues", headers=headers)
    assert [i["number"] for i in listed.json()] == [2, 1]  # newest first
    mine = await client.get("/mockhub/repos/octocat/repo-001/issues?assignee=@me&labels=bug", headers=headers)
    assert [i["number"] for i in mine.json()] == [1]
    one = await client.get("/mockhub/repos/octocat/repo-001/issues/2", headers=headers)
    assert one.json()["title"] == "Unassigned"
    assert (await client.get("/mockhub/repos/octocat/repo-001/issues/9", headers=headers)).status_code == 404
    repo = (await client.get("/mockhub/repos/octocat/repo-001", headers=headers)).json()
    assert repo["open_issues_count"] == 2
    sample = await client.get("/mockhub/repos/acme/widgets/issues", headers=headers)
    assert sample.status_code == 200 and sample.json() == []  # docs/tools.md's repository exists


async def test_an_issue_github_would_refuse_is_refused(client: httpx.AsyncClient, hub: MockHub) -> None:
    path = "/mockhub/repos/octocat/repo-001/issues"
    missing = await client.post(path, json={"body": "no title"}, headers=token(hub))
    assert missing.status_code == 422
    assert missing.json()["errors"] == [{"resource": "Issue", "code": "missing_field", "field": "title"}]
    garbled = await client.post(path, content=b"{", headers=token(hub))
    assert garbled.status_code == 400 and garbled.json()["message"] == "Problems parsing JSON"
    read_only = await client.post(path, json={"title": "t"}, headers=token(hub, scope="read:user"))
    assert (
        read_only.status_code == 403 and read_only.headers["x-accepted-oauth-scopes"] == "public_repo, repo"
    )
    nowhere = await client.post(
        "/mockhub/repos/octocat/repo-999/issues", json={"title": "t"}, headers=token(hub)
    )
    assert nowhere.status_code == 404 and nowhere.json()["message"] == "Not Found"


async def test_the_token_check_is_mockhubs_own(client: httpx.AsyncClient, hub: MockHub) -> None:
    """Expiry, refresh and revocation behave for the API as they do for /user."""
    issued = await hub_tokens(client)
    headers = bearer(issued["access_token"])
    assert (await client.get("/mockhub/user/repos", headers=headers)).status_code == 200
    no_token = await client.get("/mockhub/user/repos")
    assert no_token.status_code == 401 and no_token.json()["message"] == "Bad credentials"
    hub.expire_access_tokens()
    assert (await client.get("/mockhub/user/repos", headers=headers)).status_code == 401
    refreshed = (await hub_refresh(client, issued["refresh_token"])).json()
    assert (
        await client.get("/mockhub/user/repos", headers=bearer(refreshed["access_token"]))
    ).status_code == 200
    hub.revoke_grant("octocat")
    assert (
        await client.get("/mockhub/user/repos", headers=bearer(refreshed["access_token"]))
    ).status_code == 401


async def test_every_answer_counts_against_the_primary_limit(client: httpx.AsyncClient, hub: MockHub) -> None:
    now = 1_800_000_000.0
    hub.clock = lambda: now
    headers = token(hub)
    first = await client.get("/mockhub/user/repos", headers=headers)
    second = await client.get("/mockhub/nothing-here", headers=headers)
    assert first.headers["x-ratelimit-limit"] == "5000" and first.headers["x-ratelimit-resource"] == "core"
    assert (first.headers["x-ratelimit-remaining"], second.headers["x-ratelimit-remaining"]) == (
        "4999",
        "4998",
    )
    assert first.headers["x-ratelimit-reset"] == str(int(now) + 3600)
    assert first.headers["x-oauth-scopes"] == "read:user, repo"

    hub.api.exhaust_rate_limit(reset_in=60)
    limited = await client.get("/mockhub/user/repos", headers=headers)
    assert limited.status_code == 403 and limited.json()["message"].startswith("API rate limit exceeded")
    assert (limited.headers["x-ratelimit-remaining"], limited.headers["x-ratelimit-reset"]) == (
        "0",
        str(int(now) + 60),
    )
    hub.clock = lambda: now + 60  # the reset time: a fresh window
    again = await client.get("/mockhub/user/repos", headers=headers)
    assert again.status_code == 200 and again.headers["x-ratelimit-remaining"] == "4999"


async def test_secondary_limits_say_when_to_retry(client: httpx.AsyncClient, hub: MockHub) -> None:
    now = 1_800_000_000.0
    hub.clock = lambda: now
    headers = token(hub)
    hub.api.secondary_limit(times=1, retry_after=30)
    waited = await client.get("/mockhub/user/repos", headers=headers)
    assert waited.status_code == 403 and waited.headers["retry-after"] == "30"
    assert "secondary rate limit" in waited.json()["message"]
    hub.api.secondary_limit(times=1, reset_in=90)
    reset = await client.get("/mockhub/user/repos", headers=headers)
    assert reset.status_code == 403 and "retry-after" not in reset.headers
    assert (reset.headers["x-ratelimit-remaining"], reset.headers["x-ratelimit-reset"]) == (
        "0",
        str(int(now) + 90),
    )
    assert (await client.get("/mockhub/user/repos", headers=headers)).status_code == 200
    hub.api.throttle(times=1, retry_after=5)
    throttled = await client.get("/mockhub/user/repos", headers=headers)
    assert throttled.status_code == 429 and throttled.headers["retry-after"] == "5"


async def test_a_route_the_test_adds_is_answered_behind_the_token_check(
    client: httpx.AsyncClient, hub: MockHub
) -> None:
    route = hub.api.route("GET", "/user/orgs", json=[{"login": "acme"}], headers={"X-Poll-Interval": "60"})
    assert (await client.get("/mockhub/user/orgs")).status_code == 401
    answer = await client.get("/mockhub/user/orgs?per_page=5", headers=token(hub))
    assert answer.json() == [{"login": "acme"}] and answer.headers["x-poll-interval"] == "60"
    assert "x-ratelimit-remaining" in answer.headers  # GitHub's headers on a test's route too
    [seen] = route.calls
    assert isinstance(seen, ApiRequest) and seen.query == {"per_page": "5"}
    assert seen.owner.login == "octocat" and seen.owner.id == str(hub.account("octocat").id)  # type: ignore[union-attr]
    assert "authorization" not in seen.headers  # the credential never reaches a handler
    hub.api.route("GET", "/user/repos", json=[], status=200)  # over the built-in surface
    assert (await client.get("/mockhub/user/repos", headers=token(hub))).json() == []


async def test_faults_and_own_endpoints(client: httpx.AsyncClient, hub: MockHub) -> None:
    hub.api_mode = "500"
    assert (await client.get("/mockhub/user/repos", headers=token(hub))).status_code == 500
    hub.api_mode = "ok"
    assert (await client.get("/mockhub/token")).status_code == 405  # its own endpoint, another method
    assert hub.api.reserved == {"/authorize", "/token", "/revoke", "/user"}  # from MockHub's routes
    with pytest.raises(ValueError, match="/user is served by the GitHub mock itself"):
        hub.api.route("GET", "/user", json={})
    assert (await client.get("/mockhub/.well-known/openid-configuration")).status_code == 404
