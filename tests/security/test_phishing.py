"""Phishing: a connect link (or a later step of its flow) reaches a browser that is not the asker's.

The spec's answer: the server must check that the user who opens the URL is the user who asked
(2025-11-25 and 2026-07-28 client-elicitation.mdx, "Phishing"); DESIGN invariant 2.
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

import httpx
import pytest

from mock_providers.testing.browser import Browser, forms_in
from mock_providers.testing.client import MODES
from tests.security.attack import Servers, attack, elicitation_status, unique
from tests.security.flows import (
    bearer,
    confirm_form,
    consent,
    continue_to_provider,
    drop_session,
    elicit,
    forge_session,
    open_link,
    plant_session,
    session_cookie_name,
    session_value,
    sign_in_to_connections,
)
from tests.security.rpc import RawMcp, connect_url

pytestmark = pytest.mark.security


def login_redirect_for(response: httpx.Response, elicitation_id: str) -> bool:
    location = response.headers.get("location", "")
    return response.status_code == 303 and location.startswith("/login?") and elicitation_id in location


async def get_and_post(
    servers: Servers, cookie: str | None, url: str, elicitation_id: str, csrf: str
) -> tuple[httpx.Response, httpx.Response]:
    """GET the link and POST its confirmation as a browser holding only `cookie` would."""
    jar = {session_cookie_name(servers): cookie} if cookie is not None else {}
    async with httpx.AsyncClient(cookies=jar, follow_redirects=False) as raw:
        page = await raw.get(url)
        posted = await raw.post(
            f"{servers.public_url}/connect", data={"elicitationId": elicitation_id, "csrf": csrf}
        )
    return page, posted


@pytest.mark.parametrize("mode", MODES)
async def test_link_opened_by_another_user_is_refused(
    servers: Servers, browser: Browser, other_browser: Browser, mode: str
) -> None:
    """Phishing: Mallory's link opened by Bob, signed in as Bob: 403 on GET and POST (client-elicitation)."""
    mallory, bob = unique("mallory"), unique("bob")
    async with elicit(servers, mallory, mode) as e:
        await sign_in_to_connections(other_browser, servers, bob)
        async with attack(servers, browsers=[other_browser], recorders=[e.recorder]) as a:
            page = a.status(await other_browser.get(e.url), 403)
            a.check("another account" in page.text, "the page says the link is someone else's")
            bob_csrf = (await other_browser.get(f"{servers.public_url}/connections")).text
            csrf = bob_csrf.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            posted = await other_browser.http.post(
                f"{servers.public_url}/connect", data={"elicitationId": e.elicitation_id, "csrf": csrf}
            )
            a.status(posted, 403)
            a.check(elicitation_status(servers, e.elicitation_id) == "pending", "the link was not consumed")
        # Control: the refusal consumed nothing; the owner can still open the link.
        page = await open_link(browser, e.url, mallory)
        assert page.status_code == 200 and confirm_form(page).fields["elicitationId"] == e.elicitation_id


@pytest.mark.parametrize("mode", MODES)
async def test_link_opened_without_a_session_redirects_to_login_and_consumes_nothing(
    servers: Servers, mode: str
) -> None:
    """Phishing with no session: login redirect on GET, 401 on POST, link still pending (invariant 2)."""
    async with elicit(servers, unique("alice"), mode) as e, attack(servers, recorders=[e.recorder]) as a:
        page, posted = await get_and_post(servers, None, e.url, e.elicitation_id, "any-csrf-value")
        a.status(page, 303)
        a.check(login_redirect_for(page, e.elicitation_id), "GET sends the browser to the login")
        a.status(posted, 401)
        a.check(elicitation_status(servers, e.elicitation_id) == "pending", "the link was not consumed")


@pytest.mark.parametrize("mode", MODES)
async def test_link_opened_with_an_expired_session_is_treated_as_signed_out(
    servers: Servers, mode: str
) -> None:
    """Phishing with an expired (genuinely signed, old login_at) session: signed out (invariant 2)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e, attack(servers, recorders=[e.recorder]) as a:
        old = time.time() - servers.demo.settings.session_max_age - 60
        cookie = forge_session(servers, sub=alice, login_at=old)
        page, posted = await get_and_post(
            servers, cookie, e.url, e.elicitation_id, "forged-csrf-token-0123456789"
        )
        a.status(page, 303)
        a.check(login_redirect_for(page, e.elicitation_id), "GET sends the browser to the login")
        a.status(posted, 401)
        a.check(elicitation_status(servers, e.elicitation_id) == "pending", "the link was not consumed")


@pytest.mark.parametrize("mode", MODES)
async def test_link_opened_with_a_cookie_signed_by_another_key_is_treated_as_signed_out(
    servers: Servers, mode: str
) -> None:
    """Phishing with a session cookie signed by the attacker's key: ignored, signed out (invariant 2)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e, attack(servers, recorders=[e.recorder]) as a:
        cookie = forge_session(servers, sub=alice, secret="attacker-key-" + "k" * 40)
        page, posted = await get_and_post(
            servers, cookie, e.url, e.elicitation_id, "forged-csrf-token-0123456789"
        )
        a.status(page, 303)
        a.check(login_redirect_for(page, e.elicitation_id), "GET sends the browser to the login")
        a.status(posted, 401)
        a.check(elicitation_status(servers, e.elicitation_id) == "pending", "the link was not consumed")


def tampered_variants(servers: Servers, genuine: str, owner: str) -> dict[str, str]:
    """Mallory's own genuine cookie, edited to name the link's owner in three ways."""
    payload, _, rest = genuine.partition(".")
    import base64
    import json

    session = json.loads(base64.b64decode(payload))
    session["user"]["sub"] = owner
    edited = base64.b64encode(json.dumps(session).encode()).decode()
    other_signature = forge_session(servers, sub=owner, secret="x" * 48).split(".", 1)[1]
    return {
        "payload edited, signature kept": f"{edited}.{rest}",
        "signature truncated": genuine[:-6],
        "signature of another cookie": f"{edited}.{other_signature}",
    }


@pytest.mark.parametrize("mode", MODES)
async def test_link_opened_with_a_tampered_cookie_is_treated_as_signed_out(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Phishing with Mallory's own cookie edited to name the owner: every variant ignored (invariant 2)."""
    alice, mallory = unique("alice"), unique("mallory")
    await sign_in_to_connections(browser, servers, mallory)
    genuine = session_value(browser, servers)
    assert genuine is not None
    async with (
        elicit(servers, alice, mode) as e,
        attack(servers, browsers=[browser], recorders=[e.recorder]) as a,
    ):
        for name, cookie in tampered_variants(servers, genuine, alice).items():
            page, posted = await get_and_post(servers, cookie, e.url, e.elicitation_id, "x" * 43)
            a.status(page, 303)
            a.check(login_redirect_for(page, e.elicitation_id), f"{name}: GET sends the browser to the login")
            a.status(posted, 401)
        a.check(elicitation_status(servers, e.elicitation_id) == "pending", "the link was not consumed")


@pytest.mark.parametrize("mode", MODES)
async def test_planted_session_cookie_of_mallory_does_not_bind_alices_link(
    servers: Servers, browser: Browser, other_browser: Browser, mode: str
) -> None:
    """Mallory's valid session planted in Alice's browser: Alice's link is refused (RFC 9700 §4.7)."""
    alice, mallory = unique("alice"), unique("mallory")
    await sign_in_to_connections(other_browser, servers, mallory)
    planted = session_value(other_browser, servers)
    assert planted is not None
    plant_session(browser, servers, planted)
    async with (
        elicit(servers, alice, mode) as e,
        attack(servers, browsers=[browser], recorders=[e.recorder]) as a,
    ):
        page = a.status(await browser.get(e.url), 403)
        a.check(mallory in page.text or "another account" in page.text, "the page names the refusal")
        a.check(elicitation_status(servers, e.elicitation_id) == "pending", "the link was not consumed")


@pytest.mark.parametrize("mode", MODES)
async def test_provider_consent_link_forwarded_to_another_user_is_refused_at_the_callback(
    servers: Servers, browser: Browser, other_browser: Browser, mode: str
) -> None:
    """Phishing via the provider consent URL: Bob approves Mallory's flow: 403 (RFC 9700 §4.7)."""
    mallory, bob = unique("mallory"), unique("bob")
    async with elicit(servers, mallory, mode) as e:
        page = await open_link(browser, e.url, mallory)
        authorize_url = await continue_to_provider(browser, servers, page)
        await sign_in_to_connections(other_browser, servers, bob)
        async with attack(servers, browsers=[browser, other_browser], recorders=[e.recorder]) as a:
            callback = await consent(other_browser, authorize_url, login="bob-at-mockhub")
            a.status(await other_browser.get(callback), 403)
            a.check(elicitation_status(servers, e.elicitation_id) == "failed", "Mallory's flow failed closed")


# ---- who the confirmation page says is signed in --------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_confirmation_page_names_the_issuer_name_email_and_a_fresh_sign_in(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Planted session: the confirmation page shows who is signed in beyond the `sub`: the
    issuer's host, the ID token's name and e-mail (scopes `profile email`) and "signed in just
    now" after a fresh sign-in, never after an old one (2025-11-25/client-elicitation.mdx "Phishing")."""
    alice = unique("alice")
    issuer_host = urlsplit(servers.demo.settings.auth_issuer).netloc
    async with (
        elicit(servers, alice, mode) as e,
        attack(servers, browsers=[browser], recorders=[e.recorder]) as a,
    ):
        page = await browser.get(e.url)  # signed out: the sign-in asks who (prompt=login)
        [login] = [f for f in forms_in(page.text) if "username" in f.fields]
        page = a.status(await browser.submit(page, login, username=alice), 200)
        a.check(confirm_form(page).fields["elicitationId"] == e.elicitation_id, "Alice's confirmation page")
        a.check(f"<strong>{alice}@dev-as.example</strong>" in page.text, "the e-mail from the ID token")
        a.check(f"<strong>{issuer_host}</strong>" in page.text, "the issuer's host")
        a.check("signed in just now" in page.text, "a fresh sign-in says so")
        old = time.time() - 3600
        user = {"iss": servers.demo.settings.auth_issuer, "sub": alice, "auth_time": int(old)}
        plant_session(browser, servers, forge_session(servers, sub=alice, user=user))
        page = a.status(await browser.get(e.url), 200)
        a.check("signed in just now" not in page.text, "an hour-old sign-in is not 'just now'")


CLIENT_METADATA = {"redirect_uris": ["http://127.0.0.1:9/callback"], "token_endpoint_auth_method": "none"}


async def connect_link_of(
    servers: Servers, http: httpx.AsyncClient, mode: str, user: str, client: str
) -> str:
    """`user`'s MCP client, named `client` in its clientInfo, calls whoami: the connect link."""
    raw = RawMcp(servers, http, mode, bearer(servers, user), client_info={"name": client, "version": "1"})
    await raw.open()
    return connect_url(await raw.call_tool("whoami"))


LOOKALIKES = {
    "an uppercase I for an l": ("aIice", "U+0049 LATIN CAPITAL LETTER I"),
    "a Cyrillic a": ("\u0430lice", "U+0430 CYRILLIC SMALL LETTER A"),
}


@pytest.mark.parametrize("mode", MODES)
async def test_lookalike_account_and_client_names_are_shown_with_their_code_points(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Mallory signs in as `aIice` or as `alice` with a Cyrillic U+0430, and names her MCP client
    alike: the confirmation page warns and names the code points, so neither name passes for
    Alice's or for a client Alice knows (2025-11-25/client-elicitation.mdx "Phishing")."""
    for kind, (lookalike, code_point) in LOOKALIKES.items():
        mallory = unique(lookalike)
        async with httpx.AsyncClient() as http:
            url = await connect_link_of(servers, http, mode, mallory, f"Cl{lookalike}de")
        async with attack(servers, browsers=[browser]) as a:
            page = a.status(await open_link(browser, url, mallory), 200)
            a.check(page.text.count("Look closely") == 2, f"{kind}: the account and the client are flagged")
            a.check(code_point in page.text, f"{kind}: the code point {code_point} is named")
        drop_session(browser, servers)


@pytest.mark.parametrize("mode", MODES)
async def test_client_name_with_blank_letters_is_not_shown(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """A client named with blank letters (Hangul filler, zero-width joiner, braille blank) to pass
    for nobody or for another client: the page shows its client id instead; the dev AS refuses
    such a `client_name` at registration (UTS #39 §3.1; RFC 7591 §5)."""
    blanks = ["\u3164", "\u2800\u2800", "Claude\u200d", "Claude\u3164Desktop"]
    async with attack(servers, browsers=[browser]) as a:
        for name in blanks:
            alice = unique("alice")  # one pending link each (max_pending_per_user)
            async with httpx.AsyncClient() as http:
                url = await connect_link_of(servers, http, mode, alice, name)
            drop_session(browser, servers)
            page = a.status(await open_link(browser, url, alice), 200)
            [asked_by] = re.findall(r"<dt>Asked by</dt><dd>([^<]*)</dd>", page.text)
            a.check(asked_by == "dev-token", f"{name!r}: the client id is shown, not {asked_by!r}")
        async with httpx.AsyncClient() as http:
            registration = f"{servers.demo.settings.auth_issuer}/register"
            for name in [*blanks, " "]:
                answer = await http.post(registration, json={**CLIENT_METADATA, "client_name": name})
                refused = answer.status_code == 400 and answer.json()["error"] == "invalid_client_metadata"
                a.check(refused, f"{name!r}: {answer.text}")
            answer = await http.post(registration, json={**CLIENT_METADATA, "client_name": "Claude"})
            a.check(answer.status_code == 201, "a visible name registers")
