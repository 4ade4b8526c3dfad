"""Signing a scripted browser in at the development authorization server, the way a user does."""

from __future__ import annotations

import httpx

from mock_providers.testing.browser import Browser, forms_in


async def sign_in(browser: Browser, url: str, username: str) -> httpx.Response:
    """Open `url`, passing the dev AS login as `username` when it asks (a redirect chain may ask
    more than once); the page after that."""
    page = await browser.get(url)
    for _ in range(3):
        login_form = next((f for f in forms_in(page.text) if "username" in f.fields), None)
        if login_form is None:
            return page
        page = await browser.submit(page, login_form, username=username)
    return page
