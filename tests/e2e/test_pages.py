"""The newcomer-facing pages over real sockets: the confirmation page names the MCP client that
asked, its Cancel reaches the waiting client, the sign-in page says what it is for, and "Not
your link" lets the right account continue. The SDK client, the demo stack, a scripted browser."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mock_providers.testing.browser import Browser, Form, forms_in
from mock_providers.testing.client import Recorder, accept
from mock_providers.testing.stack import Mcpuc
from tests.support.login import sign_in

pytestmark = pytest.mark.e2e

CLIENT_NAME = "Claude <Desktop>"  # what the client says in `initialize`; markup must be escaped


def text_of(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@asynccontextmanager
async def named_client(mcpuc: Mcpuc, user: str, name: str) -> AsyncIterator[tuple[Client, Recorder]]:
    """A 2025-11-25 client that introduces itself as `name` (clientInfo.name)."""
    recorder = Recorder()
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {mcpuc.token(user)}"}, timeout=30)

    async def on_elicit(ctx: Any, params: Any) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action=await accept(params))  # type: ignore[arg-type]

    async with Client(
        streamable_http_client(mcpuc.mcp_url, http_client=http),
        mode="legacy",
        message_handler=recorder.on_message,
        elicitation_callback=on_elicit,
        client_info=mcp_types.Implementation(name=name, version="1.0"),
    ) as client:
        yield client, recorder


def form_to(page: Any, action: str) -> Form:
    [form] = [f for f in forms_in(page.text) if f.action == action]
    return form


async def test_the_confirmation_page_names_the_client_and_its_cancel_tells_the_client(
    mcpuc: Mcpuc, browser: Browser
) -> None:
    async with named_client(mcpuc, "alice", CLIENT_NAME) as (client, recorder):
        link = await mcpuc.connect_url(client, "whoami")
        # Signed out: the dev AS's sign-in page says what the sign-in is for.
        page = await browser.get(link.url)
        assert "to connect MockHub for the MCP client Claude &lt;Desktop&gt;" in page.text
        ours = [url for url in browser.visited if url.startswith(mcpuc.servers.public_url)]
        assert ours and not [url for url in ours if "MockHub" in url]  # in the session, not our URLs
        [login] = [f for f in forms_in(page.text) if "username" in f.fields]
        page = await browser.submit(page, login, username="alice")

        assert page.status_code == 200 and "You are signed in here as" in page.text
        assert "Asked by</dt><dd>Claude &lt;Desktop&gt;</dd>" in page.text
        assert "Asked at</dt><dd>" in page.text

        # Cancel is the confirmation form's second button (formaction): the same fields.
        assert 'formaction="/connect/cancel"' in page.text
        page = await browser.submit(page, replace(form_to(page, "/connect"), action="/connect/cancel"))
        assert page.status_code == 200 and "Connection cancelled" in page.text

        # 2025-11-25: the session that asked hears the flow ended; its retry says it was declined.
        await recorder.wait_completed(link.elicitation_id)
        retry = await client.call_tool("whoami", {})
        assert retry.is_error and "was declined" in text_of(retry), text_of(retry)
        again = await browser.get(link.url)
        assert again.status_code == 409


async def test_not_your_link_signs_out_and_continues_as_the_account_that_asked(
    mcpuc: Mcpuc, browser: Browser
) -> None:
    async with mcpuc.client("alice", "legacy") as client:
        link = await mcpuc.connect_url(client, "whoami")
        page = await sign_in(browser, link.url, "mallory")
        assert page.status_code == 403 and "signed in here as <strong>mallory</strong>" in page.text

        # Sign out and continue: a fresh sign-in at the dev AS (prompt=login), then the link.
        page = await browser.submit(page, form_to(page, "/logout"))
        [login] = [f for f in forms_in(page.text) if "username" in f.fields]
        page = await browser.submit(page, login, username="alice")
        assert page.status_code == 200 and "You are signed in here as <strong>alice</strong>" in page.text
        assert str(page.url) == link.url

        page = await browser.complete_connect(str(page.url), username="alice")
        assert "Connected to MockHub" in page.text
        result = await mcpuc.retry(client, link, "whoami")
        assert not result.is_error


async def test_the_disconnect_tool_names_the_account_label(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("alice", "legacy") as client:
        link = await mcpuc.connect_url(client, "whoami")
        await mcpuc.browser("alice").approve(link.url, login="octocat")
        await mcpuc.retry(client, link, "whoami")
        result = await client.call_tool("disconnect", {"provider": "mockhub"})
    answer = result.structured_content or {}
    assert answer["labels"] == ["octocat"]
    assert len(answer["disconnected"]) == 1 and answer["disconnected"] != ["octocat"]  # the id
    assert answer["revoked"] == answer["disconnected"]
