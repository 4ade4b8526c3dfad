"""The token lifecycle end to end: two MCP app instances sharing Redis, real sockets, mock providers.

Each test connects its own MCP user (the stack is shared by the module) and asserts on what reached
the provider (MockHub's request records), what the store holds and what the MCP client saw.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette

from mock_providers.providers.mockkeys.server import MockKeysAccount
from mock_providers.testing.browser import Browser, forms_in
from mock_providers.testing.replicas import (
    PROVIDER_PATHS,
    LifecycleStack,
    complete_flow,
    connect,
    elicitation_of,
    expire_stored,
    legacy_client,
    refreshes_since,
    wait_completed,
)
from service.flow.lifecycle import FAILURE_COOLDOWN
from service.mcp.provider_session import ProviderSession, uses
from tests.support.lifecycle import leaks, running
from tests.support.login import sign_in
from tests.support.settle import wait_until
from token_store import ConnectionStatus, Store

pytestmark = pytest.mark.e2e

HTTP_TIMEOUT = 2.0  # the instances' http_timeout (token endpoint, provider APIs)
STORM_CALLS = 20
DEAD_LOCK_TTL = 1.5


def add_scoped_tools(app: Starlette) -> None:
    """Test-only tools needing more than the provider's default scope (`read:user`)."""
    server, broker = app.state.mcp_server, app.state.broker

    @server.tool(description="Test only: needs read:user and repo at MockHub.")
    @uses(broker.session, "mockhub", scopes=("read:user", "repo"))
    async def mockhub_repos(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        user = await api.get_json(api.provider.userinfo_url)
        return {"login": user["login"], "scopes": user["scopes"]}

    @server.tool(description="Test only: needs gist (only) at MockHub.")
    @uses(broker.session, "mockhub", scopes=("gist",))
    async def mockhub_gists(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        user = await api.get_json(api.provider.userinfo_url)
        return {"login": user["login"], "scopes": user["scopes"]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LifecycleStack]:
    yield from running(
        LifecycleStack(
            tmp_path_factory.mktemp("lifecycle"), http_timeout=HTTP_TIMEOUT, tools=(add_scoped_tools,)
        )
    )


def tool_error_text(result: Any) -> str:
    """The text of a tool error (a result with `isError`; a JSON-RPC error would have raised)."""
    assert result.is_error is True, result
    [item] = result.content
    return str(item.text)


def profile(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def connections(client: Any) -> list[dict[str, Any]]:
    result = await client.call_tool("list_connections", {})
    assert not result.is_error, result
    content = result.structured_content
    listed = content["result"] if isinstance(content, dict) else content
    assert isinstance(listed, list)
    return listed


def asked_scopes(browser: Browser) -> list[list[str]]:
    """The `scope` of each authorization request the browser was sent to at MockHub, in order."""
    parts = [urlsplit(u) for u in browser.visited]
    return [
        parse_qs(p.query)["scope"][0].split() for p in parts if p.path == "/mockhub/authorize" and p.query
    ]


def dumped(*items: Any) -> str:
    return " ".join(json.dumps(i, default=str) if not isinstance(i, str) else i for i in items)


# --- 1. refresh storm --------------------------------------------------------------------------


@pytest.mark.parametrize("cause", ["expired", "refused"])
async def test_refresh_storm_over_two_instances_sends_one_refresh(
    stack: LifecycleStack, store: Store, cause: str
) -> None:
    """`expired`: the stored token is past its expiry (proactive refresh); `refused`: it looks
    valid here but the provider answers 401 (forced refresh after the API call)."""
    user, hub = f"storm-{cause}-user", stack.mockhub
    await connect(stack.instances[0], user)
    before = await store.get_connection(stack.user(user), "mockhub")
    assert before is not None
    if cause == "expired":
        await expire_stored(store, stack.user(user), "mockhub")
    hub.expire_access_tokens()  # in both cases the provider refuses the old access token
    mark, reuse = len(hub.token_requests), hub.reuse_detections

    async with contextlib.AsyncExitStack() as exits:
        clients = [
            (await exits.enter_async_context(legacy_client(stack.instances[i % 2], user)))[0]
            for i in range(4)
        ]
        api_calls = hub.user_requests
        results = await asyncio.gather(
            *(clients[i % len(clients)].call_tool("whoami", {}) for i in range(STORM_CALLS))
        )
        api_calls = hub.user_requests - api_calls

    assert refreshes_since(hub.token_requests, mark) == 1
    assert [r.ok for r in hub.token_requests[mark:]] == [True]
    assert hub.reuse_detections == reuse
    assert [profile(r)["login"] for r in results] == ["octocat"] * STORM_CALLS
    if cause == "expired":
        assert api_calls == STORM_CALLS  # refreshed before the API call: no call sent the old token
    after = await store.get_connection(stack.user(user), "mockhub")
    assert after is not None and after.refreshed_at is not None
    assert after.tokens.refresh_token != before.tokens.refresh_token  # rotated, kept once
    assert after.tokens.expires_at is not None and after.tokens.expires_at > time.time() + 3600


# --- 2. the lock holder died mid-refresh ----------------------------------------------------------


async def test_lock_of_a_dead_holder_expires_and_one_refresh_follows(
    stack: LifecycleStack, store: Store
) -> None:
    user, hub = "dead-holder-user", stack.mockhub
    await connect(stack.instances[0], user)
    held = await store.get_connection(stack.user(user), "mockhub")
    assert held is not None
    name = f"refresh:{held.key.associated_data().decode()}"  # as service/flow/lifecycle.py names it
    owner = await store.acquire_lock(name, DEAD_LOCK_TTL)  # and never released: the holder died
    assert owner is not None
    await expire_stored(store, stack.user(user), "mockhub")
    hub.expire_access_tokens()
    mark = len(hub.token_requests)

    async with legacy_client(stack.instances[1], user) as (client, _):
        start, api_calls = time.monotonic(), hub.user_requests
        result = await client.call_tool("whoami", {})
        elapsed, api_calls = time.monotonic() - start, hub.user_requests - api_calls

    assert profile(result)["login"] == "octocat"
    assert refreshes_since(hub.token_requests, mark) == 1
    assert api_calls == 1
    assert elapsed >= DEAD_LOCK_TTL * 0.5  # it waited for the lock rather than refresh beside it
    assert elapsed < HTTP_TIMEOUT + 5 + 1  # and did not wait for its own lock_ttl deadline
    assert await store.release_lock(name, owner) is False  # taken over after the TTL


# --- 3. invalid_grant -----------------------------------------------------------------------------


async def test_invalid_grant_marks_the_connection_and_asks_once(
    stack: LifecycleStack, store: Store, browser: Browser
) -> None:
    # A login of its own: revoke_grant acts on every MCP user's MockHub grants for that login.
    user, login, hub = "invalid-grant-user", "mona", stack.mockhub
    await connect(stack.instances[0], user, login=login)
    assert hub.revoke_grant(login) >= 1
    await expire_stored(store, stack.user(user), "mockhub")
    mark = len(hub.token_requests)

    async with legacy_client(stack.instances[1], user) as (client, recorder):
        first = await elicitation_of(client)
        assert "MockHub" in first.elicitations[0].message
        records = hub.token_requests[mark:]
        assert [(r.grant_type, r.error) for r in records] == [("refresh_token", "invalid_grant")]
        [entry] = await connections(client)
        assert entry["status"] == "needs_reauthorization"

        second = await elicitation_of(client)  # no refresh again, no retry loop
        assert len(hub.token_requests) == mark + 1
        assert second.elicitations[0].elicitation_id != first.elicitations[0].elicitation_id

        url = second.elicitations[0].url
        page = await browser.complete_connect(url, username=user, login=login)
        assert page.status_code == 200, page.text
        await wait_completed(recorder, second.elicitations[0].elicitation_id)
        assert profile(await client.call_tool("whoami", {}))["login"] == login
        [entry] = await connections(client)
        assert entry["status"] == "ok"
    assert refreshes_since(hub.token_requests, mark) == 1


# --- 4. refresh on 401 ----------------------------------------------------------------------------


async def test_a_refused_token_is_refreshed_once_and_the_call_retried(
    stack: LifecycleStack, store: Store
) -> None:
    user, hub = "refused-token-user", stack.mockhub
    await connect(stack.instances[0], user)
    before = await store.get_connection(stack.user(user), "mockhub")
    assert before is not None and not stack.instances[1].app.state.runtime.lifecycle.expiring(
        before, stack.settings.providers["mockhub"]
    )
    hub.expire_access_tokens()  # valid by our clock, refused by the provider
    mark = len(hub.token_requests)

    async with legacy_client(stack.instances[1], user) as (client, _):
        assert profile(await client.call_tool("whoami", {}))["login"] == "octocat"

    assert refreshes_since(hub.token_requests, mark) == 1
    after = await store.get_connection(stack.user(user), "mockhub")
    assert after is not None and after.tokens.access_token != before.tokens.access_token


# --- 5. disconnect revokes ------------------------------------------------------------------------


async def test_disconnect_revokes_the_grant_and_deletes_the_record(
    stack: LifecycleStack, store: Store
) -> None:
    user, hub = "disconnect-user", stack.mockhub
    await connect(stack.instances[0], user)
    held = await store.get_connection(stack.user(user), "mockhub")
    assert held is not None and held.tokens.refresh_token is not None

    async with legacy_client(stack.instances[1], user) as (client, _):
        result = await client.call_tool("disconnect", {"provider": "mockhub"})
        assert not result.is_error, result
        assert result.structured_content == {
            "provider": "mockhub",
            "disconnected": [held.key.account],
            "labels": [held.account_label],
            "revoked": [held.key.account],
        }
        assert await connections(client) == []

    assert held.tokens.refresh_token in hub.revoked_tokens
    async with httpx.AsyncClient() as http:
        answer = await http.get(
            f"{stack.providers_url}/mockhub/user",
            headers={"Authorization": f"Bearer {held.tokens.access_token}"},
        )
    assert answer.status_code == 401
    assert await store.get_connection(stack.user(user), "mockhub") is None


async def test_disconnect_during_a_refresh_leaves_no_live_grant(
    stack: LifecycleStack, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import service.flow.lifecycle

    user = "disconnect-race-user"
    await connect(stack.instances[0], user)
    await expire_stored(store, stack.user(user), "mockhub")
    issued: list[Any] = []
    original = service.flow.lifecycle.refresh

    async def slow_refresh(*args: Any, **kwargs: Any) -> Any:
        tokens = await original(*args, **kwargs)  # the provider has issued (and rotated) tokens...
        issued.append(tokens)
        await anyio.sleep(1.0)  # ...and this replica is slow to store them
        return tokens

    monkeypatch.setattr(service.flow.lifecycle, "refresh", slow_refresh)
    async with (
        legacy_client(stack.instances[0], user) as (first, _),
        legacy_client(stack.instances[1], user) as (second, _),
    ):
        call = asyncio.ensure_future(first.call_tool("whoami", {}))
        await wait_until(lambda: bool(issued), "the refresh to reach MockHub")
        result = await second.call_tool("disconnect", {"provider": "mockhub"})
        assert not result.is_error and result.structured_content is not None
        assert result.structured_content["revoked"] == result.structured_content["disconnected"] != []
        with contextlib.suppress(MCPError):
            await call  # asks to connect again: the record is gone
    assert await store.get_connection(stack.user(user), "mockhub") is None
    [renewed] = issued
    async with httpx.AsyncClient() as http:
        answer = await http.get(
            f"{stack.providers_url}/mockhub/user",
            headers={"Authorization": f"Bearer {renewed.access_token}"},
        )
    assert answer.status_code == 401  # nothing of the disconnected grant still works


# --- 6. incremental scopes ------------------------------------------------------------------------


async def test_a_tool_needing_more_scopes_asks_for_the_union(
    stack: LifecycleStack, store: Store, browser: Browser
) -> None:
    user = "scopes-user"
    await connect(stack.instances[0], user)
    async with legacy_client(stack.instances[1], user) as (client, recorder):
        error = await elicitation_of(client, "mockhub_repos")
        [pending] = await connections(client)
        assert pending["scopes"] == ["read:user"]

        elicitation = error.elicitations[0]
        consent = await browser.complete_connect(elicitation.url, username=user, consent=False)
        assert asked_scopes(browser) == [["read:user", "repo"]]
        assert "repo" in consent.text and "read:user" in consent.text
        [opened] = await connections(client)
        assert opened["scopes"] == ["read:user"]  # the old grant stays until the new one arrives

        page = await browser.complete_connect(str(consent.url), username=user)
        assert page.status_code == 200, page.text
        await wait_completed(recorder, elicitation.elicitation_id)
        answer = profile(await client.call_tool("mockhub_repos", {}))
        assert set(answer["scopes"]) == {"read:user", "repo"}
        [entry] = await connections(client)
        assert entry["scopes"] == ["read:user", "repo"]
        assert profile(await client.call_tool("whoami", {}))["login"] == "octocat"

        # A tool needing only `gist` asks for it plus everything the grant already has,
        # so the tools that worked before keep working.
        gists = await complete_flow(client, recorder, browser, user, tool="mockhub_gists")
        assert set(profile(gists)["scopes"]) == {"gist", "read:user", "repo"}
        assert asked_scopes(browser)[-1] == ["gist", "read:user", "repo"]
        assert set(profile(await client.call_tool("mockhub_repos", {}))["scopes"]) >= {"read:user", "repo"}

    stored = await store.get_connection(stack.user(user), "mockhub")
    assert stored is not None and set(stored.tokens.scopes) == {"gist", "read:user", "repo"}


# --- 7. two accounts at one provider --------------------------------------------------------------


async def test_two_accounts_at_one_provider(stack: LifecycleStack, browser: Browser) -> None:
    user = "two-accounts-user"
    await connect(stack.instances[0], user, login="octocat")
    async with legacy_client(stack.instances[1], user) as (client, recorder):
        hubot = profile(
            await complete_flow(client, recorder, browser, user, login="hubot", args={"account": "hubot"})
        )
        assert hubot["login"] == "hubot"
        octocat = profile(await client.call_tool("whoami", {"account": "octocat"}))
        again = profile(await client.call_tool("whoami", {"account": "hubot"}))
        assert (octocat["login"], again["login"]) == ("octocat", "hubot")
        assert octocat["id"] != again["id"]
        by_id = profile(await client.call_tool("whoami", {"account": str(again["id"])}))
        assert by_id["login"] == "hubot"
        listed = await connections(client)
        assert sorted((c["provider"], c["account_label"]) for c in listed) == [
            ("mockhub", "hubot"),
            ("mockhub", "octocat"),
        ]
        assert {c["account"] for c in listed} == {str(octocat["id"]), str(again["id"])}


# --- 8. the provider is down ----------------------------------------------------------------------


async def test_token_endpoint_failing_gives_a_clear_error_and_keeps_the_grant(
    stack: LifecycleStack, store: Store
) -> None:
    user, hub = "provider-down-user", stack.mockhub
    await connect(stack.instances[0], user)
    held = await expire_stored(store, stack.user(user), "mockhub")
    mark = len(hub.token_requests)
    async with legacy_client(stack.instances[1], user) as (client, _):
        hub.token_endpoint_mode = "500"
        try:
            failed = await client.call_tool("whoami", {})
        finally:
            hub.token_endpoint_mode = "ok"
        # A tool error, not -32042 (the grant may be fine, the provider failed) nor -32603.
        text = tool_error_text(failed)
        assert failed.structured_content == {
            "provider": "mockhub",
            "status": None,
            "retry_after": 1,
            "reconnect": False,
        }
        assert "MockHub" in text and "refresh" in text
        assert leaks(hub.issued_access_tokens | hub.issued_refresh_tokens, [text]) == []
        [entry] = await connections(client)
        assert entry["status"] == "ok"
        await anyio.sleep(FAILURE_COOLDOWN + 0.2)  # callers within the cooldown share the failure
        assert profile(await client.call_tool("whoami", {}))["login"] == "octocat"

    records = [(r.grant_type, r.ok, r.error) for r in hub.token_requests[mark:]]
    assert records == [("refresh_token", False, "fault:500"), ("refresh_token", True, None)]
    after = await store.get_connection(stack.user(user), "mockhub")
    assert after is not None and after.status is ConnectionStatus.OK
    assert after.tokens.refresh_token != held.tokens.refresh_token


async def test_token_endpoint_hanging_fails_within_the_http_timeout(
    stack: LifecycleStack, store: Store
) -> None:
    user, hub = "provider-hang-user", stack.mockhub
    await connect(stack.instances[0], user)
    await expire_stored(store, stack.user(user), "mockhub")
    mark = len(hub.token_requests)
    async with legacy_client(stack.instances[0], user) as (client, _):
        hub.token_endpoint_mode = "hang"
        start = time.monotonic()
        try:
            failed = await client.call_tool("whoami", {})
        finally:
            hub.token_endpoint_mode = "ok"
        elapsed = time.monotonic() - start
        assert elapsed < 3 * HTTP_TIMEOUT
        assert "MockHub" in tool_error_text(failed)
        [entry] = await connections(client)
        assert entry["status"] == "ok"
        # The failed refresher released the lock: after the short cooldown the next call refreshes.
        await anyio.sleep(FAILURE_COOLDOWN + 0.2)  # the server's real clock past the cooldown
        start = time.monotonic()
        assert profile(await client.call_tool("whoami", {}))["login"] == "octocat"
        assert time.monotonic() - start < 3 * HTTP_TIMEOUT
    assert [(r.ok, r.error) for r in hub.token_requests[mark:]] == [(False, "fault:hang"), (True, None)]


async def test_refresh_storm_while_the_token_endpoint_fails_sends_one_refresh(
    stack: LifecycleStack, store: Store
) -> None:
    user, hub = "storm-down-user", stack.mockhub
    await connect(stack.instances[0], user)
    await expire_stored(store, stack.user(user), "mockhub")
    mark = len(hub.token_requests)
    async with contextlib.AsyncExitStack() as exits:
        clients = [
            (await exits.enter_async_context(legacy_client(stack.instances[i % 2], user)))[0]
            for i in range(4)
        ]

        async def call(i: int) -> bool:
            return bool((await clients[i % len(clients)].call_tool("whoami", {})).is_error)

        hub.token_endpoint_mode = "500"
        try:
            outcomes = await asyncio.gather(*(call(i) for i in range(STORM_CALLS)))
        finally:
            hub.token_endpoint_mode = "ok"
    assert all(outcomes)  # each a tool error the model reads
    assert refreshes_since(hub.token_requests, mark) <= 2


# --- 9. API keys on our own page ------------------------------------------------------------------


async def test_api_key_page_checks_and_stores_the_key_sealed(
    stack: LifecycleStack, store: Store, browser: Browser
) -> None:
    user, keys = "api-key-user", stack.mockkeys
    seen: list[Any] = []
    async with legacy_client(stack.instances[1], user) as (client, recorder):
        error = await elicitation_of(client, "whoami", {"provider": "keys"})
        seen.append(error.error.model_dump())
        elicitation = error.elicitations[0]
        page = await sign_in(browser, elicitation.url, user)
        assert page.status_code == 200, page.text
        assert str(page.url).startswith(f"{stack.public_url}/connect?")
        assert not any(urlsplit(u).path.startswith(PROVIDER_PATHS) for u in browser.visited)
        [key_input] = re.findall(r"<input[^>]*\bname=\"api_key\"[^>]*>", page.text)
        assert 'type="password"' in key_input
        [form] = [f for f in forms_in(page.text) if "api_key" in f.fields]
        assert form.method == "post" and form.action == "/connect/api-key"

        rejected = keys.rejected_requests
        wrong = await browser.submit(page, form, api_key="mk_" + "not-a-real-key" * 3)
        assert wrong.status_code == 400
        assert keys.rejected_requests == rejected + 1
        [form] = [f for f in forms_in(wrong.text) if "api_key" in f.fields]  # the form again
        assert await store.get_connection(stack.user(user), "keys") is None
        assert await connections(client) == []

        key = keys.issue("octocat")
        saved = await browser.submit(wrong, form, api_key=key)
        assert saved.status_code == 200, saved.text
        assert key not in saved.text
        await wait_completed(recorder, elicitation.elicitation_id)

        result = await client.call_tool("whoami", {"provider": "keys"})
        account = MockKeysAccount.for_login("octocat")
        assert profile(result) == {"id": account.id, "login": "octocat"}
        listed = await connections(client)
        assert [(c["provider"], c["account"], c["account_label"]) for c in listed] == [
            ("keys", str(account.id), "octocat")
        ]
        seen += [result.model_dump(), listed, recorder.notifications]

    stored = await store.get_connection(stack.user(user), "keys")
    assert stored is not None and stored.tokens.access_token == key  # it is the key, sealed
    raw = stack.raw_values()
    assert raw, "the prefix should hold the connection"
    for prefix in (b"", b"k", b'{"k":"'):  # the scan finds the key base64-encoded at any offset
        assert leaks([key], [base64.b64encode(prefix + key.encode() + b'"}')]) == [key]
        assert leaks([key], [base64.urlsafe_b64encode(prefix + key.encode())]) == [key]
    assert leaks([key], raw) == []
    assert leaks([key], [dumped(*seen)]) == []


# --- 10. audit events -----------------------------------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def audit_lines() -> Iterator[list[str]]:
    logger = logging.getLogger("mcp_url_connect.audit")
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_audit_events_name_who_and_never_a_token(stack: LifecycleStack, store: Store) -> None:
    user, hub = "audit-user", stack.mockhub
    with audit_lines() as lines:
        await connect(stack.instances[0], user)
        held = await expire_stored(store, stack.user(user), "mockhub")
        async with legacy_client(stack.instances[1], user) as (client, _):
            assert profile(await client.call_tool("whoami", {}))["login"] == "octocat"
            result = await client.call_tool("disconnect", {"provider": "mockhub"})
            assert not result.is_error

    events = [json.loads(line) for line in lines]
    mine = [e for e in events if e.get("sub") == user]
    expected = {
        "iss": stack.settings.auth_issuer,
        "sub": user,
        "provider": "mockhub",
        "account": held.key.account,
    }
    for name in ("connect", "token.use", "refresh", "disconnect"):
        found = [e for e in mine if e["event"] == name]
        assert found, f"no {name!r} audit event in {mine}"
        assert all({k: e.get(k) for k in expected} == expected for e in found), found
    assert [e["revoked"] for e in mine if e["event"] == "disconnect"] == [True]
    tokens = hub.issued_access_tokens | hub.issued_refresh_tokens
    assert held.tokens.access_token in tokens
    assert leaks(tokens, lines) == []
