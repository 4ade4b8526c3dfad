"""The whole flow over real sockets: SDK client, demo server, dev AS, mockhub, scripted browser."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest

from mock_providers.testing.browser import Browser, page_name
from mock_providers.testing.client import legacy_elicitation, mcp_client
from mock_providers.testing.servers import DemoServers
from tests.support.demo_store import connection_rows
from tests.support.settle import quiet_for

pytestmark = pytest.mark.e2e


def assert_no_provider_tokens(servers: DemoServers, *texts: Any) -> None:
    """DESIGN invariant 6: no provider token in anything the MCP client received."""
    blob = " ".join(json.dumps(t, default=str) if not isinstance(t, str) else t for t in texts)
    issued = set(servers.mockhub.issued_access_tokens) | set(servers.mockhub.issued_refresh_tokens)
    assert issued, "the scenario should have issued provider tokens"
    for token in issued:
        assert token not in blob


async def test_legacy_full_flow(servers: DemoServers, browser: Browser) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=lambda p: _never(p)) as (client, rec):
        error = await legacy_elicitation(client)
        [elicitation] = error.elicitations
        assert elicitation.mode == "url"
        assert elicitation.url == f"{servers.public_url}/connect?elicitationId={elicitation.elicitation_id}"
        assert len(elicitation.elicitation_id or "") >= 40  # 256 bits, base64url

        page = await browser.complete_connect(elicitation.url, username="alice")
        assert page.status_code == 200, page.text
        assert "return to your MCP client" in page.text

        with anyio.fail_after(10):
            await rec.completed.wait()
        assert rec.completed_ids() == [elicitation.elicitation_id]

        result = await client.call_tool("whoami", {})
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["login"] == "octocat"
        assert_no_provider_tokens(servers, result.model_dump(), error.error.model_dump(), rec.notifications)


async def _never(params: Any) -> str:
    raise AssertionError("a legacy -32042 flow must not send elicitation/create")


async def test_stateless_full_flow(servers: DemoServers, browser: Browser) -> None:
    async def open_in_browser(params: Any) -> str:
        assert params.mode == "url"
        assert params.elicitation_id is None  # removed on 2026-07-28
        page = await browser.complete_connect(params.url, username="alice")
        assert page.status_code == 200
        return "accept"

    async with mcp_client(servers, "alice", "2026-07-28", on_url=open_in_browser) as (client, rec):
        result = await client.call_tool("whoami", {})  # -32042 here would raise MCPError
        assert not result.is_error, result
        assert result.structured_content is not None
        assert result.structured_content["login"] == "octocat"
        assert len(rec.elicitations) == 1
        assert_no_provider_tokens(servers, result.model_dump(), [e.model_dump() for e in rec.elicitations])


async def test_another_user_gets_403_and_nothing_is_stored(
    servers: DemoServers, browser: Browser, other_browser: Browser
) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=_never) as (client, rec):
        error = await legacy_elicitation(client)
        url = error.elicitations[0].url
        page = await other_browser.complete_connect(url, username="mallory")
        assert page.status_code == 403
        assert "another account" in page.text
        assert connection_rows(servers) == []
        assert servers.mockhub.token_requests == []
        # The link is still good for its owner: the refusal consumed nothing.
        page = await browser.complete_connect(url, username="alice")
        assert page.status_code == 200
        assert [row[0] for row in connection_rows(servers)] == ["alice"]
        with anyio.fail_after(10):
            await rec.completed.wait()


async def test_a_replayed_callback_never_exchanges_the_code_again(
    servers: DemoServers, browser: Browser, other_browser: Browser
) -> None:
    """The same callback again in its browser shows the first outcome; in another browser it is
    refused (400). One code exchange either way."""
    async with mcp_client(servers, "alice", "legacy", on_url=_never) as (client, _):
        error = await legacy_elicitation(client)
        first = await browser.complete_connect(error.elicitations[0].url, username="alice")
        callback = next(u for u in browser.visited if urlsplit(u).path == "/callback/mockhub")
        assert "code" in parse_qs(urlsplit(callback).query)
        replay = await browser.get(callback)
        assert replay.status_code == 200 and page_name(replay) == page_name(first)
        assert (await other_browser.get(callback)).status_code == 400
        exchanges = [r for r in servers.mockhub.token_requests if r.grant_type == "authorization_code"]
        assert len(exchanges) == 1


async def test_completion_goes_only_to_the_session_that_asked(servers: DemoServers, browser: Browser) -> None:
    async with (
        mcp_client(servers, "alice", "legacy", on_url=_never) as (client_a, rec_a),
        mcp_client(servers, "alice", "legacy", on_url=_never) as (client_b, rec_b),
    ):
        await client_b.list_tools()  # B is live, with its own GET stream open
        error = await legacy_elicitation(client_a)
        await browser.complete_connect(error.elicitations[0].url, username="alice")
        with anyio.fail_after(10):
            await rec_a.completed.wait()
        await quiet_for(0.5, "a second notification to A, or one to B")
        assert rec_a.completed_ids() == [error.elicitations[0].elicitation_id]
        assert rec_b.completed_ids() == []


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_client_without_url_mode_gets_a_fallback_result(
    servers: DemoServers, browser: Browser, mode: str
) -> None:
    async with mcp_client(servers, "alice", mode) as (client, _):  # no elicitation callback: no URL mode
        result = await client.call_tool("whoami", {})
        assert result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        assert f"{servers.public_url}/connect?elicitationId=" in text
        url = text[text.index(servers.public_url) :].split()[0]
        page = await browser.complete_connect(url, username="alice")
        assert page.status_code == 200
        retried = await client.call_tool("whoami", {})
        assert not retried.is_error
        assert retried.structured_content is not None
        assert retried.structured_content["login"] == "octocat"


async def test_provider_denial_stores_nothing(servers: DemoServers, browser: Browser) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=_never) as (client, _):
        error = await legacy_elicitation(client)
        page = await browser.complete_connect(error.elicitations[0].url, username="alice", decision="deny")
        assert page.status_code == 400
        assert "access_denied" in page.text
        assert connection_rows(servers) == []
        assert servers.mockhub.token_requests == []


async def test_rfc9207_issuer_mismatch_refuses_the_code(servers: DemoServers, browser: Browser) -> None:
    servers.mockhub.iss_mode = "wrong"
    async with mcp_client(servers, "alice", "legacy", on_url=_never) as (client, _):
        error = await legacy_elicitation(client)
        page = await browser.complete_connect(error.elicitations[0].url, username="alice")
        assert page.status_code == 400
        assert servers.mockhub.token_requests == []
        assert connection_rows(servers) == []


async def test_restart_keeps_the_connection(servers: DemoServers, browser: Browser) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=_never) as (client, _):
        error = await legacy_elicitation(client)
        await browser.complete_connect(error.elicitations[0].url, username="alice")
    servers.stop()
    restarted = DemoServers(
        servers.data_dir, port=servers.port, providers_port=servers.providers_port
    ).start()
    try:
        async with mcp_client(restarted, "alice", "legacy", on_url=_never) as (client, _):
            listed = await client.call_tool("list_connections", {})
            assert not listed.is_error
            assert "mockhub" in json.dumps(listed.structured_content)
            # The stored record survived the restart, which is what the embedded store promises.
    finally:
        restarted.stop()


async def test_unauthenticated_request_gets_401_with_metadata_pointer(servers: DemoServers) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            servers.mcp_url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert response.status_code == 401
        challenge = response.headers["www-authenticate"]
        assert "resource_metadata=" in challenge
        assert "/.well-known/oauth-protected-resource" in challenge
        metadata = (await http.get(f"{servers.public_url}/.well-known/oauth-protected-resource/mcp")).json()
        assert metadata["resource"] == servers.mcp_url
        assert metadata["authorization_servers"] == [servers.demo.settings.auth_issuer]


async def test_callback_in_another_browser_of_the_same_user_is_refused(
    servers: DemoServers, browser: Browser, other_browser: Browser
) -> None:
    """The browser that completes /callback must be the one that passed /connect (invariant 2)."""
    async with mcp_client(servers, "alice", "legacy", on_url=_never) as (client, rec):
        error = await legacy_elicitation(client)
        # Browser 1 passes /connect and reaches the consent page; it never submits it.
        page = await browser.complete_connect(error.elicitations[0].url, username="alice", consent=False)
        assert "decision" in page.text
        # Browser 2, signed in as alice too, approves the consent page of browser 1's flow.
        await other_browser.complete_connect(f"{servers.public_url}/connections", username="alice")
        result = await other_browser.complete_connect(str(page.url), username="alice")
        assert result.status_code == 403
        assert connection_rows(servers) == []
        assert servers.mockhub.token_requests == []
        # The session is told its flow ended without a connection, and its retry says why.
        with anyio.fail_after(5):
            await rec.completed.wait()
        assert rec.completed_ids() == [error.elicitations[0].elicitation_id]
        retry = await client.call_tool("whoami", {})
        assert retry.is_error and "refused" in retry.content[0].text
        assert connection_rows(servers) == []
