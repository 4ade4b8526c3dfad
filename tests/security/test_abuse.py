"""Abuse: floods and oversized inputs are bounded before they cost storage, memory or outbound
calls (DESIGN invariant 9; 2026-07-28 security-best-practices.mdx "State Handle Hijacking",
expiring and bounded handles; RFC 8725 §3.10 for key fetching)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import ACCEPT, MODES, mcp_client
from service.mcp.bearer import JWKS_REFETCH_INTERVAL
from tests.security.attack import (
    Servers,
    attack,
    elicitation_status,
    elicitations_of,
    nonce_count,
    running,
    unique,
)
from tests.security.flows import (
    MODERN,
    ask,
    bearer,
    connect_fully,
    elicit,
    manual,
    query_of,
    until_callback,
    url_of,
    with_query,
)
from tests.security.rpc import RawMcp, messages
from tests.security.tokens import dev_signed
from token_store import UserRef

# The floods here test what each request leaves behind (nonces, bodies, heads); the per-user
# request rate, which would cut them short, has its own attack test (test_user_rate.py).
pytestmark = [
    pytest.mark.security,
    pytest.mark.demo_settings(requests_per_second_per_user=1000, request_burst_per_user=1000),
]

SDK_BODY_LIMIT = 4 * 1024 * 1024  # mcp.server.transport_security.DEFAULT_MAX_REQUEST_BODY_SIZE
MAX_BEARER = 8192  # service.mcp.bearer.MAX_TOKEN_LENGTH


@pytest.mark.parametrize("mode", MODES)
async def test_flood_of_tool_calls_is_bounded_by_max_pending_per_user(servers: Servers, mode: str) -> None:
    """Pending-flow flood: 12 concurrent calls give max_pending_per_user links, then -32600 (invariant 9)."""
    limit = servers.demo.settings.max_pending_per_user
    flooder = unique("flooder")
    async with (
        mcp_client(servers, flooder, mode, on_url=manual) as (client, recorder),
        attack(servers, recorders=[recorder]) as a,
    ):
        answers = await asyncio.gather(
            *(client.session.call_tool("whoami", {}, allow_input_required=True) for _ in range(12)),
            return_exceptions=True,
        )
        refused = [
            x for x in answers if isinstance(x, MCPError) and x.error.code == mcp_types.INVALID_REQUEST
        ]
        asked = len(answers) - len(refused)
        a.check(asked == limit, f"{asked} elicitations handed out, the limit is {limit}: {answers}")
        for error in refused:
            a.rpc_error(error, mcp_types.INVALID_REQUEST, "Too many pending connection requests")
        stored = sorted(elicitations_of(servers, flooder))
        a.check(stored == ["pending"] * limit, f"exactly the limit stored: {stored}")
    # Another user is not affected by the flooder.
    async with elicit(servers, unique("bystander"), mode) as e:
        assert elicitation_status(servers, e.elicitation_id) == "pending"


FORM_AND_URL = {"elicitation": {"form": {}, "url": {}}}
QUESTIONS = 200


def account_question(answer: dict[str, Any]) -> tuple[str, list[str]]:
    """The requestState of a 2026-07-28 "which account?" and the values of its options (the
    accounts first, "connect another account" last)."""
    result = answer.get("result", {})
    asked = result.get("inputRequests", {}).get("account")
    assert result.get("resultType") == "input_required" and asked, answer
    [field] = asked["params"]["requestedSchema"]["properties"].values()
    return str(result["requestState"]), [str(o["const"]) for o in field["oneOf"]]


def choose(option: str) -> dict[str, Any]:
    return {"account": {"action": "accept", "content": {"account": option}}}


async def connect_two_accounts(servers: Servers, browser: Browser, user: str) -> None:
    """`user` connects MockHub twice (octocat, then hubot), naming each account (2026-07-28)."""
    async with mcp_client(servers, user, MODERN, on_url=manual) as (client, _):
        for login in ("octocat", "hubot"):
            first = await ask(client, MODERN, "whoami", {"account": login})
            await connect_fully(browser, servers, url_of(first), user, login=login)
            done = await client.session.call_tool(
                "whoami",
                {"account": login},
                allow_input_required=True,
                input_responses=ACCEPT,
                request_state=first.request_state,
            )
            assert isinstance(done, mcp_types.CallToolResult) and not done.is_error, done


async def test_flood_of_account_questions_holds_one_nonce_per_user(
    servers: Servers, browsers: Callable[[], Browser]
) -> None:
    """2026-07-28 "which account?" asked 200 times by one user: one live nonce, not 200; the older
    states are refused as used, the newest answers; another user's open question still answers
    (invariant 9; patterns-mrtr "Server Requirements (Basic Workflow)": clients need not answer).
    2025-11-25 asks in-band (elicitation/create on the session) and stores no nonce."""
    alice, bob = unique("alice"), unique("bob")
    for user in (alice, bob):
        await connect_two_accounts(servers, browsers(), user)
    store = servers.apps["mcp"].state.runtime.store
    issuer = servers.demo.settings.auth_issuer
    async with httpx.AsyncClient() as http:
        alices = RawMcp(servers, http, MODERN, bearer(servers, alice), capabilities=FORM_AND_URL)
        bobs = RawMcp(servers, http, MODERN, bearer(servers, bob), capabilities=FORM_AND_URL)
        bobs_state, bobs_options = account_question(await bobs.call_tool("whoami"))
        async with attack(servers) as a:
            before = nonce_count(servers)
            questions = [account_question(await alices.call_tool("whoami")) for _ in range(QUESTIONS)]
            held = nonce_count(servers) - before
            a.check(held == 1, f"{QUESTIONS} questions hold {held} nonces")
            (oldest, options), (newest, _) = questions[0], questions[-1]
            stale = await alices.call_tool("whoami", requestState=oldest, inputResponses=choose(options[0]))
            a.rpc_error(_error(stale), mcp_types.INVALID_PARAMS, "already used")
            answered = await alices.call_tool(
                "whoami", requestState=newest, inputResponses=choose(options[0])
            )
            a.check("structuredContent" in answered.get("result", {}), f"the newest answers: {answered}")
            chosen = await store.get_default_account(UserRef(issuer, alice), "mockhub")
            a.check(f"account:{chosen}" == options[0], f"Alice's choice is remembered: {chosen}")
            # Bob asked before the flood, in a slot of his own: his question still answers.
            bobs_answer = await bobs.call_tool(
                "whoami", requestState=bobs_state, inputResponses=choose(bobs_options[1])
            )
            a.check("structuredContent" in bobs_answer.get("result", {}), f"Bob answers: {bobs_answer}")
            chosen = await store.get_default_account(UserRef(issuer, bob), "mockhub")
            a.check(f"account:{chosen}" == bobs_options[1], f"Bob's choice is remembered: {chosen}")


def _error(answer: dict[str, Any]) -> MCPError:
    error = answer.get("error", {})
    return MCPError(code=error.get("code", 0), message=error.get("message", str(answer)))


@pytest.mark.parametrize("mode", MODES)
async def test_unencodable_tool_argument_gets_a_clear_error(servers: Servers, mode: str) -> None:
    """A tool argument no store can encode (a lone surrogate): a clear -32602/-32700, no crash."""
    async with httpx.AsyncClient() as http, attack(servers) as a:
        raw = RawMcp(servers, http, mode, bearer(servers, unique("odd")))
        if mode == "legacy":
            await raw.open()
        answer = await raw.send("tools/call", {"name": "whoami", "arguments": {"account": "\ud800"}})
        a.status(answer, 200, 400)
        [reply] = [m for m in messages(answer) if "id" in m]
        code = reply.get("error", {}).get("code")
        a.check(code in (mcp_types.INVALID_PARAMS, -32700), f"a clear JSON-RPC error, got {reply}")


async def _chunks(total: int) -> AsyncIterator[bytes]:
    yield b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami","arguments":{"x":"'
    sent = 0
    while sent < total:
        yield b"a" * 65536
        sent += 65536
    yield b'"}}}'


@pytest.mark.parametrize("mode", MODES)
async def test_oversized_body_to_mcp_is_413_before_any_store_work(servers: Servers, mode: str) -> None:
    """Oversized body to /mcp (declared or streamed): 413 before any store work (basic-transports)."""
    user = unique("bulky")
    async with httpx.AsyncClient(timeout=30) as http:
        raw = RawMcp(servers, http, mode, bearer(servers, user))
        if mode == "legacy":
            await raw.open()
        headers = raw._headers("tools/call", "whoami")
        async with attack(servers) as a:
            body = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami","arguments":'
            body += b'{"x":"' + b"a" * SDK_BODY_LIMIT + b'"}}}'
            a.status(await http.post(servers.mcp_url, content=body, headers=headers), 413)
            streamed = await http.post(servers.mcp_url, content=_chunks(SDK_BODY_LIMIT), headers=headers)
            a.status(streamed, 413)
            a.check(elicitations_of(servers, user) == [], "no store work for an oversized request")


@pytest.mark.parametrize("mode", MODES)
async def test_a_head_or_body_past_the_replica_limits_is_refused_however_it_arrives(
    servers: Servers, mode: str
) -> None:
    """A head over 16 KiB sent in one write (h11 alone would parse it) gets 431, and a body over
    1 MiB (under the SDK's own 4 MiB) 413, on /mcp and a browser route, before any store work;
    another user's session is served afterwards (RFC 6585 §5, RFC 9110 §15.5.14)."""
    user, other = unique("heady"), unique("bystander")
    async with httpx.AsyncClient(timeout=30) as http:
        raw = RawMcp(servers, http, mode, bearer(servers, user))
        if mode == "legacy":
            await raw.open()
        bystander = RawMcp(servers, http, mode, bearer(servers, other))
        if mode == "legacy":
            await bystander.open()
        headers = raw._headers("tools/call", "whoami")
        async with attack(servers) as a:
            host, port = servers.mcp_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            head = f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\n{fields}x-fill: {'f' * 20000}\r\n"
            writer.write(head.encode() + b"content-length: 2\r\n\r\n{}")  # one write, one read
            await writer.drain()
            status_line = await reader.readline()
            writer.close()
            a.check(status_line.split()[1] == b"431", f"one-piece 20 KiB head: {status_line!r}")
            body = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami","arguments":'
            body += b'{"x":"' + b"a" * (1024 * 1024) + b'"}}}'
            a.status(await http.post(servers.mcp_url, content=body, headers=headers), 413)
            a.status(await http.post(servers.public_url + "/connect", content=body), 413)
            a.check(elicitations_of(servers, user) == [], "no store work for a refused request")
            answer = await bystander.call_tool("whoami", {})
            a.check("id" in answer, "another user's session is still served")


async def test_oversized_headers_and_parameters_at_connect_and_callback_get_4xx(
    servers: Servers, browser: Browser
) -> None:
    """Oversized params, cookies, headers at /connect and /callback: 4xx, never 5xx (RFC 6819 §4.4.1.6)."""
    base = servers.public_url
    unknown_state = secrets.token_urlsafe(32)
    big = "A" * 10_000
    async with attack(servers, browsers=[browser]) as a, httpx.AsyncClient() as http:
        a.status(await http.get(f"{base}/connect", params={"elicitationId": big}), 400)
        a.status(await http.get(f"{base}/callback/mockhub", params={"state": big, "code": "c"}), 400)
        a.status(
            await http.get(f"{base}/callback/mockhub", params={"state": unknown_state, "code": big}), 400
        )
        padded = {"state": unknown_state, "code": "c", "junk": big}
        a.status(await http.get(f"{base}/callback/mockhub", params=padded), 400)
        many = {f"p{i}": "x" for i in range(2000)} | {"state": unknown_state}
        a.status(await http.get(f"{base}/callback/mockhub", params=many), 400)
        # Heads over 16 KiB: 431 before the routes (service/http/request_limits.py).
        cookie = {"Cookie": "mcpuc_session=" + "B" * 30_000}
        a.status(await http.get(f"{base}/connect", params={"elicitationId": "bad*"}, headers=cookie), 431)
        a.status(
            await http.get(f"{base}/callback/mockhub", params={"state": unknown_state}, headers=cookie), 431
        )
        headers = {f"X-Junk-{i}": "j" * 100 for i in range(300)}
        a.status(await http.get(f"{base}/callback/mockhub", params={"state": "x"}, headers=headers), 431)
        a.status(await http.get(f"{base}/connect", headers={"X-Huge": "h" * 200_000}), range(400, 500))


@pytest.mark.parametrize("mode", MODES)
async def test_oversized_callback_parameter_does_not_burn_the_state(
    servers: Servers, browser: Browser, mode: str
) -> None:
    """Oversized callback parameter: 400 before the state is consumed (invariant 3, no DoS by padding)."""
    alice = unique("alice")
    async with elicit(servers, alice, mode) as e:
        callback = await until_callback(browser, servers, e.url, alice)
        async with attack(servers, browsers=[browser], recorders=[e.recorder]) as a:
            a.status(
                await browser.get(with_query(callback, code=query_of(callback)["code"] + "x" * 2100)), 400
            )
            a.status(await browser.get(with_query(callback, padding="p" * 2100)), 400)
            a.check(elicitation_status(servers, e.elicitation_id) == "opened", "the flow is still open")
        assert (await browser.get(callback)).status_code == 200  # control: the state survived


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """A demo that has never verified a bearer: its JWKS cache is empty, so any key lookup fetches."""
    yield from running(tmp_path_factory, "cold-jwks")


def jwks_fetches(servers: Servers, since: int = 0) -> int:
    paths = ("/jwks.json", "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")
    return sum(1 for x in servers.exchanges("providers", since=since) if x.path in paths)


@pytest.mark.parametrize("mode", MODES)
async def test_oversized_bearer_is_refused_before_any_jwks_fetch(cold: Servers, mode: str) -> None:
    """Oversized bearer (> 8 KB), even validly signed: 401 with no JWKS fetch (RFC 8725 §3.10)."""
    padded = dev_signed(cold, sub=unique("big"), pad="p" * MAX_BEARER)
    unknown_kid = dev_signed(cold, head={"kid": "k" * 40}, pad="p" * MAX_BEARER)
    assert len(padded) > MAX_BEARER
    async with httpx.AsyncClient() as http, attack(cold) as a:
        a.secret(padded, unknown_kid)
        for token in (padded, unknown_kid):
            a.status(await RawMcp(cold, http, mode, token).open(), 401)
        a.check(jwks_fetches(cold) == 0, "no outbound fetch for an oversized token")


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_kid_flood_refetches_jwks_at_most_once(servers: Servers, mode: str) -> None:
    """Unknown-kid flood: 401 each, the AS's JWKS is refetched at most once (RFC 8725 §3.10)."""
    async with httpx.AsyncClient() as http:
        assert (await RawMcp(servers, http, mode, bearer(servers, unique("warm"))).open()).status_code == 200
        # As if the last fetch were older than the refetch interval: the next unknown kid may refetch.
        jwks = servers.apps["mcp"].state.mcp_server._token_verifier._jwks
        jwks._fetched_at -= JWKS_REFETCH_INTERVAL + 1
        async with attack(servers) as a:
            mark = servers.wire.mark()
            tokens = [dev_signed(servers, head={"kid": secrets.token_urlsafe(12)}) for _ in range(30)]
            answers = await asyncio.gather(*(RawMcp(servers, http, mode, t).open() for t in tokens))
            for answer in answers:
                a.status(answer, 401)
            fetched = sum(1 for x in servers.exchanges("providers", since=mark) if x.path == "/jwks.json")
            a.check(fetched == 1, f"{fetched} JWKS fetches for 30 unknown kids, expected exactly one")


async def test_an_oversized_request_head_is_refused_by_the_http_parser(servers: Servers) -> None:
    """A 1 MB header field on a route that reads no header: refused by uvicorn's h11 before any app
    code runs (h11 stops buffering an incomplete head at 16 KiB; httptools, kept out for this,
    accepts any size: service/http/server.py). The server answers the next request as usual."""
    async with httpx.AsyncClient() as http:
        try:
            answer = await http.get(f"{servers.public_url}/healthz", headers={"X-Huge": "h" * 1_000_000})
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            pass  # the connection closed without an answer: refused too
        else:
            assert 400 <= answer.status_code < 500, answer.status_code
        assert (await http.get(f"{servers.public_url}/healthz")).status_code == 200
