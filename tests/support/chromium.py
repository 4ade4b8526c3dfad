"""Debian's headless Chromium under Playwright, for the page tests and the Inspector tests.

Playwright downloads no browser here: it drives the system `chromium`. A test that needs it skips
without it on a laptop and fails in CI (tests/needs.py).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.needs import HOW_TO_GET, skip_or_fail_in_ci

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


@asynccontextmanager
async def headless_chromium() -> AsyncIterator[Any]:
    """A fresh browser (Playwright's `Browser`), closed on the way out."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        async_playwright = None
    if CHROMIUM is None or async_playwright is None:
        skip_or_fail_in_ci("headless Chromium and playwright", HOW_TO_GET["chromium"])
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()
