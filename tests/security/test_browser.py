"""Browser-side attacks: CSRF, open redirects after login, session cookie attributes, session
fixation and lifetime, login CSRF, and the security headers of every page (RFC 9700 §4.7, §4.11;
RFC 6265bis; 2025-11-25 basic-authorization.mdx "Open Redirection")."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import mcp_types
import pytest

from connect_routes.browser_session import session_middleware
from mock_providers.demo import build_dev_setup
from mock_providers.testing.browser import Browser, forms_in
from mock_providers.testing.client import MODES
from service.app import create_app
from tests.security.attack import Servers, attack, connection_records, elicitation_status, unique
from tests.security.flows import (
    bearer,
    confirm_form,
    connect_fully,
    csrf_of,
    drop_session,
    elicit,
    forge_session,
    open_link,
    quick_sign_in,
    read_session,
    retry,
    seed_connection,
    session_cookie_name,
    session_value,
    settled,
    sign_in_to_connections,
    sign_session,
    switch_account,
    until_callback,
)
from tests.security.rpc import RawMcp, connect_url
from tests.support.chromium import headless_chromium

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


@pytest.mark.parametrize("mode", MODES)
async def test_csrf_on_connect_cancel(servers: Servers, browser: Browser, browsers: Any, mode: str) -> None:
    """CSRF on POST /connect/cancel: 403, the link stays pending and no decline is sent (RFC 9700 §4.7)."""
    alice = unique("alice")
    others = await mallory_csrf(browsers, servers)
    async with elicit(servers, alice, mode) as e:
        await open_link(browser, e.url, alice)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for name, forged in forged_csrf_variants(others).items():
                answer = await browser.http.post(
                    f"{servers.public_url}/connect/cancel",
                    data={"elicitationId": e.elicitation_id, **forged["data"]},
                    params=forged.get("params"),
                    headers=forged.get("headers"),
                )
                a.status(answer, 403)
                a.check(elicitation_status(servers, e.elicitation_id) == "pending", f"{name}: still pending")
            a.check(not e.recorder.completed_ids(), "no decline reached the MCP client")
        page = await open_link(browser, e.url, alice)  # Alice's link still works
        assert confirm_form(page).fields["elicitationId"] == e.elicitation_id


async def test_csrf_on_default_account(servers: Servers, browser: Browser, browsers: Any) -> None:
    """CSRF on POST /connections/default: 403 and no default is set (RFC 9700 §4.7)."""
    alice = unique("alice")
    first = await seed_connection(servers, alice, account="4242")
    await seed_connection(servers, alice, account="4343")
    others = await mallory_csrf(browsers, servers)
    page = await quick_sign_in(browser, servers, alice)
    store = servers.apps["mcp"].state.runtime.store
    async with attack(servers, browsers=[browser]) as a:
        for name, forged in forged_csrf_variants(others).items():
            answer = await browser.http.post(
                f"{servers.public_url}/connections/default",
                data={"provider": "mockhub", "account": first.key.account, **forged["data"]},
                params=forged.get("params"),
                headers=forged.get("headers"),
            )
            a.status(answer, 403)
            a.check(await store.get_default_account(first.key.user, "mockhub") is None, f"{name}: no default")
        # Control: Alice's own form sets it.
        answer = await browser.http.post(
            f"{servers.public_url}/connections/default",
            data={"provider": "mockhub", "account": first.key.account, "csrf": csrf_of(page)},
            follow_redirects=False,
        )
        a.status(answer, 303)
        a.check(
            await store.get_default_account(first.key.user, "mockhub") == "4242", "Alice's default is set"
        )


def foreign_origins(servers: Servers) -> tuple[str, ...]:
    """Another site, a host that starts like ours, our host on another port."""
    port = urlsplit(servers.public_url).port
    return (
        "https://evil.example",
        f"{servers.public_url}.evil.example",
        f"http://127.0.0.1:{(port or 0) + 1}",
    )


@pytest.mark.parametrize("mode", MODES)
async def test_cross_site_origin_is_refused_on_every_post_route(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """A POST with the session's own CSRF token but a foreign `Origin` (another site, a look-alike
    host, another port): 403 on every state-changing route; no Origin, ours, or `null` (what
    browsers send from our no-referrer pages) goes through (OWASP CSRF Prevention Cheat Sheet,
    "Verifying Origin With Standard Headers")."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        # A connection to disconnect or make default; seeded after the tool asked for one, since
        # with it in place the tool would have run.
        connection = await seed_connection(servers, alice)
        page = await open_link(browser, e.url, alice)
        csrf = csrf_of(page)
        link = {"elicitationId": e.elicitation_id, "csrf": csrf}
        account = {"provider": "mockhub", "account": connection.key.account, "csrf": csrf}
        routes = {
            "/connect": link,
            "/connect/api-key": {**link, "api_key": "mk_attacker_key_0123456789"},
            "/connect/cancel": link,
            "/connections/disconnect": account,
            "/connections/default": account,
            "/logout": {"csrf": csrf},
        }
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for path, data in routes.items():
                for foreign in foreign_origins(servers):
                    answer = await browser.http.post(
                        f"{servers.public_url}{path}", data=data, headers={"Origin": foreign}
                    )
                    a.status(answer, 403)
                    a.check("another site" in answer.text, f"{path}: the page says why")
            a.check(elicitation_status(servers, e.elicitation_id) == "pending", "the link is still pending")
            a.check(signed_in_sub(browser, servers) == alice, "Alice is still signed in")
            # Our own origin, `null` and no Origin at all pass this check (the CSRF token decides).
            for named in ({"Origin": servers.public_url}, {"Origin": "null"}, {}):
                answer = await browser.http.post(
                    f"{servers.public_url}/connections/default",
                    data=account,
                    headers=named,
                    follow_redirects=False,
                )
                a.status(answer, 303)
        # Alice's flow goes on from the same page, to its completion.
        page = await connect_fully(browser, servers, e.url, alice)
        assert "Connected to MockHub" in page.text
        await settled(e)


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
    await sign_in_to_connections(browser, servers, unique("alice"))
    async with attack(servers, browsers=[browser]) as a:
        for evil in EVIL_NEXT:
            # Signed in here: the "already signed in" page, whose links stay on the site.
            page = a.status(await browser.http.get(f"{servers.public_url}/login", params={"next": evil}), 409)
            [form] = [f for f in forms_in(page.text) if "next" in f.fields]
            a.check(form.fields["next"] == "/connections", f"{evil!r}: sign-out form continues to {form}")
            a.check('href="/connections"' in page.text, f"{evil!r}: the link on is /connections")
            # Signed out here (still signed in at the AS): the sign-in returns to /connections.
            drop_session(browser, servers)
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
        await sign_in_to_connections(browser, servers, unique("alice"))
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
        await sign_in_to_connections(browser, servers, alice)
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
        # Signing in again (sign out and continue, the one way while signed in) rotates once more.
        await switch_account(browser, servers, alice)
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
    await sign_in_to_connections(browser, servers, alice)
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


# ---- login swap: another site switches Alice's signed-in browser to Mallory ---------------------


async def cross_site_dev_as_login(browser: Browser, servers: Servers, username: str) -> httpx.Response:
    """Mallory's page submits the dev AS login form in the victim's browser: a cross-site POST that
    cannot carry the form's token (the page cannot read it)."""
    return await browser.http.post(
        f"{servers.demo.settings.auth_issuer}/login",
        data={"username": username, "return_to": ""},
        headers={"Origin": "https://evil.example"},
    )


def signed_in_sub(browser: Browser, servers: Servers) -> str | None:
    value = session_value(browser, servers)
    user = read_session(servers, value).get("user") if value else None
    return str(user["sub"]) if user else None


@pytest.mark.parametrize("mode", MODES)
async def test_login_swap_from_another_site_keeps_alices_session(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Login swap: a cross-site dev AS login as Mallory, then /login?next=<Mallory's link> in
    Alice's signed-in browser, then Alice's Continue: her browser stays Alice's, Mallory's link is
    never shown to her, nothing is bound (RFC 6749 §10.12; OIDC Core §3.1.2.1)."""
    alice, mallory = unique("alice"), unique("mallory")
    await sign_in_to_connections(browser, servers, alice)
    async with (
        elicit(servers, mallory, mode) as mallorys,
        attack(servers, browsers=[browser], recorders=[mallorys.recorder]) as a,
    ):
        planted = await cross_site_dev_as_login(browser, servers, mallory)
        lure = {"next": f"/connect?elicitationId={mallorys.elicitation_id}"}
        page = await browser.get(f"{servers.public_url}/login?{urlencode(lure)}")
        if any("elicitationId" in f.fields for f in forms_in(page.text)):
            # Alice presses the Continue she is shown, and approves at MockHub.
            page = await browser.complete_connect(str(page.url), username=alice)
        bound = [r for r in connection_records(servers) if mallory in r]
        a.check(not bound, f"Alice's MockHub account was bound to Mallory: {bound}")
        now = signed_in_sub(browser, servers)
        a.check(now == alice, f"the browser is still signed in as Alice, not {now}")
        a.status(planted, 403)
        a.status(page, 409)
        a.check(f"signed in here as <strong>{alice}</strong>" in page.text, "the page names Alice")
        a.check(elicitation_status(servers, mallorys.elicitation_id) == "pending", "Mallory's link untouched")
    # Alice's own flow still works in the same browser.
    async with elicit(servers, alice, mode) as own:
        await connect_fully(browser, servers, own.url, alice)
        await settled(own)
        result = await retry(own)
        assert isinstance(result, mcp_types.CallToolResult) and not result.is_error, result


async def sign_in_at_the_authorization_server(browser: Browser, servers: Servers, username: str) -> None:
    """`browser` signs in at the dev AS as `username` through its own form (with its token): the
    state a login CSRF at a real authorization server would leave behind."""
    issuer = servers.demo.settings.auth_issuer
    page = await browser.get(f"{issuer}/login")
    [form] = [f for f in forms_in(page.text) if "username" in f.fields]
    answer = await browser.submit(page, form, username=username)
    assert answer.status_code == 200 and username in answer.text, answer.text[:300]


async def test_login_while_signed_in_never_switches_the_account(servers: Servers, browser: Browser) -> None:
    """Login swap at our /login: Alice signed in here, the AS session Mallory's; /login (no prompt)
    shows "already signed in as Alice", never reaches the AS; only the user's own sign-out POST
    switches (RFC 6749 §10.12)."""
    alice, mallory, bob = unique("alice"), unique("mallory"), unique("bob")
    await sign_in_to_connections(browser, servers, alice)
    await sign_in_at_the_authorization_server(browser, servers, mallory)
    async with attack(servers, browsers=[browser]) as a:
        mark = len(browser.visited)
        page = await browser.get(f"{servers.public_url}/login?next=/connections")
        now = signed_in_sub(browser, servers)
        a.check(now == alice, f"the browser is still signed in as Alice, not {now}")
        a.status(page, 409)
        a.check(f"signed in here as <strong>{alice}</strong>" in page.text, "the page names Alice")
        hosts = {urlsplit(url).netloc for url in browser.visited[mark:]}
        a.check(hosts == {urlsplit(servers.public_url).netloc}, f"no sign-in was started: {hosts}")
        a.check(
            f"Signed in as {alice}" in (await browser.get(f"{servers.public_url}/connections")).text,
            "Alice's connections page still works",
        )
        # The user's own switch: "sign out and continue" (POST, CSRF token), then a fresh sign-in.
        page = await switch_account(browser, servers, bob)
        a.check(f"Signed in as {bob}" in page.text, "the confirmed switch signs in the new account")


async def test_sign_in_for_a_connect_link_asks_the_authorization_server_again(
    servers: Servers, browser: Browser
) -> None:
    """A sign-in started from /connect sends prompt=login: the AS asks who signs in instead of
    reusing a session another site may have planted there (OIDC Core §3.1.2.1)."""
    alice = unique("alice")
    await sign_in_to_connections(browser, servers, alice)
    drop_session(browser, servers)  # signed out here, still signed in at the AS
    async with (
        elicit(servers, alice, "legacy") as e,
        attack(servers, browsers=[browser], recorders=[e.recorder]) as a,
    ):
        mark = len(browser.visited)
        page = await browser.get(e.url)  # the AS's page: its form carries the state, by design
        authorize = [u for u in browser.visited[mark:] if urlsplit(u).path == "/authorize"]
        a.check(len(authorize) == 1 and "prompt=login" in authorize[0], f"prompt=login sent: {authorize}")
        a.check(any("username" in f.fields for f in forms_in(page.text)), "the AS asks who signs in")
        a.check(signed_in_sub(browser, servers) is None, "nobody is signed in here yet")
        # Signing in there goes on to the confirmation page of Alice's link.
        [login] = [f for f in forms_in(page.text) if "username" in f.fields]
        page = a.status(await browser.submit(page, login, username=alice), 200)
        a.check(confirm_form(page).fields["elicitationId"] == e.elicitation_id, "Alice's confirmation page")


async def test_dev_as_login_without_its_form_token_is_refused(
    servers: Servers, browser: Browser, other_browser: Browser
) -> None:
    """Login CSRF at the dev AS: its login form posted without the token of this browser's own
    login page (none, wrong, another browser's): 403, the AS session unchanged (RFC 6749 §10.12)."""
    mallory = unique("mallory")
    issuer = servers.demo.settings.auth_issuer
    page = await other_browser.get(f"{issuer}/login")
    others = next(f for f in forms_in(page.text) if "username" in f.fields).fields["csrf"]
    await browser.get(f"{issuer}/login")  # the victim's own AS session holds a token too
    async with attack(servers, browsers=[browser, other_browser]) as a:
        for token in (None, "", "A" * 43, others):
            data = {"username": mallory, "return_to": "", **({"csrf": token} if token is not None else {})}
            answer = await browser.http.post(
                f"{issuer}/login", data=data, headers={"Origin": "https://evil.example"}
            )
            a.status(answer, 403)
        # Nobody is signed in at the AS: a sign-in here is asked who, not signed in as Mallory.
        page = await browser.get(f"{servers.public_url}/login?next=/connections")
        a.check(any("username" in f.fields for f in forms_in(page.text)), "the AS login form, not Mallory")
        a.check(signed_in_sub(browser, servers) is None, "nobody is signed in here")


async def test_login_swap_from_another_site_in_chromium(servers: Servers) -> None:
    """The login swap as Chromium runs it: a page on another site posts the dev AS login form
    (403: no token) and sends Alice's browser to /login?next=<Mallory's link>; the Lax session
    cookie rides that top-level navigation, and /login answers "Already signed in" as Alice
    (RFC 6749 §10.12; RFC 6265bis §8.8). The attacker's site is served by Playwright itself."""
    alice, mallory = unique("alice"), unique("mallory")
    issuer = servers.demo.settings.auth_issuer
    async with elicit(servers, mallory, "legacy") as mallorys, headless_chromium() as chromium:
        lure = {"next": f"/connect?elicitationId={mallorys.elicitation_id}"}
        evil = {
            "/sign-in": (
                f'<form method="post" action="{issuer}/login">'
                f'<input name="username" value="{mallory}"><input name="return_to" value=""></form>'
                "<script>document.forms[0].submit()</script>"
            ),
            "/lure": f'<a id="go" href="{servers.public_url}/login?{urlencode(lure)}">your invoice</a>',
        }
        page = await (await chromium.new_context()).new_page()

        async def serve(route: Any) -> None:
            body = evil[urlsplit(route.request.url).path]
            await route.fulfill(status=200, content_type="text/html", body=body)

        await page.route("http://evil.example/**", serve)
        await page.goto(f"{servers.public_url}/connections")  # Alice signs in
        await page.fill("input[name=username]", alice)
        await page.click("button[type=submit]")
        await page.wait_for_selector(f"text=Signed in as {alice}")
        async with attack(servers, recorders=[mallorys.recorder]) as a:
            await page.goto("http://evil.example/sign-in")
            await page.wait_for_load_state()
            planted = await page.content()
            await page.goto("http://evil.example/lure")
            async with page.expect_navigation():
                await page.click("#go")
            landed = await page.content()
            await page.goto(f"{servers.public_url}/connections")
            now = re.findall(r"Signed in as ([^<\s]+)\.</p>", await page.content())
            a.check(now == [alice], f"Alice's browser is still Alice's, not {now}")
            a.check("Sign-in refused" in planted, "the dev AS refused the cross-site login form")
            a.check("Already signed in" in landed and f"<strong>{alice}</strong>" in landed, landed[:400])
            pending = elicitation_status(servers, mallorys.elicitation_id) == "pending"
            a.check(pending, "Mallory's link untouched")
