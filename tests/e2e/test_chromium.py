"""The pages in a real browser: headless Chromium (Debian's) driven by Playwright.

Skips on a laptop without Chromium; in CI (CI=true) a missing browser is a failure.

With MCPUC_SCREENSHOTS set to a directory, the tests also save a PNG of every page there:
`MCPUC_SCREENSHOTS=docs/screenshots pytest tests/e2e/test_chromium.py` refreshes the
screenshots docs/pages.md shows.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from mock_providers.testing.client import legacy_elicitation, mcp_client
from mock_providers.testing.replicas import LifecycleStack, elicitation_of, legacy_client
from mock_providers.testing.servers import DemoServers
from tests.needs import need_redis
from tests.support.chromium import headless_chromium
from tests.support.demo_store import connection_rows

pytestmark = pytest.mark.e2e

# Colours of connect_routes/static/mcpuc.css: the page background, the primary buttons.
PAGE_BACKGROUND, ACCENT = "rgb(244, 246, 249)", "rgb(36, 84, 199)"


@dataclass
class Tab:
    """A Chromium page and the console errors it logged (a CSP violation would be one)."""

    page: Any
    console_errors: list[str] = field(default_factory=list)

    async def snap(self, name: str) -> None:
        """Save `<MCPUC_SCREENSHOTS>/<name>.png` when that variable names a directory."""
        directory = os.environ.get("MCPUC_SCREENSHOTS")
        if directory:
            await self.page.screenshot(path=str(Path(directory) / f"{name}.png"), full_page=True)

    async def _background(self, where: Any) -> str:
        element = self.page.locator(where) if isinstance(where, str) else where
        color: str = await element.evaluate("e => getComputedStyle(e).backgroundColor")
        return color

    async def assert_styled(self) -> None:
        """Our stylesheet applied (same origin, allowed by the CSP) and no CSP violation logged."""
        assert await self._background("html") == PAGE_BACKGROUND
        primary = self.page.locator("button:not(.secondary):not(.danger)")
        if await primary.count():
            assert await self._background(primary.first) == ACCENT
        assert not [e for e in self.console_errors if "Content Security Policy" in e], self.console_errors


@pytest.fixture
async def tab() -> AsyncIterator[Tab]:
    async with headless_chromium() as browser:
        context = await browser.new_context(viewport={"width": 900, "height": 640})
        opened = Tab(await context.new_page())
        opened.page.on(
            "console", lambda m: opened.console_errors.append(m.text) if m.type == "error" else None
        )
        yield opened


@pytest.fixture
def page(tab: Tab) -> Any:
    return tab.page


async def _unused(params: Any) -> str:
    return "accept"


async def test_connect_flow_in_chromium(servers: DemoServers, tab: Tab) -> None:
    page = tab.page
    async with mcp_client(servers, "alice", "legacy", on_url=_unused) as (client, recorder):
        error = await legacy_elicitation(client)
        await page.goto(error.elicitations[0].url)

        # The dev AS login page: a username field, no password, marked development-only, saying
        # what the sign-in is for; styled by our stylesheet, served by the mock providers too.
        assert await page.locator("input[name=username]").count() == 1
        assert await page.locator("input[type=password]").count() == 0
        assert "development" in (await page.content()).lower()
        assert "to connect MockHub for the MCP client mcp" in await page.content()  # SDK's default name
        await tab.assert_styled()
        await tab.snap("dev-as-login")
        await page.fill("input[name=username]", "alice")
        await page.click("button[type=submit], input[type=submit]")

        # Our confirmation page names the signed-in account and the client that asked; its POST
        # goes on to mockhub.
        await page.wait_for_selector("text=You are signed in here as")
        assert "alice" in await page.content()
        assert "Asked by</dt><dd>mcp</dd>" in await page.content()
        await tab.assert_styled()
        await tab.snap("confirm")
        await page.click('form[action="/connect"] button:not([formaction])')

        # mockhub's consent page, then our success page.
        await page.wait_for_selector("button[name=decision][value=approve]")
        await page.fill("input[name=login]", "octocat")
        await tab.snap("mockhub-consent")
        await page.click("button[name=decision][value=approve]")
        await page.wait_for_selector("text=Connected to MockHub")
        assert "return to your MCP client" in await page.content()
        await tab.assert_styled()
        await tab.snap("connected")

        with anyio.fail_after(10):
            await recorder.completed.wait()
        assert [row[0] for row in connection_rows(servers)] == ["alice"]

        # Our session cookie, as the browser stored it.
        cookies = {c["name"]: c for c in await page.context.cookies(servers.public_url)}
        session = cookies["mcpuc_session"]
        assert session["httpOnly"] is True
        assert session["sameSite"] == "Lax"

        # The connections page lists the account; disconnect is a CSRF-protected POST.
        await page.goto(f"{servers.public_url}/connections")
        assert "octocat" in await page.content()
        await tab.assert_styled()
        await tab.snap("connections")
        await page.click("text=Disconnect")
        await page.wait_for_selector("text=No connections yet")
        assert connection_rows(servers) == []
        # What happened, from a flash value in the session (the URL names no account).
        assert "Disconnected MockHub account <strong>octocat</strong>" in await page.content()
        assert "confirmed the access is revoked" in await page.content()
        assert page.url == f"{servers.public_url}/connections"
        await tab.snap("connections-empty")

        await page.click("text=Sign out")
        await page.wait_for_selector("text=You are signed out of this server")
        assert await page.locator('a[href="/connections"]').count() == 1
        await tab.assert_styled()
        await tab.snap("signed-out")


async def _sign_in_at_confirmation(tab: Tab, url: str, username: str) -> None:
    await tab.page.goto(url)
    await tab.page.fill("input[name=username]", username)
    await tab.page.click("button[type=submit]")
    await tab.page.wait_for_selector("text=You are signed in here as")


async def test_refusal_pages_in_chromium(servers: DemoServers, tab: Tab) -> None:
    """The pages a user meets when a link is not theirs, has expired, or the provider refused."""
    page = tab.page
    async with mcp_client(servers, "bob", "legacy", on_url=_unused) as (bob, _):
        bobs_url = (await legacy_elicitation(bob)).elicitations[0].url
    async with mcp_client(servers, "alice", "legacy", on_url=_unused) as (alice, _):
        alices_url = (await legacy_elicitation(alice)).elicitations[0].url
        await _sign_in_at_confirmation(tab, alices_url, "alice")

        response = await page.goto(bobs_url)
        assert response.status == 403
        assert "another account" in await page.content()
        assert "You are signed in here as <strong>alice</strong>" in await page.content()
        assert await page.locator('form[action="/logout"] input[name=next]').count() == 1
        await tab.assert_styled()
        await tab.snap("not-your-link")

        response = await page.goto(f"{servers.public_url}/connect?elicitationId={'A' * 43}")
        assert response.status == 404
        assert "Link expired" in await page.content()
        await tab.assert_styled()
        await tab.snap("link-expired")

        # Alice denies at MockHub: our page names the provider's answer; nothing is stored.
        await page.goto(alices_url)
        await page.click('form[action="/connect"] button:not([formaction])')
        await page.wait_for_selector("button[name=decision][value=deny]")
        await page.click("button[name=decision][value=deny]")
        await page.wait_for_selector("text=did not grant access")
        assert "access_denied" in await page.content()
        await tab.assert_styled()
        await tab.snap("provider-error")
        assert connection_rows(servers) == []

        # Bob's link again: sign out and continue as bob (a fresh sign-in at the dev AS), then
        # Cancel on his confirmation page.
        await page.goto(bobs_url)
        await page.click('form[action="/logout"] button[type=submit]')
        await page.fill("input[name=username]", "bob")
        await page.click("button[type=submit]")
        await page.wait_for_selector("text=You are signed in here as")
        assert "<strong>bob</strong>" in await page.content()
        assert page.url == bobs_url
        await page.click('button[formaction="/connect/cancel"]')
        await page.wait_for_selector("text=Connection cancelled")
        await tab.assert_styled()
        await tab.snap("cancelled")
        response = await page.goto(bobs_url)
        assert response.status == 409


@pytest.fixture
def keys_stack(tmp_path: Path) -> Iterator[LifecycleStack]:
    """The only stack with an API-key provider (`keys`, MockKeys) runs on Redis."""
    need_redis()
    running = LifecycleStack(tmp_path)
    try:
        yield running.start()
    finally:
        running.stop()


async def test_api_key_page_in_chromium(keys_stack: LifecycleStack, tab: Tab) -> None:
    async with legacy_client(keys_stack.instances[0], "alice") as (client, _):
        error = await elicitation_of(client, "whoami", {"provider": "keys"})
        await _sign_in_at_confirmation(tab, error.elicitations[0].url, "alice")
    assert await tab.page.locator("input[type=password][name=api_key]").count() == 1
    await tab.assert_styled()
    await tab.snap("api-key")


async def test_stylesheet_and_favicon_are_served(servers: DemoServers, tab: Tab) -> None:
    css = await tab.page.request.get(f"{servers.public_url}/static/mcpuc.css")
    assert css.status == 200 and css.headers["content-type"].startswith("text/css")
    assert "button" in await css.text()
    icon = await tab.page.request.get(f"{servers.public_url}/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] == "image/vnd.microsoft.icon"
    assert (await icon.body())[:4] == b"\x00\x00\x01\x00"  # ICO header


async def test_pages_send_security_headers(servers: DemoServers, page: Any) -> None:
    response = await page.goto(f"{servers.public_url}/connect?elicitationId=not*valid")
    assert response.status == 400
    headers = response.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "'unsafe-inline'" not in headers["content-security-policy"]  # styles: /static/mcpuc.css
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
