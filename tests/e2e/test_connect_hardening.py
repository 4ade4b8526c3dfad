"""Review findings, each pinned by a test: no side effects on GET, CSRF on POST, one redirect URI
per provider, and a store failure mid-callback fails the flow closed."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from mcp_types import TextContent

from mock_providers.testing.browser import Browser, callback_location, forms_in
from mock_providers.testing.client import legacy_elicitation, mcp_client
from mock_providers.testing.servers import DemoServers
from tests.support.demo_store import connection_rows
from token_store import StoreUnavailable

pytestmark = pytest.mark.e2e


async def _unused(params: Any) -> str:
    return "accept"


def elicitation_status(servers: DemoServers) -> list[str]:
    with sqlite3.connect(servers.store_file) as db:
        return [row[0] for row in db.execute("SELECT status FROM elicitations")]


async def test_confirmation_post_without_csrf_leaves_the_link_pending(
    servers: DemoServers, browser: Browser
) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=_unused) as (client, _):
        url = (await legacy_elicitation(client)).elicitations[0].url
        browser.http.follow_redirects = True
        page = await browser.get(url)
        login = forms_in(page.text)[0]
        confirm = await browser.submit(page, login, username="alice")
        assert "You are signed in here as <strong>alice</strong>" in confirm.text
        reloaded = await browser.get(url)  # GET has no side effect: reloading works
        assert reloaded.status_code == 200
        assert elicitation_status(servers) == ["pending"]
        [form] = [f for f in forms_in(confirm.text) if "elicitationId" in f.fields]
        forged = await browser.http.post(
            f"{servers.public_url}/connect", data={"elicitationId": form.fields["elicitationId"]}
        )
        assert forged.status_code == 403
        assert elicitation_status(servers) == ["pending"]


async def test_callback_on_another_providers_redirect_uri_is_a_mixup(
    servers: DemoServers, browser: Browser
) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=_unused) as (client, _):
        url = (await legacy_elicitation(client)).elicitations[0].url
        location = urlsplit(await callback_location(browser, url))
        assert location.path == "/callback/mockhub"
        wrong = urlunsplit(location._replace(path="/callback/otherhub"))
        page = await browser.get(wrong)
        assert page.status_code == 400
        assert servers.mockhub.token_requests == []
        assert connection_rows(servers) == []


async def test_store_failure_after_the_exchange_fails_the_flow_closed(
    servers: DemoServers, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = servers.apps["mcp"].state.runtime.store

    async def unavailable(connection: object, elicitation_id: str) -> None:
        raise StoreUnavailable("injected")

    monkeypatch.setattr(store, "complete_elicitation", unavailable)
    async with mcp_client(servers, "alice", "legacy", on_url=_unused) as (client, rec):
        elicitation = (await legacy_elicitation(client)).elicitations[0]
        page = await browser.complete_connect(elicitation.url, username="alice")
        assert page.status_code == 503
        assert connection_rows(servers) == []
        assert elicitation_status(servers) == ["failed"]
        # The session is told its flow ended without a connection, and its retry says so as a
        # tool error instead of a link to a flow that cannot finish.
        with anyio.fail_after(5):
            await rec.completed.wait()
        assert rec.completed_ids() == [elicitation.elicitation_id]
        retry = await client.call_tool("whoami", {})
        assert retry.is_error and isinstance(retry.content[0], TextContent), retry
        assert "could not reach its storage" in retry.content[0].text
        assert connection_rows(servers) == []


async def test_oversized_forms_get_a_4xx_not_a_500(servers: DemoServers, browser: Browser) -> None:
    """Anonymous and signed-in posts with too many or too large fields: a clear 4xx, never a 500."""
    body = {f"f{i}": "x" * 2000 for i in range(50)}
    await browser.complete_connect(f"{servers.public_url}/connections", username="alice")
    for path in ("/logout", "/connect", "/connections/disconnect"):
        response = await browser.http.post(f"{servers.public_url}{path}", data=body)
        assert 400 <= response.status_code < 500, (path, response.status_code)
