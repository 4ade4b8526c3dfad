"""Browser-side attacks: CSRF, open redirects after login, session cookie attributes, session
fixation and lifetime, login CSRF, and the security headers of every page (RFC 9700 §4.7, §4.11;
RFC 6265bis; 2025-11-25 basic-authorization.mdx "Open Redirection")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from connect_routes.browser_session import session_middleware
from mock_providers.demo import build_dev_setup
from mock_providers.testing.browser import Browser, forms_in
from mock_providers.testing.client import MODES
from service.app import create_app
from tests.security.attack import Servers, attack, connection_records, elicitation_status, unique
from tests.security.flows import (
    bearer,
    csrf_of,
    elicit,
    forge_session,
    open_link,
    quick_sign_in,
    read_session,
    seed_connection,
    session_cookie_name,
    session_value,
    sign_in,
    sign_session,
    until_callback,
)
from tests.security.rpc import RawMcp, connect_url

pytestmark = pytest.mark.security


def forged_csrf_variants(other_sessions_csrf: str) -> dict[str, dict[str, Any]]:
    """Ways a cross-site form or script would try to pass the synchronizer-token check."""
    return {
        "no token": {"data": {}},
        "wrong token": {"data": {"csrf": "A" * 43}},
        "empty token": {"data": {"csrf": ""}},
        "token of another session": {"data": {"csrf": other_sessions_csrf}},
        "token in the query string": {"params": {"csrf": other_sessions_csrf}, "data": {}},
        "token in a header": {"headers": {"X-CSRF-Token": other_sessions_csrf}, "data": {}},
        "cross-site origin": {"headers": {"Origin": "https://evil.example"}, "data": {}},
    }


async def mallory_csrf(browsers: Any, servers: Servers) -> str:
    """A valid CSRF token, but of Mallory's own session."""
    return csrf_of(await quick_sign_in(browsers(), servers, unique("mallory")))


# ---- CSRF on every state-changing route ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_csrf_on_connect_confirmation(
    servers: Servers, browser: Browser, browsers: Any, mode: str
) -> None:
    """CSRF on POST /connect (missing, wrong, foreign, misplaced token): 403, link pending (RFC 9700 §4.7)."""
    alice = unique("alice")
    others = await mallory_csrf(browsers, servers)
    async with elicit(servers, alice, mode) as e:
        await open_link(browser, e.url, alice)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for name, forged in forged_csrf_variants(others).items():
                data = {"elicitationId": e.elicitation_id, **forged["data"]}
                answer = await browser.http.post(
                    f"{servers.public_url}/connect",
                    data=data,
                    params=forged.get("params"),
                    headers=forged.get("headers"),
                    follow_redirects=False,
                )
                a.status(answer, 403)
                a.check(elicitation_status(servers, e.elicitation_id) == "pending", f"{name}: still pending")


@pytest.mark.parametrize("mode", MODES)
async def test_csrf_on_api_key_entry(servers: Servers, browser: Browser, browsers: Any, mode: str) -> None:
    """CSRF on POST /connect/api-key: 403 before any key is read; the link stays pending (RFC 9700 §4.7)."""
    alice = unique("alice")
    others = await mallory_csrf(browsers, servers)
    async with elicit(servers, alice, mode) as e:
        await open_link(browser, e.url, alice)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for name, forged in forged_csrf_variants(others).items():
                data = {"elicitationId": e.elicitation_id, "api_key": "mk_attacker_key_0123456789"}
                answer = await browser.http.post(
                    f"{servers.public_url}/connect/api-key",
                    data={**data, **forged["data"]},
                    params=forged.get("params"),
                    headers=forged.get("headers"),
                )
                a.status(answer, 403)
                a.check(elicitation_status(servers, e.elicitation_id) == "pending", f"{name}: still pending")
            # Even with the right token, a key cannot stand in for an OAuth provider's grant.
            csrf = csrf_of(await browser.get(f"{servers.public_url}/connections"))
            data = {"elicitationId": e.elicitation_id, "api_key": "mk_attacker_key_0123456789", "csrf": csrf}
            a.status(await browser.http.post(f"{servers.public_url}/connect/api-key", data=data), 400)
            a.check(elicitation_status(servers, e.elicitation_id) == "pending", "an OAuth link takes no key")


async def test_csrf_on_disconnect(servers: Servers, browser: Browser, browsers: Any) -> None:
    """CSRF on POST /connections/disconnect: 403 and the connection is still there (RFC 9700 §4.7)."""
    alice = unique("alice")
    connection = await seed_connection(servers, alice)
    others = await mallory_csrf(browsers, servers)
    await quick_sign_in(browser, servers, alice)
    async with attack(servers, browsers=[browser]) as a:
        for forged in forged_csrf_variants(others).values():
            data = {"provider": "mockhub", "account": connection.key.account, **forged["data"]}
            answer = await browser.http.post(
                f"{servers.public_url}/connections/disconnect",
                data=data,
                params=forged.get("params"),
                headers=forged.get("headers"),
            )
            a.status(answer, 403)
        page = await browser.get(f"{servers.public_url}/connections")
        a.check(connection.account_label in page.text, "the connection is still listed")


async def test_csrf_on_logout(servers: Servers, browser: Browser, browsers: Any) -> None:
    """CSRF on POST /logout (logout CSRF): 403 and the session still works (RFC 9700 §4.7)."""
    alice = unique("alice")
    others = await mallory_csrf(browsers, servers)
    await quick_sign_in(browser, servers, alice)
    async with attack(servers, browsers=[browser]) as a:
        for forged in forged_csrf_variants(others).values():
            answer = await browser.http.post(
                f"{servers.public_url}/logout",
                data=forged["data"],
                params=forged.get("params"),
                headers=forged.get("headers"),
            )
            a.status(answer, 403)
        page = a.status(await browser.get(f"{servers.public_url}/connections"), 200)
        a.check(f"Signed in as {alice}" in page.text, "still signed in")


NON_ASCII_CSRF = {
    "/connect": {"elicitationId": "A" * 43},
    "/connect/api-key": {"elicitationId": "A" * 43, "api_key": "mk_0123456789"},
    "/connections/disconnect": {"provider": "mockhub", "account": "4242"},
    "/logout": {},
}


@pytest.mark.parametrize("path", list(NON_ASCII_CSRF))
async def test_csrf_token_with_non_ascii_characters_gets_403_not_500(
    servers: Servers, browser: Browser, path: str
) -> None:
    """CSRF check fed a non-ASCII token: 403 like any wrong token, never a 500 (RFC 9700 §4.7)."""
    alice = unique("alice")
    await seed_connection(servers, alice, account="4242")
    await quick_sign_in(browser, servers, alice)
    async with attack(servers, browsers=[browser]) as a:
        data = {**NON_ASCII_CSRF[path], "csrf": "é" * 43}
        a.status(await browser.http.post(f"{servers.public_url}{path}", data=data), 403)
        page = a.status(await browser.get(f"{servers.public_url}/connections"), 200)
        a.check(f"Signed in as {alice}" in page.text and "4242" in page.text, "nothing changed")


async def test_disconnect_form_cannot_name_another_users_connection(
    servers: Servers, browser: Browser
) -> None:
    """Forged disconnect form naming Alice's account: only Bob's own records are in reach (invariant 1)."""
    alice, bob = unique("alice"), unique("bob")
    alices = await seed_connection(servers, alice)
    page = await quick_sign_in(browser, servers, bob)
    async with attack(servers, browsers=[browser]) as a:
        for forged in (
            {"provider": "mockhub", "account": alices.key.account},
            {"provider": "mockhub", "account": alices.key.account, "sub": alice, "iss": "x", "user": alice},
        ):
            answer = await browser.http.post(
                f"{servers.public_url}/connections/disconnect",
                data={**forged, "csrf": csrf_of(page)},
                follow_redirects=False,
            )
            a.status(answer, 303)
        a.check(any(alice in record for record in connection_records(servers)), "Alice's record is intact")


# ---- open redirect after login ---------------------------------------------------------------

EVIL_NEXT = [
    "//evil.example",
    "https://evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "%2F%2Fevil.example",
    "/%2F%2Fevil.example",
    "https:evil.example",
    "/connections@evil.example",
    "/connections/../..//evil.example",
    "/connect?elicitationId=abcdefghijklmnop&next=https://evil.example",
    "javascript:alert(document.cookie)",
    "/connections\r\nLocation: https://evil.example",
]


async def test_login_next_cannot_leave_the_site(servers: Servers, browser: Browser) -> None:
    """Open redirect via /login?next= (//, \\, https:, encoded...): always /connections (RFC 9700 §4.11)."""
    await sign_in(browser, servers, unique("alice"))
    async with attack(servers, browsers=[browser]) as a:
        for evil in EVIL_NEXT:
            mark = len(browser.visited)
            page = a.status(await browser.http.get(f"{servers.public_url}/login", params={"next": evil}), 200)
            browser.visited += [str(r.url) for r in page.history] + [str(page.url)]
            a.check(str(page.url) == f"{servers.public_url}/connections", f"{evil!r} ended at {page.url}")
            hosts = {urlsplit(url).hostname for url in browser.visited[mark:]}
            a.check(hosts == {"127.0.0.1"}, f"{evil!r} visited {hosts}")
            [back] = [r for r in page.history if r.url.path == "/login/callback"]
            a.check(
                back.headers["location"] == "/connections", f"{evil!r}: Location {back.headers['location']}"
            )


# ---- cookie attributes -----------------------------------------------------------------------


def cookie_attributes(set_cookie: str) -> tuple[str, dict[str, str]]:
    name_value, *attributes = [part.strip() for part in set_cookie.split(";")]
    flags = {}
    for attribute in attributes:
        key, _, value = attribute.partition("=")
        flags[key.lower()] = value.lower()
    return name_value.partition("=")[0], flags


async def test_session_cookie_attributes_on_loopback_http(servers: Servers, browser: Browser) -> None:
    """Cookie theft by script or cross-site use: HttpOnly, SameSite=Lax, Path=/, host-only (RFC 6265bis)."""
    async with attack(servers, browsers=[browser]) as a:
        mark = servers.wire.mark()
        await sign_in(browser, servers, unique("alice"))
        set_cookies = [
            value
            for x in servers.exchanges("mcp", since=mark)
            for name, value in x.response_headers
            if name == "set-cookie"
        ]
        a.check(bool(set_cookies), "the login sets the session cookie")
        for header in set_cookies:
            name, flags = cookie_attributes(header)
            a.check(name == "mcpuc_session", f"cookie name {name}")
            a.check("httponly" in flags, "HttpOnly")
            a.check(flags.get("samesite") == "lax", "SameSite=Lax")
            a.check(flags.get("path") == "/", "Path=/")
            a.check("domain" not in flags, "host-only (no Domain)")


async def test_session_cookie_is_host_prefixed_and_secure_under_https(
    tmp_path: Path, servers: Servers
) -> None:
    """Cookie planting over http or from a sibling host: `__Host-` + Secure (RFC 6265bis §4.1.3.2)."""
    https = build_dev_setup("https://mcp.example.test", "http://127.0.0.1:9", tmp_path / "https").settings
    middleware = session_middleware(https)
    async with attack(servers) as a:
        a.check(middleware.kwargs["session_cookie"] == "__Host-mcpuc_session", "the __Host- prefix")
        a.check(middleware.kwargs["https_only"] is True, "Secure")
        a.check(middleware.kwargs["path"] == "/" and "domain" not in middleware.kwargs, "Path=/, no Domain")
        a.check(middleware.kwargs["same_site"] == "lax", "SameSite=Lax")
        app = create_app(https)  # the lifespan does not run: /login needs no store
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://mcp.example.test") as client:
            answer = await client.get("/login", params={"next": "/connections"})
        a.status(answer, 503)  # the AS at 127.0.0.1:9 does not answer; the session was written anyway
        name, flags = cookie_attributes(answer.headers["set-cookie"])
        a.check(name == "__Host-mcpuc_session", f"cookie name {name}")
        a.check("secure" in flags and "httponly" in flags, "Secure; HttpOnly")
        a.check(flags.get("path") == "/" and "domain" not in flags, "Path=/, no Domain")


@pytest.mark.parametrize("mode", MODES)
async def test_samesite_strict_would_break_the_callback_so_lax_is_used(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Why Lax, not Strict: without the cookie the callback answers 403 (RFC 6265bis §8.8).

    The provider redirects the browser to /callback: a cross-site, top-level GET navigation. A
    SameSite=Strict cookie is withheld on it, so the browser would arrive without its session.
    This replays exactly that request (the callback URL, no cookie) and shows the server then
    refuses the flow (403), as invariant 2 requires: with Strict every real flow would fail.
    Lax still withholds the cookie on cross-site POSTs and subresources, which CSRF tokens cover.
    """
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            async with httpx.AsyncClient() as strict_browser:  # what Strict would send: no cookie
                a.status(await strict_browser.get(callback), 403)
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")
            a.check(
                session_middleware(servers.demo.settings).kwargs["same_site"] == "lax", "the cookie is Lax"
            )


# ---- session fixation, rotation, lifetime, login CSRF ----------------------------------------


async def test_login_rotates_a_planted_session(servers: Servers, browser: Browser) -> None:
    """Session fixation: a planted pre-login session does not survive login; bid and CSRF change."""
    alice = unique("alice")
    planted = {"bid": "planted-bid-0123456789", "csrf": "planted-csrf-0123456789", "next": "/connections"}
    pre_login = sign_session(servers, planted)  # what Mallory obtained and planted before the login
    browser.http.cookies.set(session_cookie_name(servers), pre_login, domain="127.0.0.1", path="/")
    async with attack(servers, browsers=[browser]) as a:
        await sign_in(browser, servers, alice)
        first = session_value(browser, servers)
        assert first is not None
        session = read_session(servers, first)
        a.check(first != pre_login, "a new cookie value")
        a.check(session["bid"] != "planted-bid-0123456789", "a new browser id")
        a.check(session["csrf"] != "planted-csrf-0123456789", "a new CSRF token")
        a.check(
            set(session) == {"user", "login_at", "bid", "csrf"}, f"nothing carried over: {sorted(session)}"
        )
        # Mallory's copy of the planted cookie is still not signed in.
        async with httpx.AsyncClient(cookies={session_cookie_name(servers): pre_login}) as mallory:
            answer = a.status(await mallory.get(f"{servers.public_url}/connections"), 303)
            a.check(answer.headers["location"].startswith("/login?"), "Mallory's copy is signed out")
        # The CSRF token Mallory planted does not work for Alice's new session.
        posted = await browser.http.post(
            f"{servers.public_url}/logout", data={"csrf": "planted-csrf-0123456789"}
        )
        a.status(posted, 403)
        # Signing in again rotates once more.
        await browser.get(f"{servers.public_url}/login?next=/connections")
        second = session_value(browser, servers)
        assert second is not None
        a.check(read_session(servers, second)["bid"] != session["bid"], "every login gets a new browser id")


async def _login_callback_url(browser: Browser, servers: Servers, username: str) -> str:
    """Mallory's own login, stopped at the AS's redirect back to /login/callback (code + state)."""
    page = await browser.get(f"{servers.public_url}/login?next=/connections")
    [form] = [f for f in forms_in(page.text) if "username" in f.fields]
    target = str(page.url.join(form.action))
    answer = await browser.http.post(
        target, data={**form.fields, "username": username}, follow_redirects=False
    )
    while answer.headers.get("location", "").startswith(("/", servers.demo.settings.auth_issuer)):
        answer = await browser.http.get(
            str(answer.url.join(answer.headers["location"])), follow_redirects=False
        )
    location = answer.headers["location"]
    assert location.startswith(f"{servers.public_url}/login/callback?"), location
    browser.visited.append(location)
    return location


async def test_login_csrf_with_mallorys_login_callback_is_refused(
    servers: Servers, browser: Browser, other_browser: Browser
) -> None:
    """Login CSRF: Mallory's /login/callback opened in Alice's browser: 400 (RFC 6749 §10.12)."""
    alice, mallory = unique("alice"), unique("mallory")
    await sign_in(browser, servers, alice)
    callback = await _login_callback_url(other_browser, servers, mallory)
    async with attack(servers, browsers=[browser, other_browser]) as a:
        a.status(await browser.http.get(callback, follow_redirects=False), 400)
        page = a.status(await browser.get(f"{servers.public_url}/connections"), 200)
        a.check(f"Signed in as {alice}" in page.text, "Alice's browser is still Alice's")
        async with httpx.AsyncClient(follow_redirects=False) as fresh:
            a.status(await fresh.get(callback), 400)


async def test_session_past_its_absolute_lifetime_is_signed_out(servers: Servers) -> None:
    """Stale session: older than session_max_age (login_at or signature) is signed out (RFC 6819 §5.1.5)."""
    max_age = servers.demo.settings.session_max_age
    alice = unique("alice")
    connection = await seed_connection(servers, alice)
    stale = forge_session(servers, sub=alice, login_at=time.time() - max_age - 5)
    expired_signature = forge_session(servers, sub=alice, signed_at=int(time.time()) - max_age - 5)
    fresh = forge_session(servers, sub=alice, login_at=time.time() - max_age + 60)
    name = session_cookie_name(servers)
    async with attack(servers) as a:
        for cookie in (stale, expired_signature):
            async with httpx.AsyncClient(cookies={name: cookie}) as old:
                page = a.status(await old.get(f"{servers.public_url}/connections"), 303)
                a.check(page.headers["location"].startswith("/login?"), "sent to the login")
                form = {"provider": "mockhub", "account": connection.key.account}
                posted = await old.post(
                    f"{servers.public_url}/connections/disconnect",
                    data={**form, "csrf": "forged-csrf-token-0123456789"},
                )
                a.status(posted, 401)
        async with httpx.AsyncClient(cookies={name: fresh}) as current:  # control: within the lifetime
            a.status(await current.get(f"{servers.public_url}/connections"), 200)


# ---- security headers ------------------------------------------------------------------------


def assert_security_headers(a: Any, response: httpx.Response) -> None:
    where = f"{response.request.method} {response.request.url.path} ({response.status_code})"
    h = response.headers
    a.check(
        h.get("cache-control") == "no-store", f"{where}: Cache-Control no-store, got {h.get('cache-control')}"
    )
    a.check(h.get("referrer-policy") == "no-referrer", f"{where}: Referrer-Policy")
    a.check(h.get("x-content-type-options") == "nosniff", f"{where}: nosniff")
    a.check(h.get("x-frame-options") == "DENY", f"{where}: X-Frame-Options")
    csp = h.get("content-security-policy", "")
    a.check("default-src 'none'" in csp, f"{where}: CSP default-src 'none'")
    a.check("frame-ancestors 'none'" in csp, f"{where}: CSP frame-ancestors 'none'")
    a.check("base-uri 'none'" in csp, f"{where}: CSP base-uri 'none'")


async def test_every_page_sends_the_security_headers(servers: Servers, browser: Browser) -> None:
    """Referer/cache leaks, clickjacking, injection: every page hardened (RFC 9700 §4.2, §4.16)."""
    base = servers.public_url
    alice = unique("alice")
    provider_origin = "http://" + urlsplit(servers.demo.settings.providers["mockhub"].authorize_url).netloc
    async with httpx.AsyncClient() as http:
        raw = RawMcp(servers, http, "legacy", bearer(servers, alice))
        await raw.open()
        url = connect_url(await raw.call_tool("whoami"))
    async with attack(servers, browsers=[browser]) as a, httpx.AsyncClient() as anonymous:
        answers = [
            await anonymous.get(f"{base}/connect", params={"elicitationId": "bad*id"}),
            await anonymous.get(url),
            await anonymous.get(f"{base}/login", params={"next": "/connections"}),
            await anonymous.get(f"{base}/login/callback", params={"code": "x", "state": "y"}),
            await anonymous.get(f"{base}/callback/mockhub", params={"state": "not-a-state"}),
            await anonymous.get(f"{base}/connections"),
            await anonymous.post(f"{base}/logout"),
            await anonymous.post(f"{base}/connect", data={"elicitationId": "x"}),
            await anonymous.get(f"{base}/no-such-page"),
            await anonymous.post(servers.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        ]
        confirm = await open_link(browser, url, alice)
        answers += [confirm, await browser.get(f"{base}/connections")]
        for answer in answers:
            a.status(answer, range(200, 500))
            assert_security_headers(a, answer)
        csp = confirm.headers["content-security-policy"]
        a.check(
            f"form-action 'self' {provider_origin};" in csp, "the confirmation page widens form-action only"
        )
