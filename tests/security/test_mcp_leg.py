"""The MCP leg: forged or misdirected bearer tokens, token passthrough both ways, session hijack,
and identity claimed through tool arguments (DESIGN invariants 1 and 6; RFC 8725; RFC 9068;
RFC 8707; 2025-11-25 basic-authorization.mdx "Token Audience Binding and Validation";
2026-07-28 security-best-practices.mdx "Token Passthrough")."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES, mcp_client
from tests.security.attack import Listener, Servers, attack, connection_records, running, unique
from tests.security.flows import (
    ask,
    bearer,
    connect_fully,
    consent,
    continue_to_provider,
    elicit,
    manual,
    open_link,
    retry,
    settled,
)
from tests.security.rpc import RawMcp
from tests.security.tokens import (
    attacker_jwk,
    attacker_key,
    claims,
    dev_key,
    dev_signed,
    hs256_with_public_key,
    login_client_tokens,
    sign,
    tampered,
    unsigned,
)

pytestmark = pytest.mark.security


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def key_server() -> Iterator[Listener]:
    """The attacker's key server: a jku / x5u target serving the attacker's JWKS."""
    with Listener({"keys": []}) as server:
        yield server
    assert server.hits == [], f"the server fetched keys named by a token: {server.hits}"


@dataclass(frozen=True)
class Connected:
    """Alice with a real mockhub connection, made once for the module."""

    user: str
    account: str
    label: str


@pytest.fixture(scope="module")
def alice(servers: Servers) -> Connected:
    async def connect() -> Connected:
        user = unique("alice")
        browser = Browser()
        try:
            async with elicit(servers, user, "legacy") as e:
                await connect_fully(browser, servers, e.url, user, login="alice-at-mockhub")
                result = await retry(e)
                profile = result.structured_content
                return Connected(user, str(profile["id"]), str(profile["login"]))
        finally:
            await browser.aclose()

    return asyncio.run(connect())


@pytest.fixture(scope="module")
def login_tokens(servers: Servers) -> dict[str, Any]:
    return login_client_tokens(servers, unique("alice"))


# ---- forged and misdirected bearers ----------------------------------------------------------

Factory = Callable[[Servers, Listener, dict[str, Any]], str]


def _jku(servers: Servers, keys: Listener, _: dict[str, Any]) -> str:
    private = attacker_key()
    keys.body = {"keys": [attacker_jwk(private, "attacker")]}
    return sign(
        private,
        {"alg": "RS256", "typ": "at+jwt", "kid": "attacker", "jku": keys.url("/keys.json")},
        claims(servers),
    )


def _jwk(servers: Servers, keys: Listener, _: dict[str, Any]) -> str:
    private = attacker_key()
    head = {"alg": "RS256", "typ": "at+jwt", "kid": dev_key(servers).kid, "jwk": attacker_jwk(private, "x")}
    return sign(private, head, claims(servers))


def _x5u(servers: Servers, keys: Listener, _: dict[str, Any]) -> str:
    private = attacker_key()
    return sign(
        private,
        {"alg": "RS256", "typ": "at+jwt", "kid": "attacker", "x5u": keys.url("/cert.pem")},
        claims(servers),
    )


def _x5c(servers: Servers, keys: Listener, _: dict[str, Any]) -> str:
    head = {"alg": "RS256", "typ": "at+jwt", "kid": dev_key(servers).kid, "x5c": ["MIIBattacker"]}
    return sign(attacker_key(), head, claims(servers))


def _other_key_same_kid(servers: Servers, keys: Listener, _: dict[str, Any]) -> str:
    return sign(
        attacker_key(), {"alg": "RS256", "typ": "at+jwt", "kid": dev_key(servers).kid}, claims(servers)
    )


BEARERS: dict[str, Factory] = {
    "wrong aud": lambda s, k, t: dev_signed(s, aud="https://other.example/mcp"),
    "aud of another resource on the AS": lambda s, k, t: dev_signed(s, aud=s.demo.providers.mockhub_issuer),
    "aud list without ours": lambda s, k, t: dev_signed(s, aud=["https://a.example", "https://b.example"]),
    "missing aud": lambda s, k, t: dev_signed(s, aud=None),
    "wrong iss": lambda s, k, t: dev_signed(s, iss="https://evil.example"),
    "iss of mockhub": lambda s, k, t: dev_signed(s, iss=s.demo.providers.mockhub_issuer),
    "expired": lambda s, k, t: dev_signed(s, iat=0, nbf=0, exp=1_000_000),
    "expired just beyond leeway": lambda s, k, t: dev_signed(s, exp=int(time.time()) - 45),
    "nbf in the future": lambda s, k, t: dev_signed(s, nbf=int(time.time()) + 300),
    "typ JWT": lambda s, k, t: dev_signed(s, head={"typ": "JWT"}),
    "typ missing": lambda s, k, t: dev_signed(s, head={"typ": None}),
    "alg none": lambda s, k, t: unsigned(s),
    "HS256 keyed with the public key": lambda s, k, t: hs256_with_public_key(s),
    "unknown kid": lambda s, k, t: dev_signed(s, head={"kid": "no-such-kid"}),
    "no kid": lambda s, k, t: dev_signed(s, head={"kid": None}),
    "jku header": _jku,
    "jwk header": _jwk,
    "x5u header": _x5u,
    "x5c header": _x5c,
    "another key with the AS's kid": _other_key_same_kid,
    "missing sub": lambda s, k, t: dev_signed(s, sub=None),
    "empty sub": lambda s, k, t: dev_signed(s, sub=""),
    "non-string sub": lambda s, k, t: dev_signed(s, sub=12345),
    "oversized sub": lambda s, k, t: dev_signed(s, sub="a" * 300),
    "payload swapped, signature kept": lambda s, k, t: tampered(bearer(s, "mallory"), s, "alice"),
    "ID token of the dev AS (typ JWT, aud = login client)": lambda s, k, t: t["id_token"],
    "ID-token shape with our aud": lambda s, k, t: dev_signed(s, head={"typ": "JWT"}, nonce="n", azp="x"),
    "not a JWT": lambda s, k, t: "not-a-jwt-at-all-0123456789",
    "three empty segments": lambda s, k, t: "..",
}


@pytest.mark.parametrize("variant", list(BEARERS.values()), ids=list(BEARERS))
@pytest.mark.parametrize("mode", MODES)
async def test_forged_or_misdirected_bearer_is_rejected(
    servers: Servers, key_server: Listener, login_tokens: dict[str, Any], mode: str, variant: Factory
) -> None:
    """Forged or misdirected bearer: 401, no key fetched (RFC 8725 §3; RFC 9068 §4; RFC 8707)."""
    token = variant(servers, key_server, login_tokens)
    async with httpx.AsyncClient() as http, attack(servers) as a:
        a.secret(token)
        answer = a.status(await RawMcp(servers, http, mode, token).open(), 401)
        challenge = answer.headers.get("www-authenticate", "")
        a.check('error="invalid_token"' in challenge, f"an RFC 6750 challenge: {challenge}")
        a.check("resource_metadata=" in challenge, "RFC 9728 pointer to the metadata")
        a.check(key_server.hits == [], "no key was fetched from a URL the token named")


@pytest.mark.parametrize("mode", MODES)
async def test_control_a_well_formed_crafted_bearer_is_accepted(servers: Servers, mode: str) -> None:
    """Control for the bearer rejections: the same crafting with nothing wrong is accepted."""
    async with httpx.AsyncClient() as http, attack(servers) as a:
        a.status(await RawMcp(servers, http, mode, dev_signed(servers, sub=unique("control"))).open(), 200)


@pytest.mark.parametrize("mode", MODES)
async def test_bearer_outside_the_authorization_header_is_ignored(servers: Servers, mode: str) -> None:
    """Bearer in query, cookie or form instead of the header: 401 (basic-authorization Token Requirements)."""
    token = bearer(servers, unique("alice"))
    async with httpx.AsyncClient() as http, attack(servers) as a:
        a.secret(token)
        a.status(
            await RawMcp(servers, http, mode, None, headers={"Cookie": f"access_token={token}"}).open(), 401
        )
        query = RawMcp(servers, http, mode, None)
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        headers = query._headers("initialize", None)
        answer = await http.post(servers.mcp_url, params={"access_token": token}, json=body, headers=headers)
        a.status(answer, 401)
        form = await http.post(
            servers.mcp_url, data={"access_token": token}, headers={"Accept": headers["Accept"]}
        )
        a.status(form, 400, 401, 415)


@pytest.mark.parametrize("mode", MODES)
async def test_cross_origin_browser_request_to_mcp_is_refused(servers: Servers, mode: str) -> None:
    """Cross-origin page / DNS rebinding driving /mcp: a foreign Origin is refused (basic-transports)."""
    async with httpx.AsyncClient() as http, attack(servers) as a:
        token = bearer(servers, unique("alice"))
        for origin in ("https://evil.example", "http://127.0.0.1.evil.example", "null"):
            raw = RawMcp(servers, http, mode, token, headers={"Origin": origin})
            a.status(await raw.open(), 403)


# ---- token passthrough -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_bearer_never_reaches_the_provider(servers: Servers, browser: Browser, mode: str) -> None:
    """Token passthrough outbound: mockhub sees only its own tokens (security-best-practices)."""
    user = unique("carol")
    async with (
        elicit(servers, user, mode) as e,
        attack(
            servers,
            browsers=[browser],
            recorders=[e.recorder],
            new_connections=1,
            token_requests=1,
            exchanges_ok=1,
            completions=1 if mode == "legacy" else 0,
            settle=0.2,
        ) as a,
    ):
        mark = servers.wire.mark()
        await connect_fully(browser, servers, e.url, user)
        result = await retry(e)
        a.observe(result.model_dump())
        a.check(not result.is_error, "the tool worked")
        for exchange in servers.exchanges("providers", since=mark):
            authorization = exchange.header("authorization")
            if exchange.path == "/mockhub/user":
                token = (authorization or "").removeprefix("Bearer ")
                a.check(token in servers.mockhub.issued_access_tokens, "only mockhub's own token")
            elif exchange.path == "/mockhub/token":
                basic = authorization is None or authorization.startswith("Basic ")
                a.check(basic, f"client authentication only (or client_secret_post): {authorization}")
            else:
                a.check(authorization is None, f"{exchange.path}: no Authorization at all")


@pytest.mark.parametrize("mode", MODES)
async def test_provider_access_token_is_not_accepted_as_a_bearer(
    servers: Servers, alice: Connected, mode: str
) -> None:
    """Token passthrough inbound: a mockhub token (mhat_) at /mcp is 401 (security-best-practices)."""
    provider_tokens = sorted(servers.mockhub.issued_access_tokens)
    assert provider_tokens
    async with httpx.AsyncClient() as http, attack(servers) as a:
        for token in provider_tokens[:2]:
            a.status(await RawMcp(servers, http, mode, token).open(), 401)


# ---- sessions and identity ---------------------------------------------------------------------


async def test_another_users_mcp_session_id_is_rejected(servers: Servers, alice: Connected) -> None:
    """Session hijack: Alice's Mcp-Session-Id with another principal: 404 (basic-transports Sessions)."""
    async with httpx.AsyncClient() as http:
        alices = RawMcp(servers, http, "legacy", bearer(servers, alice.user))
        assert (await alices.open()).status_code == 200
        session_id = alices.session_id
        assert session_id
        bob = RawMcp(
            servers, http, "legacy", bearer(servers, unique("bob")), headers={"Mcp-Session-Id": session_id}
        )
        bob.session_id = session_id
        async with attack(servers) as a:
            answer = await bob.send("tools/call", {"name": "whoami", "arguments": {}})
            a.status(answer, 404)
            headers = {
                "Authorization": f"Bearer {bob.token}",
                "Mcp-Session-Id": session_id,
                "Accept": "text/event-stream",
            }
            a.status(await http.get(servers.mcp_url, headers=headers), 404)
            a.status(await http.delete(servers.mcp_url, headers=headers), 404)
            # Alice herself through another MCP client (another client_id): not her session either.
            other_client = bearer(servers, alice.user, client_id="another-client")
            joined = {**headers, "Authorization": f"Bearer {other_client}"}
            a.status(await http.get(servers.mcp_url, headers=joined), 404)
            # Control: Alice's session is alive and still serves Alice.
            served = await alices.call_tool("whoami")
            a.check(
                served.get("result", {}).get("structuredContent", {}).get("login") == alice.label,
                "Alice served",
            )


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The demo as replica `mcp-1`: the session ids it issues carry that routing prefix."""
    yield from running(tmp_path_factory, "replica", replica_id="mcp-1")


async def test_forged_replica_prefix_on_a_session_id_is_rejected(replica: Servers) -> None:
    """Forged or stripped replica prefix on a session id: 404; the prefix is a label (invariant 7)."""
    alice, bob = unique("alice"), unique("bob")
    async with httpx.AsyncClient() as http:
        alices = RawMcp(replica, http, "legacy", bearer(replica, alice))
        assert (await alices.open()).status_code == 200
        session_id = alices.session_id
        assert session_id and session_id.startswith("mcp-1.")
        bare = session_id.removeprefix("mcp-1.")
        async with attack(replica) as a:
            for token, forged in (
                (bearer(replica, bob), session_id),
                (bearer(replica, bob), bare),
                (bearer(replica, bob), "mcp-2." + bare),
                (bearer(replica, alice), "mcp-2." + bare),
                (bearer(replica, alice), "mcp-1.mcp-1." + bare),
            ):
                intruder = RawMcp(replica, http, "legacy", token, headers={"Mcp-Session-Id": forged})
                intruder.session_id = forged
                a.status(
                    await intruder.send("tools/call", {"name": "list_connections", "arguments": {}}), 404
                )
            a.status(await alices.send("tools/call", {"name": "list_connections", "arguments": {}}), 200)


async def test_stateless_request_carrying_another_users_session_id_is_served_as_the_caller(
    servers: Servers, alice: Connected
) -> None:
    """2026-07-28 with Alice's session id and Bob's token: Bob sees only Bob's data (invariant 1)."""
    async with httpx.AsyncClient() as http:
        alices = RawMcp(servers, http, "legacy", bearer(servers, alice.user))
        await alices.open()
        assert alices.session_id
        bob = RawMcp(
            servers,
            http,
            "2026-07-28",
            bearer(servers, unique("bob")),
            headers={"Mcp-Session-Id": alices.session_id},
        )
        async with attack(servers) as a:
            listed = await bob.call_tool("list_connections")
            a.check(
                listed["result"]["structuredContent"] == {"result": []}, f"Bob's own (empty) list: {listed}"
            )
            whoami = await bob.call_tool("whoami")
            a.check(
                whoami["result"]["resultType"] == "input_required", "Bob is asked to connect his own account"
            )


@pytest.mark.parametrize("mode", MODES)
async def test_a_failure_notice_is_taken_only_by_the_user_and_session_it_belongs_to(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Bob naming Alice's Mcp-Session-Id never reads or consumes "your last connect was declined":
    2025-11-25 404, 2026-07-28 served as Bob (the header ignored); Alice's retry still gets it
    (2026-07-28/transports-streamable-http.mdx "Earlier Streamable HTTP Revisions")."""
    alice = unique("alice")
    async with elicit(servers, alice, "legacy") as e:
        page = await open_link(browser, e.url, alice)
        callback = await consent(browser, await continue_to_provider(browser, servers, page), decision="deny")
        await browser.get(callback)
        await settled(e)  # Alice's session heard that her flow failed
        [session_id] = e.recorder.session_ids
        async with httpx.AsyncClient() as http, attack(servers, recorders=[e.recorder]) as a:
            bob = RawMcp(
                servers, http, mode, bearer(servers, unique("bob")), headers={"Mcp-Session-Id": session_id}
            )
            if mode == "legacy":
                bob.session_id = session_id
                a.status(await bob.send("tools/call", {"name": "whoami", "arguments": {}}), 404)
            else:
                answer = await bob.call_tool("whoami")
                a.check(
                    answer.get("result", {}).get("resultType") == "input_required",
                    f"Bob is asked to connect his own account, not told Alice's outcome: {answer}",
                )
            told = await retry(e)
            text = told.content[0].text if told.content else ""
            a.check(told.is_error and "was declined" in text, f"Alice is told her flow ended: {text}")
            await ask(e.client, "legacy")  # told once: her next call asks to connect again


@pytest.mark.parametrize("mode", MODES)
async def test_stored_token_is_never_used_for_another_user(
    servers: Servers, alice: Connected, mode: str
) -> None:
    """Bob's whoami while Alice is connected: Bob must connect, no API call (elicitation: Identifying)."""
    calls = servers.mockhub.user_requests
    async with (
        mcp_client(servers, unique("bob"), mode, on_url=manual) as (client, recorder),
        attack(servers, recorders=[recorder]) as a,
    ):
        answer = await ask(client, mode)
        a.observe(answer.model_dump() if hasattr(answer, "model_dump") else str(answer))
        a.check(alice.label not in json.dumps(answer, default=str), "nothing of Alice's profile")
        a.check(servers.mockhub.user_requests == calls, "no provider API call was made for Bob")


IDENTITY_ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("whoami", {"user": "{alice}"}),
    ("whoami", {"sub": "{alice}", "iss": "{iss}"}),
    ("whoami", {"account": "{account}"}),
    ("whoami", {"account": "{label}"}),
    ("whoami", {"provider": "mockhub", "account": "{account}", "user": "{alice}"}),
    ("list_connections", {"user": "{alice}", "sub": "{alice}"}),
    ("disconnect", {"provider": "mockhub", "user": "{alice}", "sub": "{alice}", "account": "{account}"}),
]


@pytest.mark.parametrize("mode", MODES)
async def test_tool_arguments_claiming_another_identity_are_ignored(
    servers: Servers, alice: Connected, mode: str
) -> None:
    """Tool arguments naming Alice (user, sub, iss, account): never Alice's data (invariant 1)."""
    values = {"alice": alice.user, "iss": servers.demo.settings.auth_issuer, "account": alice.account}
    values["label"] = alice.label
    calls = servers.mockhub.user_requests
    async with httpx.AsyncClient() as http, attack(servers) as a:
        for tool, template in IDENTITY_ARGUMENTS:
            bob = RawMcp(servers, http, mode, bearer(servers, unique("bob")))  # one each: pending limit
            await bob.open()
            arguments = {k: v.format(**values) for k, v in template.items()}
            answer = await bob.call_tool(tool, arguments)
            a.observe(answer)
            text = json.dumps(answer)
            a.check(alice.label not in text and alice.account not in text, f"{tool}{arguments}: {text[:300]}")
            result = answer.get("result", {})
            if tool == "whoami":
                asked = "error" in answer or result.get("resultType") == "input_required"
                a.check(asked, f"Bob is asked to connect his own account: {text[:300]}")
            elif tool == "list_connections":
                a.check(result.get("structuredContent") == {"result": []}, "Bob's own (empty) list")
            else:
                a.check(result.get("structuredContent", {}).get("disconnected") == [], "nothing deleted")
        a.check(servers.mockhub.user_requests == calls, "no provider API call on Alice's token")
        a.check(
            any(alice.user in record for record in connection_records(servers)), "Alice's record is intact"
        )
