"""The pages in a real browser: headless Chromium (Debian's) driven by Playwright.

Skips on a laptop without Chromium; in CI (CI=true) a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mock_providers.testing.client import legacy_elicitation, mcp_client
from mock_providers.testing.servers import DemoServers
from tests.support.demo_store import connection_rows

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Flags for a closed network: no background calls home, no sandbox as root in CI.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        async_playwright = None
    if CHROMIUM is None or async_playwright is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the Chromium tests: install chromium and playwright (see .ci/run)")
        pytest.skip("headless Chromium or playwright not installed")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        context = await browser.new_context()
        yield await context.new_page()
        await browser.close()


async def _unused(params: Any) -> str:
    return "accept"


async def test_connect_flow_in_chromium(servers: DemoServers, page: Any, tmp_path: Path) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=_unused) as (client, recorder):
        error = await legacy_elicitation(client)
        await page.goto(error.elicitations[0].url)

        # The dev AS login page: a username field, no password, marked development-only.
        assert await page.locator("input[name=username]").count() == 1
        assert await page.locator("input[type=password]").count() == 0
        assert "development" in (await page.content()).lower()
        await page.fill("input[name=username]", "alice")
        await page.click("button[type=submit], input[type=submit]")

        # Our confirmation page names the signed-in account; its POST goes on to mockhub.
        await page.wait_for_selector("text=You are signed in here as")
        assert "alice" in await page.content()
        await page.click('form[action="/connect"] button[type=submit]')

        # mockhub's consent page, then our success page.
        await page.wait_for_selector("button[name=decision][value=approve]")
        await page.screenshot(path=str(tmp_path / "consent.png"))
        await page.fill("input[name=login]", "octocat")
        await page.click("button[name=decision][value=approve]")
        await page.wait_for_selector("text=Connected to MockHub")
        await page.screenshot(path=str(tmp_path / "connected.png"))
        assert "return to your MCP client" in await page.content()

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
        await page.click("text=Disconnect")
        await page.wait_for_selector("text=No connections yet")
        assert connection_rows(servers) == []


async def test_pages_send_security_headers(servers: DemoServers, page: Any) -> None:
    response = await page.goto(f"{servers.public_url}/connect?elicitationId=not*valid")
    assert response.status == 400
    headers = response.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
