"""Steps of the connect flow, cut where an attacker would cut them, for both protocol revisions."""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import itsdangerous
import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import URL_ELICITATION_REQUIRED

from connect_routes.browser_session import cookie_name
from mock_providers import mint_access_token
from mock_providers.testing.browser import Browser, Form, forms_in
from mock_providers.testing.client import ACCEPT, Recorder, mcp_client
from tests.security.attack import Servers, servers_of
from tests.support.login import sign_in
from token_store import Connection, ConnectionKey, TokenSet, UserRef

MODERN = "2026-07-28"


async def manual(params: Any) -> str:
    """The elicitation callback of a client driven by hand (a 2026-07-28 SDK loop never runs)."""
    return "accept"


@dataclass
class Elicited:
    """A pending elicitation created through the MCP leg, with the client that asked (still open)."""

    mode: str
    user: str
    client: Client
    recorder: Recorder
    url: str
    request_state: str | None
    first: Any  # the -32042 error or the InputRequiredResult

    @property
    def elicitation_id(self) -> str:
        return parse_qs(urlsplit(self.url).query)["elicitationId"][0]


async def settled(e: Elicited) -> None:
    """The legitimate completion notification (2025-11-25) has arrived: an attack that follows
    cannot be confused with it. 2026-07-28 flows send none."""
    if e.mode == "legacy":
        await e.recorder.wait_completed(e.elicitation_id)


async def ask(client: Client, mode: str, tool: str = "whoami", args: dict[str, Any] | None = None) -> Any:
    """Call a tool that needs a connection; the -32042 error (legacy) or the InputRequiredResult."""
    if mode == "legacy":
        with pytest.raises(MCPError) as raised:
            await client.session.call_tool(tool, args or {})
        assert raised.value.error.code == URL_ELICITATION_REQUIRED, raised.value.error
        return UrlElicitationRequiredError.from_error(raised.value.error)
    result = await client.session.call_tool(tool, args or {}, allow_input_required=True)
    assert isinstance(result, mcp_types.InputRequiredResult), result
    return result


def url_of(first: Any) -> str:
    if isinstance(first, UrlElicitationRequiredError):
        return str(first.elicitations[0].url)
    [request] = (first.input_requests or {}).values()
    return str(request.params.url)


@asynccontextmanager
async def elicit(servers: Servers, user: str, mode: str) -> AsyncIterator[Elicited]:
    """`user`'s MCP client calls whoami and gets a connect URL; the client stays open (legacy: its
    GET stream is where a completion notification would arrive)."""
    async with mcp_client(servers, user, mode, on_url=manual) as (client, recorder):
        first = await ask(client, mode)
        state = getattr(first, "request_state", None)
        yield Elicited(mode, user, client, recorder, url_of(first), state, first)


async def retry(e: Elicited) -> Any:
    """The client's retry after the browser leg: the tool's result, or the error/next round."""
    if e.mode == "legacy":
        return await e.client.session.call_tool("whoami", {})
    return await e.client.session.call_tool(
        "whoami", {}, allow_input_required=True, input_responses=ACCEPT, request_state=e.request_state
    )


# ---- the browser leg -------------------------------------------------------------------------


async def sign_in_to_connections(browser: Browser, servers: Servers, username: str) -> httpx.Response:
    """Sign `browser` in as `username` (dev AS login) and land on /connections."""
    page = await sign_in(browser, f"{servers.public_url}/connections", username)
    assert page.status_code == 200 and f"Signed in as {username}" in page.text, page.text[:300]
    return page


def quick_session(browser: Browser, servers: Servers, username: str) -> None:
    """Sign `browser` in without the dev AS round trips: a session exactly as `start_session` writes
    it (fresh random browser id and CSRF token), signed with the demo's secret. The real login is
    attacked in test_browser.py; elsewhere it would only cost time."""
    value = forge_session(
        servers, sub=username, bid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32)
    )
    plant_session(browser, servers, value)


async def quick_sign_in(browser: Browser, servers: Servers, username: str) -> httpx.Response:
    """`quick_session`, then the /connections page (whose forms carry the CSRF token)."""
    quick_session(browser, servers, username)
    page = await browser.get(f"{servers.public_url}/connections")
    assert page.status_code == 200 and f"Signed in as {username}" in page.text, page.text[:300]
    return page


async def open_link(browser: Browser, url: str, username: str) -> httpx.Response:
    """GET the connect link as `username` (signing the browser in first if it has no session);
    the page it ends on (the confirmation page for the link's owner)."""
    if session_value(browser, servers_of(url)) is None:
        quick_session(browser, servers_of(url), username)
    page = await browser.get(url)
    for _ in range(3):
        login = next((f for f in forms_in(page.text) if "username" in f.fields), None)
        if login is None:
            break
        page = await browser.submit(page, login, username=username)
    return page


def confirm_form(page: httpx.Response) -> Form:
    [form] = [f for f in forms_in(page.text) if "elicitationId" in f.fields]
    return form


def csrf_of(page: httpx.Response) -> str:
    return next(f.fields["csrf"] for f in forms_in(page.text) if "csrf" in f.fields)


async def continue_to_provider(browser: Browser, servers: Servers, page: httpx.Response) -> str:
    """POST the confirmation form; the provider authorize URL it redirects to (not followed)."""
    form = confirm_form(page)
    answer = await browser.http.post(
        f"{servers.public_url}/connect", data=form.fields, follow_redirects=False
    )
    assert answer.status_code == 303, (answer.status_code, answer.text[:300])
    return str(answer.headers["location"])


async def consent(
    browser: Browser, authorize_url: str, *, login: str = "octocat", decision: str = "approve"
) -> str:
    """At mockhub: open the consent page and answer it; the redirect back to us (not followed)."""
    page = await browser.get(authorize_url)
    [form] = [f for f in forms_in(page.text) if "decision" in f.buttons]
    target = str(page.url.join(form.action or str(page.url)))
    answer = await browser.http.post(
        target, data={**form.fields, "login": login, "decision": decision}, follow_redirects=False
    )
    assert answer.status_code in (302, 303), (answer.status_code, answer.text[:300])
    location = str(answer.headers["location"])
    browser.visited.append(location)  # the canaries include codes and states the browser saw
    return location


async def until_callback(
    browser: Browser, servers: Servers, url: str, username: str, *, login: str = "octocat"
) -> str:
    """Walk a connect link up to the provider's redirect back to /callback; return that URL."""
    page = await open_link(browser, url, username)
    assert page.status_code == 200, (page.status_code, page.text[:300])
    return await consent(browser, await continue_to_provider(browser, servers, page), login=login)


async def connect_fully(
    browser: Browser, servers: Servers, url: str, username: str, *, login: str = "octocat"
) -> httpx.Response:
    callback = await until_callback(browser, servers, url, username, login=login)
    page = await browser.get(callback)
    assert page.status_code == 200, (page.status_code, page.text[:300])
    return page


def with_query(url: str, **changes: str | None) -> str:
    """`url` with query parameters replaced (None removes one)."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    for name, value in changes.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = value
    return parts._replace(query=httpx.QueryParams(query).__str__()).geturl()


def query_of(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


# ---- forged session cookies ------------------------------------------------------------------


class _Signer(itsdangerous.TimestampSigner):
    def __init__(self, secret: str, timestamp: int | None) -> None:
        super().__init__(secret)
        self._timestamp = timestamp

    def get_timestamp(self) -> int:
        return int(time.time()) if self._timestamp is None else self._timestamp


def forge_session(
    servers: Servers,
    *,
    sub: str = "alice",
    login_at: float | None = None,
    secret: str | None = None,
    signed_at: int | None = None,
    **fields: Any,
) -> str:
    """A session cookie value as Starlette's SessionMiddleware writes it (itsdangerous-signed
    base64 JSON), by default signed with the demo's session secret."""
    settings = servers.demo.settings
    session: dict[str, Any] = {
        "user": {"iss": settings.auth_issuer, "sub": sub},
        "login_at": int(time.time()) if login_at is None else login_at,
        "bid": "forged-browser-id-0123456789",
        "csrf": "forged-csrf-token-0123456789",
    }
    session.update(fields)
    return sign_session(servers, session, secret=secret, signed_at=signed_at)


def sign_session(
    servers: Servers, session: dict[str, Any], *, secret: str | None = None, signed_at: int | None = None
) -> str:
    """Any session dict, encoded and signed as Starlette's SessionMiddleware does."""
    data = base64.b64encode(json.dumps(session).encode())
    return _Signer(secret or servers.demo.settings.session_secret, signed_at).sign(data).decode()


def read_session(servers: Servers, value: str) -> dict[str, Any]:
    """Verify and decode a session cookie with the demo's secret."""
    data = itsdangerous.TimestampSigner(servers.demo.settings.session_secret).unsign(value.encode())
    decoded: dict[str, Any] = json.loads(base64.b64decode(data))
    return decoded


def session_cookie_name(servers: Servers) -> str:
    return cookie_name(servers.demo.settings)


def session_value(browser: Browser, servers: Servers) -> str | None:
    name = session_cookie_name(servers)
    values = [c.value for c in browser.http.cookies.jar if c.name == name and c.value]
    return values[-1] if values else None


def drop_session(browser: Browser, servers: Servers) -> None:
    """Forget `browser`'s session cookie here (its dev AS session stays)."""
    name = session_cookie_name(servers)
    for cookie in [c for c in browser.http.cookies.jar if c.name == name]:
        browser.http.cookies.jar.clear(cookie.domain, cookie.path, cookie.name)


def plant_session(browser: Browser, servers: Servers, value: str) -> None:
    """Replace `browser`'s session cookie with `value` (as a planted or forged cookie would)."""
    drop_session(browser, servers)
    browser.http.cookies.set(session_cookie_name(servers), value, domain=HOST_ONLY, path="/")


async def switch_account(
    browser: Browser, servers: Servers, username: str, next_path: str = "/connections"
) -> httpx.Response:
    """A signed-in browser signs in again as `username` the one way there is: `/login` shows who is
    signed in, the user presses "Sign out and continue" (a POST with the CSRF token) and signs in
    at the dev AS (asked again: `prompt=login`)."""
    page = await browser.http.get(f"{servers.public_url}/login", params={"next": next_path})
    assert page.status_code == 409, (page.status_code, page.text[:300])
    [form] = [f for f in forms_in(page.text) if "next" in f.fields]
    page = await browser.submit(page, form)
    [login] = [f for f in forms_in(page.text) if "username" in f.fields]
    return await browser.submit(page, login, username=username)


HOST_ONLY = "127.0.0.1"


async def seed_connection(servers: Servers, sub: str, account: str = "4242") -> Connection:
    """Store a connection for `sub` directly through the store API (setup for browser-only attacks)."""
    settings = servers.demo.settings
    now = time.time()
    connection = Connection(
        key=ConnectionKey(UserRef(iss=settings.auth_issuer, sub=sub), "mockhub", account),
        tokens=TokenSet(access_token="mhat_seeded_" + secrets.token_urlsafe(24), scopes=("read:user",)),
        account_label=f"{sub}-at-mockhub",
        connected_at=now,
        updated_at=now,
    )
    await servers.apps["mcp"].state.runtime.store.put_connection(connection)
    return connection


def bearer(servers: Servers, user: str, **kwargs: Any) -> str:
    return mint_access_token(servers.data_dir, user, **kwargs)
