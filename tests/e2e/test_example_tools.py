"""The example tools (github_profile, google_profile, slack_identity) against the mock providers,
through presets pointed at them: each completes the flow and answers without any token."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.replicas import (
    LifecycleStack,
    complete_flow,
    elicitation_of,
    expire_stored,
    legacy_client,
    refreshes_since,
    wait_completed,
)
from tests.support.lifecycle import leaks, running
from token_store import Store

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LifecycleStack]:
    yield from running(LifecycleStack(tmp_path_factory.mktemp("example-tools")))


def visited(browser: Browser, path: str) -> list[dict[str, list[str]]]:
    """Query parameters of each visited URL with this path and a query (not the form POSTs)."""
    parts = [urlsplit(u) for u in browser.visited]
    return [parse_qs(p.query) for p in parts if p.path == path and p.query]


def dumped(*items: Any) -> str:
    return json.dumps(items, default=str)


async def test_tools_are_registered_for_the_configured_providers(stack: LifecycleStack) -> None:
    async with legacy_client(stack.instances[0], "tools-user") as (client, _):
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"github_profile", "google_profile", "slack_identity", "whoami"} <= names


async def test_github_profile_via_mockhub(stack: LifecycleStack, store: Store, browser: Browser) -> None:
    user, hub = "github-user", stack.mockhub
    async with legacy_client(stack.instances[1], user) as (client, recorder):
        result = await complete_flow(client, recorder, browser, user, login="octocat", tool="github_profile")
        assert result.structured_content == {
            "login": "octocat",
            "name": "octocat (MockHub)",
            "public_repos": 3,  # MockHub's GitHub world: each account owns three repositories
            "html_url": "https://mockhub.test/octocat",
        }
        [authorize] = visited(browser, "/mockhub/authorize")
        assert authorize["scope"] == ["read:user"]
        assert authorize["redirect_uri"] == [f"{stack.public_url}/callback/github"]
        assert visited(browser, "/callback/github")

        # Expiring tokens (a GitHub App) are refreshed through the same preset.
        await expire_stored(store, stack.user(user), "github")
        mark = len(hub.token_requests)
        again = await client.call_tool("github_profile", {})
        assert not again.is_error and again.structured_content == result.structured_content
        assert refreshes_since(hub.token_requests, mark) == 1
        texts = dumped(result.model_dump(), again.model_dump(), recorder.notifications)
    stored = await store.get_connection(stack.user(user), "github")
    assert stored is not None and stored.tokens.access_token in hub.issued_access_tokens
    assert await store.get_connection(stack.user(user), "mockhub") is None  # its own provider name
    assert leaks(hub.issued_access_tokens | hub.issued_refresh_tokens, [texts]) == []


async def test_google_profile_via_mockgoogle(stack: LifecycleStack, store: Store, browser: Browser) -> None:
    user, google = "google-user", stack.mockgoogle
    account = google.account("alice")
    async with legacy_client(stack.instances[1], user) as (client, recorder):
        result = await complete_flow(client, recorder, browser, user, login="alice", tool="google_profile")
        assert result.structured_content == {
            "email": "alice@mockgoogle.test",
            "name": account.name,
            "email_verified": True,
        }
        [authorize] = visited(browser, "/mockgoogle/authorize")
        assert authorize["access_type"] == ["offline"]
        assert authorize["prompt"] == ["consent"]  # first connect: no refresh token held yet
        assert sorted(authorize["scope"][0].split()) == ["email", "openid", "profile"]

        stored = await store.get_connection(stack.user(user), "google")
        assert stored is not None and stored.tokens.refresh_token in google.issued_refresh_tokens
        assert (stored.key.account, stored.account_label) == (account.sub, account.email)

        # Google refreshes without a new refresh token: the one held stays.
        await expire_stored(store, stack.user(user), "google")
        google.expire_access_tokens()
        mark = len(google.token_requests)
        again = await client.call_tool("google_profile", {})
        assert not again.is_error and again.structured_content == result.structured_content
        assert refreshes_since(google.token_requests, mark) == 1
        texts = dumped(result.model_dump(), again.model_dump(), recorder.notifications)
    renewed = await store.get_connection(stack.user(user), "google")
    assert renewed is not None and renewed.tokens.refresh_token == stored.tokens.refresh_token
    assert renewed.tokens.access_token != stored.tokens.access_token
    assert leaks(google.issued_access_tokens | google.issued_refresh_tokens, [texts]) == []


async def test_slack_identity_uses_the_user_token(
    stack: LifecycleStack, store: Store, browser: Browser
) -> None:
    user, slack = "slack-user", stack.mockslack
    bots_before = set(slack.issued_bot_tokens)
    async with legacy_client(stack.instances[1], user) as (client, recorder):
        result = await complete_flow(client, recorder, browser, user, login="alice", tool="slack_identity")
        identity = result.structured_content
        assert identity is not None
        assert identity["user"] == "alice"
        assert identity["team"] == slack.team_name and identity["team_id"] == slack.team_id
        assert identity["user_id"].startswith("U") and identity["user_id"] != slack.bot_user_id
        [authorize] = visited(browser, "/mockslack/authorize")
        assert authorize["user_scope"] == ["users:read"]
        texts = dumped(result.model_dump(), recorder.notifications)

    new_bots = slack.issued_bot_tokens - bots_before
    assert len(new_bots) == 1  # the exchange did carry a bot token too
    stored = await store.get_connection(stack.user(user), "slack")
    assert stored is not None
    assert stored.tokens.access_token.startswith("xoxp-")
    assert stored.tokens.access_token in slack.issued_user_tokens
    assert stored.tokens.access_token not in new_bots
    assert stored.key.account == identity["user_id"]
    assert leaks(slack.issued_access_tokens, [texts]) == []


async def test_reconnect_after_a_dead_google_refresh_token_gets_a_new_one(
    stack: LifecycleStack, store: Store, browser: Browser
) -> None:
    """Google invalidates a refresh token while the grant and the consent stay (e.g. the 100 refresh
    tokens per account and client limit, or 7-day tokens of apps in testing). The refresh answers
    invalid_grant and the user is asked to connect again; that new consent must ask for a new
    refresh token (prompt=consent), since Google omits it on a repeated consent otherwise."""
    user, google = "google-dead-rt-user", stack.mockgoogle
    account = google.account("bob")
    async with legacy_client(stack.instances[1], user) as (client, recorder):
        await complete_flow(client, recorder, browser, user, login="bob", tool="google_profile")
        held = await store.get_connection(stack.user(user), "google")
        assert held is not None and held.tokens.refresh_token is not None
        dead = "1//mockgoogle-invalidated-" + held.tokens.refresh_token[-12:]
        assert await store.replace_connection(
            replace(held, tokens=replace(held.tokens, refresh_token=dead, expires_at=time.time() - 30)),
            expected_updated_at=held.updated_at,
        )
        mark = len(google.token_requests)
        error = await elicitation_of(client, "google_profile")
        assert [(r.grant_type, r.error) for r in google.token_requests[mark:]] == [
            ("refresh_token", "invalid_grant")
        ]
        page = await browser.complete_connect(error.elicitations[0].url, username=user, login="bob")
        assert page.status_code == 200, page.text
        await wait_completed(recorder, error.elicitations[0].elicitation_id)
        assert visited(browser, "/mockgoogle/authorize")[-1].get("prompt") == ["consent"]
        renewed = await store.get_connection(stack.user(user), "google")
        assert renewed is not None and renewed.key.account == account.sub
        assert renewed.tokens.refresh_token != dead
        assert renewed.tokens.refresh_token in google.issued_refresh_tokens
        # An hour later: the connection refreshes instead of asking the user again.
        await expire_stored(store, stack.user(user), "google")
        assert not (await client.call_tool("google_profile", {})).is_error
