"""The provider leg: code injection, PKCE, mix-up, redirect-URI integrity, reflected provider
errors, and a misbehaving token endpoint (DESIGN invariants 4 and 8; RFC 9700 §4.4, §4.5, §4.1;
RFC 7636; RFC 9207; 2026-07-28 authorization-security-considerations.mdx "Mix-Up Attacks")."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import markupsafe
import pytest
from starlette.responses import RedirectResponse

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES
from tests.security.attack import Listener, Servers, attack, elicitation_status, running, unique
from tests.security.flows import (
    ask,
    bearer,
    confirm_form,
    connect_fully,
    consent,
    continue_to_provider,
    elicit,
    open_link,
    query_of,
    quick_sign_in,
    until_callback,
    url_of,
    with_query,
)
from tests.security.rpc import RawMcp, connect_url

pytestmark = pytest.mark.security

HTTP_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The demo with a short outbound timeout, so a hanging token endpoint fails fast."""
    yield from running(tmp_path_factory, "provider-leg", http_timeout=HTTP_TIMEOUT)


@pytest.fixture(autouse=True)
def honest_mockhub(servers: Servers) -> Iterator[None]:
    """Every test may turn one of mockhub's knobs; each test starts from an honest provider."""
    yield
    hub = servers.mockhub
    hub.iss_mode, hub.token_endpoint_mode, hub.api_mode = "correct", "ok", "ok"
    servers.recording["providers"].replace.clear()


# ---- code injection --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_attackers_code_with_the_victims_state_is_refused(
    servers: Servers, browser: Browser, other_browser: Browser, mode: str
) -> None:
    """Code injection: Mallory's code in Alice's callback and browser: PKCE refuses (RFC 9700 §4.5)."""
    alice, mallory = unique("alice"), unique("mallory")
    async with elicit(servers, alice, mode) as victim, elicit(servers, mallory, mode) as attacker:
        mallory_callback = await until_callback(
            other_browser, servers, attacker.url, mallory, login="mallory-gh"
        )
        alice_callback = await until_callback(browser, servers, victim.url, alice)
        injected = with_query(alice_callback, code=query_of(mallory_callback)["code"])
        async with attack(
            servers,
            browsers=[browser, other_browser],
            recorders=[victim.recorder, attacker.recorder],
            token_requests=1,
        ) as a:
            a.status(await browser.get(injected), 502)
            a.check(
                elicitation_status(servers, victim.elicitation_id) == "failed", "Alice's flow failed closed"
            )


@pytest.mark.parametrize("mode", MODES)
async def test_attackers_callback_replayed_in_the_victims_browser_is_refused(
    servers: Servers, browser: Browser, other_browser: Browser, mode: str
) -> None:
    """Mallory's whole callback replayed in Alice's browser: 403, no exchange (RFC 9700 §4.7)."""
    alice, mallory = unique("alice"), unique("mallory")
    await quick_sign_in(browser, servers, alice)
    async with elicit(servers, mallory, mode) as attacker:
        mallory_callback = await until_callback(
            other_browser, servers, attacker.url, mallory, login="mallory-gh"
        )
        async with attack(servers, browsers=[browser, other_browser], recorders=[attacker.recorder]) as a:
            a.status(await browser.get(mallory_callback), 403)


@pytest.mark.parametrize("mode", MODES)
async def test_victims_stolen_code_in_the_attackers_flow_is_refused(
    servers: Servers, browser: Browser, other_browser: Browser, mode: str
) -> None:
    """Alice's stolen code injected into Mallory's own flow: PKCE refuses it (RFC 9700 §4.5.3)."""
    alice, mallory = unique("alice"), unique("mallory")
    async with elicit(servers, alice, mode) as victim, elicit(servers, mallory, mode) as attacker:
        alice_callback = await until_callback(browser, servers, victim.url, alice)
        mallory_callback = await until_callback(
            other_browser, servers, attacker.url, mallory, login="mallory-gh"
        )
        injected = with_query(mallory_callback, code=query_of(alice_callback)["code"])
        async with attack(
            servers,
            browsers=[browser, other_browser],
            recorders=[victim.recorder, attacker.recorder],
            token_requests=1,
        ) as a:
            a.status(await other_browser.get(injected), 502)
            a.check(elicitation_status(servers, attacker.elicitation_id) == "failed", "Mallory's flow failed")


# ---- PKCE ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_pkce_is_always_s256_with_a_fresh_verifier(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """PKCE downgrade: S256 only, never plain; the verifier matches and is new per flow (RFC 7636 §4.2)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        second_url = url_of(await ask(e.client, mode))
        page = await open_link(browser, second_url, alice)
        other_authorize = await continue_to_provider(browser, servers, page)
        async with attack(
            servers,
            browsers=[browser],
            recorders=[e.recorder],
            new_connections=1,
            token_requests=1,
            exchanges_ok=1,
            completions=1 if mode == "legacy" else 0,
            settle=0.3,
        ) as a:
            mark = servers.wire.mark()
            page = await open_link(browser, e.url, alice)
            authorize = await continue_to_provider(browser, servers, page)
            query = query_of(authorize)
            a.check(query.get("code_challenge_method") == "S256", "code_challenge_method=S256")
            a.check("plain" not in authorize.lower(), "no plain method anywhere in the URL")
            a.check("code_verifier" not in query, "the verifier never travels in the front channel")
            challenge = query["code_challenge"]
            a.check(len(challenge) == 43, "a SHA-256 challenge, base64url without padding")
            a.check(challenge != query_of(other_authorize)["code_challenge"], "a fresh verifier per flow")
            a.check(len(query["state"]) >= 43, "state of 256 bits")
            a.status(await browser.get(await consent(browser, authorize)), 200)
            [exchange] = [x for x in servers.exchanges("providers", since=mark) if x.path == "/mockhub/token"]
            verifier = exchange.form()["code_verifier"][0]
            digest = (
                base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            )
            a.check(43 <= len(verifier) <= 128, "verifier of 43 to 128 characters (RFC 7636 §4.1)")
            a.check(digest == challenge, "the token request proves the S256 challenge")


# ---- mix-up ----------------------------------------------------------------------------------


@pytest.mark.parametrize("iss_mode", ["omit", "wrong"])
@pytest.mark.parametrize("mode", MODES)
async def test_mixup_missing_or_wrong_iss_is_refused_before_the_exchange(
    servers: Servers, browser: Browser, mode: str, iss_mode: str
) -> None:
    """Mix-up: no `iss` or another issuer's in the response: 400, no token call (RFC 9207 §2.4)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        servers.mockhub.iss_mode = iss_mode
        callback = await until_callback(browser, servers, e.url, alice)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            a.status(await browser.get(callback), 400)
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")


@pytest.mark.parametrize("path", ["/callback/otherhub", "/callback/MockHub"])
@pytest.mark.parametrize("mode", MODES)
async def test_response_on_another_providers_redirect_uri_is_a_mixup(
    servers: Servers, browser: Browser, mode: str, path: str
) -> None:
    """Mix-up: a response on another provider's redirect URI: 400, no token call (RFC 9700 §4.4.2)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        moved = urlsplit(callback)._replace(path=path).geturl()
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            a.status(await browser.get(moved), 400)
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")


# ---- redirect URI integrity ------------------------------------------------------------------

FORGED_HEADERS = {
    "Host": {"Host": "evil.example"},
    "X-Forwarded-Host/Proto": {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"},
    "Forwarded": {"Forwarded": "for=1.2.3.4;host=evil.example;proto=https"},
    "X-Forwarded-Prefix/Port": {"X-Forwarded-Prefix": "/evil", "X-Forwarded-Port": "4443"},
}


@pytest.mark.parametrize("mode", MODES)
async def test_redirect_uri_ignores_forged_host_and_forwarded_headers(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Forged Host / X-Forwarded-* / Forwarded on POST /connect: the redirect_uri stays (RFC 9700 §4.1)."""
    alice = unique("alice")
    settings = servers.demo.settings
    provider = settings.providers["mockhub"]
    async with elicit(servers, alice, mode) as e:
        urls = [e.url] + [url_of(await ask(e.client, mode)) for _ in range(len(FORGED_HEADERS) - 1)]
        pages = [await open_link(browser, url, alice) for url in urls]
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for (name, headers), page in zip(FORGED_HEADERS.items(), pages, strict=True):
                form = confirm_form(page)
                answer = await browser.http.post(
                    f"{servers.public_url}/connect", data=form.fields, headers=headers, follow_redirects=False
                )
                a.status(answer, 303)
                location = answer.headers["location"]
                a.check(
                    location.startswith(provider.authorize_url + "?"), f"{name}: to the configured provider"
                )
                redirect_uri = query_of(location)["redirect_uri"]
                a.check(
                    redirect_uri == settings.callback_url("mockhub"), f"{name}: redirect_uri {redirect_uri}"
                )
                a.check("evil" not in location, f"{name}: nothing of the forged headers in the URL")


@pytest.mark.parametrize("mode", MODES)
async def test_connect_url_ignores_forwarded_headers_and_forged_host_is_refused(
    servers: Servers, mode: str
) -> None:
    """Connect URL built from public_url only; a foreign Host at /mcp is 421 (basic-transports)."""
    async with httpx.AsyncClient() as http, attack(servers) as a:
        forwarded = RawMcp(
            servers,
            http,
            mode,
            bearer(servers, unique("zed")),
            headers={
                "X-Forwarded-Host": "evil.example",
                "X-Forwarded-Proto": "https",
                "Forwarded": "host=evil",
            },
        )
        a.status(await forwarded.open(), 200)
        url = connect_url(await forwarded.call_tool("whoami"))
        a.check(url.startswith(servers.public_url + "/connect?elicitationId="), f"connect URL {url}")
        rebinding = RawMcp(servers, http, mode, forwarded.token, headers={"Host": "evil.example"})
        a.status(await rebinding.open(), 421)


# ---- reflected provider errors ---------------------------------------------------------------

PAYLOADS = {
    "script tag": ("<script>alert(1)</script>", "<img src=x onerror=alert(2)>"),
    "attribute breakout": ('"><svg onload=alert(3)>', "'><iframe src=javascript:alert(4)>"),
    "template injection": ("{{7*7}}", "${7*7} {% raw %} #{7*7}"),
}


@pytest.mark.parametrize("mode", MODES)
async def test_provider_error_parameters_are_escaped(servers: Servers, browser: Browser, mode: str) -> None:
    """Script injection via the callback's error parameters: escaped, strict CSP (RFC 6819 §4.4.1.8)."""
    alice = unique("alice")
    issuer = servers.demo.settings.providers["mockhub"].issuer
    async with elicit(servers, alice, mode) as e:
        urls = [e.url] + [url_of(await ask(e.client, mode)) for _ in range(len(PAYLOADS) - 1)]
        authorize_urls = [
            await continue_to_provider(browser, servers, await open_link(browser, url, alice)) for url in urls
        ]
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for (name, (error, description)), authorize in zip(PAYLOADS.items(), authorize_urls, strict=True):
                params = {"state": query_of(authorize)["state"], "iss": issuer}
                params |= {"error": error, "error_description": description}
                callback = httpx.URL(f"{servers.public_url}/callback/mockhub", params=params)
                page = a.status(await browser.get(str(callback)), 400)
                shown = page.text.split("<main>", 1)[1]
                for raw in (error, description):
                    a.check(str(markupsafe.escape(raw)) in shown, f"{name}: {raw!r} shown as text")
                    if any(c in raw for c in "<>\"'"):
                        a.check(raw not in shown, f"{name}: {raw!r} reflected unescaped")
                a.check("49" not in shown, f"{name}: no template evaluated")
                csp = page.headers["content-security-policy"]
                a.check("default-src 'none'" in csp and "script-src" not in csp, "no script may run")
                a.check(elicitation_status(servers, e.elicitation_id) != "complete", "nothing completed")


# ---- a misbehaving provider ------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["junk", "500", "hang"])
@pytest.mark.parametrize("mode", MODES)
async def test_token_endpoint_failure_is_a_502_and_stores_nothing(
    servers: Servers, browser: Browser, mode: str, fault: str
) -> None:
    """Token endpoint junk, 500 or hang: 502, nothing stored, the flow failed (invariant 8)."""
    alice = unique("alice")
    servers.mockhub.hang_seconds = 10
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        servers.mockhub.token_endpoint_mode = fault
        async with attack(servers, browsers=[browser], recorders=[e.recorder], token_requests=1) as a:
            page = a.status(await browser.get(callback), 502)
            a.check("Connection failed" in page.text, "a clear failure page")
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")


@pytest.mark.parametrize("fault", ["junk", "500"])
@pytest.mark.parametrize("mode", MODES)
async def test_userinfo_failure_after_the_exchange_stores_nothing(
    servers: Servers, browser: Browser, mode: str, fault: str
) -> None:
    """Code redeemed but the account endpoint fails: 502, the fresh token is not stored (invariant 8)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        servers.mockhub.api_mode = fault
        async with attack(
            servers, browsers=[browser], recorders=[e.recorder], token_requests=1, exchanges_ok=1
        ) as a:
            a.status(await browser.get(callback), 502)
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")


@pytest.mark.parametrize("endpoint", ["/mockhub/token", "/mockhub/user"])
@pytest.mark.parametrize("mode", MODES)
async def test_provider_redirecting_a_back_channel_request_is_not_followed(
    servers: Servers, browser: Browser, mode: str, endpoint: str
) -> None:
    """Provider redirects the token or account request elsewhere: not followed, 502 (RFC 9700 §4.1)."""
    alice = unique("alice")
    exchanged = endpoint != "/mockhub/token"
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        with Listener() as thief:
            servers.recording["providers"].replace[endpoint] = RedirectResponse(thief.url("/steal"), 307)
            async with attack(
                servers,
                browsers=[browser],
                recorders=[e.recorder],
                token_requests=int(exchanged),
                exchanges_ok=int(exchanged),
            ) as a:
                a.status(await browser.get(callback), 502)
                a.check(thief.hits == [], f"the request was replayed to the redirect target: {thief.hits}")
                a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")


@pytest.mark.parametrize("mode", MODES)
async def test_honest_provider_control(servers: Servers, browser: Browser, mode: str) -> None:
    """Control for the provider leg: with an honest mockhub the same steps connect."""
    alice = unique("alice")
    async with (
        elicit(servers, alice, mode) as e,
        attack(
            servers,
            browsers=[browser],
            recorders=[e.recorder],
            new_connections=1,
            token_requests=1,
            exchanges_ok=1,
            completions=1 if mode == "legacy" else 0,
            settle=0.3,
        ) as a,
    ):
        a.status(await connect_fully(browser, servers, e.url, alice), 200)
