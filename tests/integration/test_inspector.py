"""The URL-elicitation flow in the MCP Inspector's web UI, in headless Chromium.

`@modelcontextprotocol/inspector` (exact version in tests/integration/node/package.json) connects
to the kit's MCP server with the user's bearer in an `Authorization` header and declares URL-mode
elicitation. A user calls `whoami` from its Tools page; the Inspector shows the connect link in
its "Elicitation Request" dialog. On 2025-11-25 the user follows it with "Open in Browser" (a real
Chromium tab through the dev login, our confirmation page and MockHub's consent) and the
Inspector retries by itself on `notifications/elicitation/complete`. On 2026-07-28 (no
notification) the user presses "I've completed it", or Cancel after finishing
in the browser. docs/clients.md describes what is tested; with MCPUC_SCREENSHOTS set to a
directory the first test saves what the user sees at the elicitation step there
(`MCPUC_SCREENSHOTS=docs/screenshots` refreshes docs/screenshots/inspector-url-elicitation.png).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mock_providers.testing import Mcpuc
from tests.integration.inspector import Inspector, InspectorUi, chromium_page, walk_connect_pages

pytestmark = pytest.mark.integration

SCREENSHOT = "inspector-url-elicitation.png"


@pytest.fixture
def era() -> str:
    return "legacy"


@pytest.fixture
def inspector(mcpuc: Mcpuc, tmp_path: Path, era: str) -> Iterator[Inspector]:
    started = Inspector(tmp_path / "inspector", mcpuc.mcp_url, mcpuc.token("alice"), era).start()
    yield started
    started.stop()


@pytest.fixture
async def ui(inspector: Inspector) -> AsyncIterator[InspectorUi]:
    async with chromium_page() as page:
        yield InspectorUi(page, inspector)


def assert_link_of(url: str, mcpuc: Mcpuc) -> None:
    assert url.startswith(mcpuc.mcp_url.removesuffix("/mcp") + "/connect?elicitationId=")


async def open_in_browser(ui: InspectorUi, url: str) -> Any:
    """The dialog's "Open in Browser": the Inspector opens `url` itself in a new tab (which our
    server then redirects to the dev login)."""
    requested: list[str] = []
    ui.page.context.on("request", lambda request: requested.append(request.url))
    async with ui.page.context.expect_page() as opened:
        await ui.dialog().get_by_role("button", name="Open in Browser").click()
    tab = await opened.value
    await tab.wait_for_load_state()
    assert url in requested, requested  # (the Inspector's own page makes requests meanwhile)
    return tab


@pytest.mark.parametrize("era", ["legacy"])
async def test_inspector_2025_11_25_retries_on_completion(ui: InspectorUi, mcpuc: Mcpuc) -> None:
    await ui.connect()
    await ui.page.get_by_text("MCP 2025-11-25", exact=True).wait_for()  # the protocol it negotiated
    await ui.call_tool("whoami")

    # The Inspector caught -32042 and shows the link in its URL-elicitation dialog.
    url = await ui.url_elicitation()
    assert_link_of(url, mcpuc)
    dialog = await ui.dialog().inner_text()
    assert "This tool needs access to your MockHub account" in dialog
    if directory := os.environ.get("MCPUC_SCREENSHOTS"):
        await ui.page.screenshot(path=str(Path(directory) / SCREENSHOT))

    # "Open in Browser" opens exactly that link; the user walks the pages in that tab.
    tab = await open_in_browser(ui, url)
    await ui.dialog().get_by_text("Waiting for completion...").wait_for()
    await walk_connect_pages(tab, "alice", "octocat")

    # notifications/elicitation/complete closes the dialog and the Inspector retries by itself:
    # nobody pressed "I've completed it".
    await ui.result_showing('"login": "octocat"')
    await ui.dialog().wait_for(state="hidden")  # closed (it fades out while the result appears)
    # Its message log shows the notification arriving from our server.
    await ui.page.get_by_text("notifications/elicitation/complete", exact=True).wait_for()


@pytest.mark.parametrize("era", ["modern"])
async def test_inspector_2026_07_28_retries_when_the_user_says_done(ui: InspectorUi, mcpuc: Mcpuc) -> None:
    await ui.connect()
    await ui.call_tool("whoami")
    url = await ui.url_elicitation()
    assert_link_of(url, mcpuc)
    # The Inspector says this is an InputRequiredResult whose answer is sent as a retry (MRTR).
    assert "INPUT_REQUIRED" in await ui.dialog().inner_text()

    tab = await open_in_browser(ui, url)
    await walk_connect_pages(tab, "alice", "octocat")
    # 2026-07-28 has no completion notification: the user tells the Inspector.
    await ui.dialog().get_by_role("button", name="I've completed it").click()
    await ui.result_showing('"login": "octocat"')


@pytest.mark.parametrize("era", ["modern"])
async def test_inspector_cancel_after_completing_in_the_browser_shows_the_account(
    ui: InspectorUi, mcpuc: Mcpuc
) -> None:
    """The user copies the link to their own browser, completes the flow there, comes back
    and presses Cancel (the dialog offers nothing else without "Open in Browser"). The connection is
    stored, so the answer is the account, not "declined"."""
    await ui.connect()
    await ui.call_tool("whoami")
    url = await ui.url_elicitation()
    await mcpuc.browser("alice").approve(url, login="octocat")
    assert await ui.dialog().get_by_role("button", name="I've completed it").count() == 0
    await ui.dialog().get_by_role("button", name="Cancel").click()
    shown = await ui.result_showing('"login": "octocat"')
    assert "declined" not in shown
