"""Elicitation ids and OAuth states: unguessable, single use, short-lived, consumed atomically, and
strictly parsed (DESIGN invariant 3; RFC 6819 §5.1.4.2.2, RFC 9700 §4.7, 2026-07-28
security-best-practices.mdx "State Handle Hijacking")."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator

import mcp_types
import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES
from tests.security.attack import Servers, attack, elicitation_status, running, unique
from tests.security.flows import (
    confirm_form,
    connect_fully,
    consent,
    continue_to_provider,
    csrf_of,
    elicit,
    open_link,
    query_of,
    quick_session,
    quick_sign_in,
    retry,
    settled,
    until_callback,
    with_query,
)
from tests.support.clock import MovableClock
from token_store import UserRef, slot_tag

pytestmark = pytest.mark.security

ELICITATION_TTL = STATE_TTL = 1  # seconds


@pytest.fixture(scope="module")
def clock() -> MovableClock:
    """The MCP server's clock in the short-TTL demos: tests move it past a TTL, never sleep."""
    return MovableClock()


@pytest.fixture(scope="module")
def short_links(tmp_path_factory: pytest.TempPathFactory, clock: MovableClock) -> Iterator[Servers]:
    """A demo whose connect links live ELICITATION_TTL seconds."""
    yield from running(tmp_path_factory, "short-links", clock=clock, elicitation_ttl=ELICITATION_TTL)


@pytest.fixture(scope="module")
def short_states(tmp_path_factory: pytest.TempPathFactory, clock: MovableClock) -> Iterator[Servers]:
    """A demo whose OAuth states live STATE_TTL seconds (its links the default ten minutes)."""
    yield from running(tmp_path_factory, "short-states", clock=clock, state_ttl=STATE_TTL)


async def test_guessed_elicitation_ids_are_unknown(servers: Servers, browser: Browser) -> None:
    """Guessed elicitation ids (random, well-formed): 404 on GET and POST (RFC 6819 §5.1.4.2.2)."""
    page = await quick_sign_in(browser, servers, unique("guesser"))
    csrf = csrf_of(page)
    guesses = [secrets.token_urlsafe(32) for _ in range(10)] + ["A" * 16, "z" * 128, "-" * 43]
    async with attack(servers, browsers=[browser]) as a:
        for guess in guesses:
            a.status(await browser.get(f"{servers.public_url}/connect?elicitationId={guess}"), 404)
            posted = await browser.http.post(
                f"{servers.public_url}/connect", data={"elicitationId": guess, "csrf": csrf}
            )
            a.status(posted, 404)


@pytest.mark.parametrize("mode", MODES)
async def test_a_link_or_a_state_does_not_tell_whose_it_is(
    servers: Servers, browser: Browser, other_browser: Browser, mode: str
) -> None:
    """Whoever sees Alice's connect link (the model, the client, browser history) or her OAuth
    state (the provider) and knows the candidate users cannot tell it is hers: each is the random
    bits alone, never led by the user's slot tag, a public hash of `(iss, sub)` (on Redis Cluster
    it is masked: `SlotTags`). Bob's flow beside hers completes."""
    alice, bob = unique("alice"), unique("bob")
    issuer = servers.demo.settings.auth_issuer
    tags = {slot_tag(UserRef(issuer, name)) for name in (alice, bob)}
    async with elicit(servers, alice, mode) as e:
        page = await open_link(browser, e.url, alice)
        state = query_of(await continue_to_provider(browser, servers, page))["state"]
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for seen in (e.elicitation_id, state):
                a.check(len(seen) == 43, f"{seen!r} is 256 random bits, nothing more")
                a.check(seen[:4] not in tags, f"{seen!r} is not led by a candidate's slot tag")
    async with elicit(servers, bob, mode) as b:
        await connect_fully(other_browser, servers, b.url, bob)
        await settled(b)
        result = await retry(b)
        assert isinstance(result, mcp_types.CallToolResult) and not result.is_error, result


@pytest.mark.parametrize("mode", MODES)
async def test_link_reused_after_completion_is_refused(servers: Servers, browser: Browser, mode: str) -> None:
    """Connect link reused after completion: 409 on GET and POST, nothing stored (invariant 3)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        await connect_fully(browser, servers, e.url, alice)
        await settled(e)
        csrf = csrf_of(await browser.get(f"{servers.public_url}/connections"))
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            a.status(await browser.get(e.url), 409)
            posted = await browser.http.post(
                f"{servers.public_url}/connect", data={"elicitationId": e.elicitation_id, "csrf": csrf}
            )
            a.status(posted, 409)
            a.check(elicitation_status(servers, e.elicitation_id) == "complete", "status stays complete")


@pytest.mark.parametrize("mode", MODES)
async def test_expired_link_is_unknown(
    short_links: Servers, clock: MovableClock, browser: Browser, mode: str
) -> None:
    """Connect link opened after elicitation_ttl: 404 (invariant 3; best-practices, expiring handles)."""
    alice = unique("alice")
    quick_session(browser, short_links, alice)
    async with elicit(short_links, alice, mode) as e:
        clock.advance(ELICITATION_TTL + 1)
        async with attack(short_links, browsers=[browser], recorders=[e.recorder]) as a:
            a.status(await browser.get(e.url), 404)


@pytest.mark.parametrize("mode", MODES)
async def test_expired_state_is_refused_at_the_callback(
    short_states: Servers, clock: MovableClock, browser: Browser, mode: str
) -> None:
    """Provider redirect arriving after state_ttl: 400, the code is never redeemed (RFC 9700 §4.7)."""
    alice = unique("alice")
    async with elicit(short_states, alice, mode) as e:
        callback = await until_callback(browser, short_states, e.url, alice)
        clock.advance(STATE_TTL + 1)
        async with attack(short_states, browsers=[browser], recorders=[e.recorder]) as a:
            a.status(await browser.get(callback), 400)


@pytest.mark.parametrize("mode", MODES)
async def test_replayed_callback_is_refused(servers: Servers, browser: Browser, mode: str) -> None:
    """Replayed callback (code + state) after success: 400, no second exchange (RFC 9700 §4.7)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        assert (await browser.get(callback)).status_code == 200
        await settled(e)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            a.status(await browser.get(callback), 400)


@pytest.mark.parametrize("mode", MODES)
async def test_parallel_callbacks_with_one_state_redeem_the_code_once(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Racing callbacks with one state: exactly one code exchange (atomic consume, RFC 6749 §4.1.2)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        completions = 1 if mode == "legacy" else 0
        async with attack(
            servers,
            browsers=[browser],
            recorders=[e.recorder],
            new_connections=1,
            token_requests=1,
            exchanges_ok=1,
            completions=completions,
            settle=0.3,
        ) as a:
            answers = await asyncio.gather(*(browser.http.get(callback) for _ in range(4)))
            for answer in answers:
                a.status(answer, 200, 400)
            a.check(
                sorted(r.status_code for r in answers) == [200, 400, 400, 400], "exactly one callback won"
            )


@pytest.mark.parametrize("mode", MODES)
async def test_parallel_confirmations_open_the_link_once(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Racing POSTs of one confirmation: one redirect to the provider, the rest 409 (invariant 3)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        page = await open_link(browser, e.url, alice)
        form = confirm_form(page)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            answers = await asyncio.gather(
                *(
                    browser.http.post(
                        f"{servers.public_url}/connect", data=form.fields, follow_redirects=False
                    )
                    for _ in range(4)
                )
            )
            for answer in answers:
                a.status(answer, 303, 409)
            a.check(sorted(r.status_code for r in answers) == [303, 409, 409, 409], "exactly one POST won")
            a.check(elicitation_status(servers, e.elicitation_id) == "opened", "the link is opened once")


def tampered(state: str) -> dict[str, str]:
    flipped = state[:10] + ("A" if state[10] != "A" else "B") + state[11:]
    return {
        "one character flipped": flipped,
        "truncated": state[:-1],
        "extended": state + "A",
        "case swapped": state.swapcase(),
    }


@pytest.mark.parametrize("mode", MODES)
async def test_tampered_state_is_refused_and_burns_nothing(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Tampered state (flipped, cut, extended, case-swapped): 400, the real one survives (RFC 9700 §4.7)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            for state in tampered(query_of(callback)["state"]).values():
                a.status(await browser.get(with_query(callback, state=state)), 400)
            a.check(elicitation_status(servers, e.elicitation_id) == "opened", "the flow is still open")
        # Control: the genuine callback still completes.
        assert (await browser.get(callback)).status_code == 200


MALFORMED = {
    "2 KB+": "A" * 2100,
    "non-base64 characters": "abc*def+ghi/jkl=mno.pqr!",
    "unicode": "ÄÖÜßΑΒΓΔабвгд漢字かな" * 2,
    "NUL byte": "abcdefgh\x00ijklmnopqrstu",
    "CRLF header injection": "abcdefghijklmnop\r\nSet-Cookie: x=y",
    "SQL": "' OR '1'='1' -- abcdefghij",
    "path traversal": "../../../../etc/passwd",
    "empty": "",
    "whitespace padded": "  " + "a" * 43 + "  ",
}


@pytest.mark.parametrize("value", list(MALFORMED.values()), ids=list(MALFORMED))
async def test_malformed_ids_and_states_get_400_never_500(
    servers: Servers, browser: Browser, value: str
) -> None:
    """Malformed ids, states, codes (2 KB+, non-base64, unicode, NUL, CRLF, SQL): 400, never 500."""
    page = await quick_sign_in(browser, servers, unique("fuzzer"))
    csrf = csrf_of(page)
    base = servers.public_url
    async with attack(servers, browsers=[browser]) as a:
        a.status(await browser.http.get(f"{base}/connect", params={"elicitationId": value}), 400)
        posted = await browser.http.post(f"{base}/connect", data={"elicitationId": value, "csrf": csrf})
        a.status(posted, 400)
        a.status(
            await browser.http.get(f"{base}/callback/mockhub", params={"state": value, "code": "c" * 20}), 400
        )
        unknown_state = secrets.token_urlsafe(32)
        answer = await browser.http.get(
            f"{base}/callback/mockhub", params={"state": unknown_state, "code": value}
        )
        a.status(answer, 400)


@pytest.mark.parametrize("mode", MODES)
async def test_state_of_another_flow_of_the_same_user_does_not_finish_this_one(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Code of flow 1 with the state of flow 2 (same user): refused by PKCE (RFC 7636 §1)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as first, elicit(servers, alice, mode) as second:
        callback_1 = await until_callback(browser, servers, first.url, alice)
        page = await open_link(browser, second.url, alice)
        callback_2 = await consent(browser, await continue_to_provider(browser, servers, page))
        swapped = with_query(callback_2, code=query_of(callback_1)["code"])
        async with attack(
            servers, browsers=[browser], recorders=[first.recorder, second.recorder], token_requests=1
        ) as a:
            a.status(await browser.get(swapped), 502)
            a.check(elicitation_status(servers, second.elicitation_id) == "failed", "flow 2 failed closed")
