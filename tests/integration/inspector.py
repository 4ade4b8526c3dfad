"""The MCP Inspector (npm `@modelcontextprotocol/inspector`, tests/integration/node) for the tests,
and the headless Chromium (Debian's, driven by Playwright) that shows its web UI.

`Inspector` runs the Inspector's web UI and its Node backend (which holds the MCP connection) on
free loopback ports, for one server entry read from a config file (mode 0600: it carries the
user's bearer, which therefore never appears in argv). Its own API is protected by a random token,
passed to the UI in the query string as the Inspector prints it. `InspectorUi` is the few clicks a
user makes there. Without Node.js, the package or Chromium the tests skip locally and fail in CI.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mock_providers.testing.servers import HOST, free_port
from tests.integration.node_servers import NODE_DIR, NODE_MODULES, end_process, need_node
from tests.support.chromium import headless_chromium
from tests.support.settle import eventually

PACKAGE = "@modelcontextprotocol/inspector"
LAUNCHER = NODE_MODULES / PACKAGE / "clients" / "launcher" / "build" / "index.js"
MINIMUM_NODE = (22, 19)  # the package's engines field
START_TIMEOUT = 60.0  # seconds; it starts in about 3 s on a 2-core machine
SERVER_NAME = "mcp-url-connect"  # the entry in the config file, shown as the UI's title once connected
TOKEN_PARAMETER = "MCP_INSPECTOR_API_TOKEN"  # the query parameter (and env variable) of its API token

VIEWPORT = {"width": 1280, "height": 800}


class Inspector:
    """The Inspector's web UI for one streamable-HTTP server; `start()` waits until it answers."""

    def __init__(self, directory: Path, mcp_url: str, bearer: str, era: str) -> None:
        """`era` is the Inspector's protocolEra: "legacy" (2025-11-25) or "modern" (2026-07-28)."""
        self.node = need_node(PACKAGE, MINIMUM_NODE)
        self.directory = directory
        self.api_token = secrets.token_urlsafe(24)
        self.port = free_port()
        self.config = directory / "inspector.json"
        self.log = directory / "inspector.log"
        entry = {
            "type": "http",
            "url": mcp_url,
            "headers": {"Authorization": f"Bearer {bearer}"},
            "protocolEra": era,
            "elicitCapability": "url",  # the client capability it declares: URL-mode elicitation
        }
        self._config_text = json.dumps({"mcpServers": {SERVER_NAME: entry}})
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.port}/?{TOKEN_PARAMETER}={self.api_token}"

    def start(self) -> Inspector:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as config:
            config.write(self._config_text)
        env = {
            **os.environ,
            "HOME": str(self.directory),  # nothing of the user's ~/.mcp-inspector is read or written
            "MCP_STORAGE_DIR": str(self.directory),
            "MCP_INSPECTOR_SECRET_STORE": "memory",  # no keychain probe, no secrets file
            "MCP_AUTO_OPEN_ENABLED": "false",  # the test opens the browser itself
            "CLIENT_PORT": str(self.port),
            # Its MCP Apps sandbox and app origin listen too: free ports, not the fixed defaults.
            "MCP_SANDBOX_PORT": str(free_port()),
            "MCP_APP_ORIGIN_PORT": str(free_port()),
            TOKEN_PARAMETER: self.api_token,
        }
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [self.node, str(LAUNCHER), "--web", "--config", str(self.config)],
                cwd=NODE_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def answers() -> bool:
            if self._process.poll() is not None:
                raise AssertionError("the Inspector exited")
            return self._answers()

        try:
            eventually(answers, "the Inspector to answer", within=START_TIMEOUT, poll=0.1)
        except AssertionError as failed:
            code = self._process.poll()
            self.stop()
            output = self.output()
            raise RuntimeError(
                f"the Inspector did not start (exit code {code}); its output:\n{output}"
            ) from failed
        return self

    def _answers(self) -> bool:
        try:
            return httpx.get(f"http://{HOST}:{self.port}/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.replace(self.api_token, "<api token>")[-4000:]

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        end_process(process)


@asynccontextmanager
async def chromium_page() -> AsyncIterator[Any]:
    """A page of a fresh headless Chromium (Debian's; Playwright downloads no browser)."""
    async with headless_chromium() as browser:
        context = await browser.new_context(viewport=VIEWPORT)
        yield await context.new_page()


CONNECT_URL = re.compile(r"https?://\S+/connect\?elicitationId=[\w-]+")


@dataclass
class InspectorUi:
    """What a user does in the Inspector's web UI (2.12.0), by the labels it shows."""

    page: Any
    inspector: Inspector

    async def connect(self) -> None:
        await self.page.goto(self.inspector.ui_url)
        # Mantine's switch: its styled track covers the input, which is the labelled control.
        await self.page.get_by_role("switch", name=f'Connect or disconnect "{SERVER_NAME}"').click(force=True)
        await self.page.get_by_text("Connected", exact=True).wait_for()

    async def call_tool(self, name: str) -> None:
        await self.page.get_by_text("Tools", exact=True).click()
        await self.page.get_by_role("button", name=name, exact=True).click()
        await self.page.get_by_role("button", name="Execute Tool").click()

    def dialog(self) -> Any:
        return self.page.get_by_role("dialog")

    async def url_elicitation(self) -> str:
        """Waits for the URL-elicitation dialog; the link it shows."""
        dialog = self.dialog()
        await dialog.get_by_text("The server is requesting you visit:").wait_for()
        # The dialog fades in (CSS transitions): wait for them, so a screenshot shows it settled.
        await self.page.evaluate(
            "Promise.all(document.getAnimations()"
            ".filter(a => a.effect?.getTiming().iterations !== Infinity).map(a => a.finished))"
        )
        found = CONNECT_URL.search(await dialog.inner_text())
        assert found, await dialog.inner_text()
        return found.group(0)

    async def result_showing(self, expected: str, timeout_ms: float = 15_000) -> str:
        """Waits until the page shows `expected` (the result panel fills in after the retry);
        the page's text. Fails with that text if `expected` never appears."""
        try:
            await self.page.wait_for_function(
                "expected => document.body.innerText.includes(expected)", arg=expected, timeout=timeout_ms
            )
        except Exception as error:  # playwright's TimeoutError: say what the page showed instead
            shown = await self.page.inner_text("body")
            raise AssertionError(f"the Inspector never showed {expected!r}; it shows:\n{shown}") from error
        text: str = await self.page.inner_text("body")
        return text


async def walk_connect_pages(page: Any, user: str, login: str) -> None:
    """In a real browser tab opened on a connect link: the dev login, our confirmation page, MockHub's
    consent, ending on our success page (the same pages tests/e2e/test_chromium.py checks in detail)."""
    await page.fill("input[name=username]", user)
    await page.click("button[type=submit]")
    await page.wait_for_selector("text=You are signed in here as")
    await page.click('form[action="/connect"] button:not([formaction])')
    await page.wait_for_selector("button[name=decision][value=approve]")
    await page.fill("input[name=login]", login)
    await page.click("button[name=decision][value=approve]")
    await page.wait_for_selector("text=Connected to MockHub")
