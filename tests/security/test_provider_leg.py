"""The provider leg: code injection, PKCE, mix-up, redirect-URI integrity, reflected provider
errors, a misbehaving token endpoint, and a malicious one: oversized, dripping or malformed
answers, a slow refresh, forged log lines (DESIGN invariants 4 and 8; RFC 9700 §4.4, §4.5, §4.1,
§4.14.2; RFC 7636; RFC 9207; RFC 6749 §7.1; 2026-07-28 authorization-security-considerations.mdx
"Mix-Up Attacks")."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import markupsafe
import pytest
from mcp import MCPError
from starlette.responses import JSONResponse, RedirectResponse

from mock_providers.faults import DEFAULT_DRIP_SECONDS, DEFAULT_HUGE_BODY_BYTES
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES, mcp_client
from service.observability.logs import LogContextFilter, TextFormatter
from service.observability.redaction import RedactingFilter
from tests.security.attack import Attack, Listener, Servers, attack, elicitation_status, unique
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

HTTP_TIMEOUT = 1.0
# The demo with a short outbound timeout, so a hanging token endpoint fails fast.
pytestmark = [pytest.mark.security, pytest.mark.demo_settings(http_timeout=HTTP_TIMEOUT)]


@pytest.fixture(autouse=True)
def honest_mockhub(servers: Servers) -> Iterator[None]:
    """Every test may turn one of mockhub's knobs; each test starts from an honest provider."""
    ttl = servers.mockhub.access_token_ttl
    yield
    hub = servers.mockhub
    hub.iss_mode, hub.token_endpoint_mode, hub.api_mode = "correct", "ok", "ok"
    hub.huge_body_bytes, hub.drip_seconds, hub.access_token_ttl = (
        DEFAULT_HUGE_BODY_BYTES,
        DEFAULT_DRIP_SECONDS,
        ttl,
    )
    servers.recording["providers"].replace.clear()


@dataclass(frozen=True)
class Bystander:
    """Another user with a healthy mockhub connection: every attack on the provider leg must leave
    it working."""

    user: str
    login: str


@pytest.fixture(scope="module")
def bob(servers: Servers) -> Bystander:
    async def connect() -> Bystander:
        user, login = unique("bob"), "bob-at-mockhub"
        browser = Browser()
        try:
            async with elicit(servers, user, "legacy") as e:
                await connect_fully(browser, servers, e.url, user, login=login)
        finally:
            await browser.aclose()
        return Bystander(user, login)

    return asyncio.run(connect())


async def whoami(servers: Servers, user: str, mode: str) -> Any:
    """`user`'s whoami on a fresh MCP session: the profile, or the JSON-RPC error it raised."""
    async with mcp_client(servers, user, mode) as (client, _):
        try:
            result = await client.session.call_tool("whoami", {})
            return result.structured_content or result
        except MCPError as error:
            return error


async def still_served(a: Attack, servers: Servers, bystander: Bystander, mode: str) -> None:
    profile = await whoami(servers, bystander.user, mode)
    a.observe(profile if isinstance(profile, dict) else str(profile))
    a.check(
        isinstance(profile, dict) and profile.get("login") == bystander.login,
        f"another user served: {profile}",
    )


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


# ---- a malicious provider: sizes, time, types ------------------------------------------------

OVERSIZED_HUB_BYTES = 4 * 1024 * 1024  # past both byte limits (64 kB token, 1 MB userinfo)
MALICIOUS_ANSWERS = {
    "token: huge body": ("token_endpoint_mode", "huge_body", 0),
    "token: 2 MB scope": ("token_endpoint_mode", "huge_scope", 1),
    "token: MAC token_type": ("token_endpoint_mode", "token_type_mac", 1),
    "token: non-ASCII token": ("token_endpoint_mode", "non_ascii_token", 1),
    "userinfo: huge body": ("api_mode", "huge_body", 1),
    "userinfo: 300-character account id": ("api_mode", "long_account", 1),
}


@pytest.mark.parametrize("case", MALICIOUS_ANSWERS)
@pytest.mark.parametrize("mode", MODES)
async def test_malicious_provider_answer_is_a_clean_502_and_stores_nothing(
    servers: Servers, browser: Browser, bob: Bystander, mode: str, case: str
) -> None:
    """Oversized body, 2 MB scope, a token_type we do not speak, a non-ASCII token, an account id
    no form can name again: 502, nothing stored, no traceback (RFC 9110 §2.3; RFC 6749 §7.1,
    Appendix A.12)."""
    knob, fault, redeemed = MALICIOUS_ANSWERS[case]
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        servers.mockhub.huge_body_bytes = OVERSIZED_HUB_BYTES
        setattr(servers.mockhub, knob, fault)
        async with attack(
            servers, browsers=[browser], recorders=[e.recorder], token_requests=1, exchanges_ok=redeemed
        ) as a:
            page = a.status(await browser.get(callback), 502)
            a.check("Connection failed" in page.text, "a clear failure page")
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")
            setattr(servers.mockhub, knob, "ok")
            await still_served(a, servers, bob, mode)


@pytest.mark.parametrize("knob", ["token_endpoint_mode", "api_mode"])
@pytest.mark.parametrize("mode", MODES)
async def test_dripping_provider_fails_the_callback_at_the_deadline(
    servers: Servers, browser: Browser, bob: Bystander, mode: str, knob: str
) -> None:
    """The token or account answer dripped a byte at a time, each well within the read timeout:
    the whole call ends at http_timeout, 502, nothing stored (RFC 9112 §9.5)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        # About ten times HTTP_TIMEOUT for the whole answer, HTTP_TIMEOUT / 20 per byte.
        servers.mockhub.drip_seconds = HTTP_TIMEOUT / 20
        setattr(servers.mockhub, knob, "drip")
        async with attack(
            servers, browsers=[browser], recorders=[e.recorder], token_requests=1, exchanges_ok=1
        ) as a:
            a.status(await browser.get(callback), 502)
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")
            setattr(servers.mockhub, knob, "ok")
            await still_served(a, servers, bob, mode)


@pytest.mark.parametrize("mode", MODES)
async def test_slow_refresh_sends_the_refresh_token_once(
    servers: Servers, browser: Browser, bob: Bystander, mode: str
) -> None:
    """Two callers need a refresh while the token endpoint drips its answer past the lock's
    lifetime: the refresh token is sent once, never twice (RFC 9700 §4.14.2: a second use is
    taken for theft and the grant revoked); other users are not affected."""
    carol = unique("carol")
    hub = servers.mockhub
    hub.access_token_ttl = 1  # expiring at once (refresh_skew_seconds is 60)
    async with elicit(servers, carol, mode) as e:
        await connect_fully(browser, servers, e.url, carol, login="carol-at-mockhub")
    # The whole answer takes longer than the lock lives (http_timeout + 5 s).
    hub.drip_seconds, hub.token_endpoint_mode = (HTTP_TIMEOUT + 10) / 200, "drip"
    reuse_before, requests_before = hub.reuse_detections, len(hub.token_requests)
    async with attack(servers, token_requests=1, exchanges_ok=1) as a:
        answers: list[Any] = []

        async def caller() -> None:
            answers.append(await whoami(servers, carol, mode))

        async with anyio.create_task_group() as callers:
            callers.start_soon(caller)
            callers.start_soon(caller)
        sent = len(hub.token_requests) - requests_before
        a.check(sent == 1, f"the refresh token was sent {sent} times")
        # A tool error naming the provider (its facts as structuredContent), no profile, the grant kept.
        facts = [(r.get("provider"), r.get("reconnect")) if isinstance(r, dict) else r for r in answers]
        a.check(facts == [("mockhub", False)] * 2, f"both callers failed cleanly: {answers}")
        a.observe(*(str(answer) for answer in answers))
        a.check(hub.reuse_detections == reuse_before, "no refresh token was presented twice")
        hub.token_endpoint_mode = "ok"
        await still_served(a, servers, bob, mode)


FORGED_RECORD = '2026-01-01 00:00:00,000 INFO mcp_url_connect.audit: {"event": "connect", "sub": "mallory"}'
RECORD_START = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


@pytest.mark.parametrize("source", ["callback error", "token endpoint error"])
@pytest.mark.parametrize("mode", MODES)
async def test_provider_error_with_line_breaks_cannot_forge_text_log_records(
    servers: Servers, browser: Browser, bob: Bystander, mode: str, source: str
) -> None:
    """An OAuth `error` carrying CR LF and a whole fake audit record, from the callback or from the
    token endpoint: each line of the default text log is one record, the fake one stays inside it
    escaped (CWE-117)."""
    alice = unique("alice")
    issuer = servers.demo.settings.providers["mockhub"].issuer
    error = "access_denied\r\n" + FORGED_RECORD
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # the default text handler, as configure_logging builds it
    handler.setFormatter(TextFormatter())
    handler.addFilter(RedactingFilter())
    handler.addFilter(LogContextFilter("mcp-1"))
    async with elicit(servers, alice, mode) as e:
        if source == "callback error":
            authorize = await continue_to_provider(browser, servers, await open_link(browser, e.url, alice))
            params = {"state": query_of(authorize)["state"], "iss": issuer, "error": error}
            callback, status = str(httpx.URL(f"{servers.public_url}/callback/mockhub", params=params)), 400
        else:
            callback, status = await until_callback(browser, servers, e.url, alice), 502
            refusal = JSONResponse({"error": error}, status_code=400)
            servers.recording["providers"].replace["/mockhub/token"] = refusal
        logging.getLogger().addHandler(handler)
        try:
            async with attack(servers, browsers=[browser], recorders=[e.recorder], token_requests=0) as a:
                a.status(await browser.get(callback), status)
                a.check(elicitation_status(servers, e.elicitation_id) == "failed", "the flow failed closed")
                servers.recording["providers"].replace.clear()
                await still_served(a, servers, bob, mode)
        finally:
            logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    escaped = [line for line in lines if "access_denied\\r\\n2026-01-01" in line]
    assert escaped, "the provider's error is logged, escaped:\n" + "\n".join(lines)[:2000]
    for line in lines:
        assert RECORD_START.match(line) or line.startswith("    "), f"a line that is no record: {line!r}"
        assert not line.startswith(FORGED_RECORD[:19]), f"a forged record: {line!r}"
