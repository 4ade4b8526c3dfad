"""The admin API (service/ops/admin_api.py) refuses whoever is not an operator: no token, an MCP
access token (even one with the admin scope: it is for another resource), an admin token without
the admin scope or from a client not on the admin list, a wrong static token, and any request that
is not on the admin port (docs/threat-model.md, "Operators' controls"). It refuses what it does
not understand (a query parameter, a nested body) with the documented JSON error, never ignores it.
Each refusal leaves every connection in place and the users' own sessions working; each refused
authentication is counted and audited at a bounded rate; each action that is allowed is audited
with who asked, the client included.

The admin app runs in process (httpx ASGITransport) on its own runtime over the demo's store,
as a replica's admin listener would; the demo's public port is reached over its socket.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES, mcp_client
from service.ops.admin_api import REFUSALS_AUDITED, admin_app
from service.runtime import Runtime
from tests.security.attack import Servers, attack, unique
from tests.security.flows import bearer, connect_fully, elicit, manual, retry, seed_connection
from tests.support.clock import MovableClock

pytestmark = pytest.mark.security

ADMIN_PORT = 9470  # never bound: the in-process transport names it as the server's port
STATIC_TOKEN = secrets.token_urlsafe(32)
ADMIN_SCOPE = "mcp-url-connect:admin"
ADMIN_AUDIENCE = "https://admin.mcp.example/"  # the admin API's own resource (RFC 8707)
STATIC = {"Authorization": f"Bearer {STATIC_TOKEN}"}


@asynccontextmanager
async def admin_client(
    servers: Servers, port: int = ADMIN_PORT, clock: Callable[[], float] | None = None, **changes: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    """The admin app on its own runtime over the demo's store, reached as if on `port`."""
    settings = servers.demo.settings.replace(
        admin_port=ADMIN_PORT,
        admin_audience=ADMIN_AUDIENCE,
        admin_token_sha256=hashlib.sha256(STATIC_TOKEN.encode()).hexdigest(),
        **changes,
    ).require_safe_to_serve()
    runtime = Runtime(settings, **({"clock": clock} if clock is not None else {}))
    async with runtime.running():
        transport = httpx.ASGITransport(app=admin_app(runtime))
        async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}") as http:
            yield http, runtime


def admin_bearer(
    servers: Servers, sub: str, *, client_id: str = "ops-automation", scope: str = ADMIN_SCOPE
) -> str:
    """An access token the dev AS issues for the admin API's resource."""
    return bearer(servers, sub, audience=ADMIN_AUDIENCE, client_id=client_id, scope=scope)


def audit_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "mcp_url_connect.audit"]


async def victim_still_served(servers: Servers, victim: str, mode: str) -> None:
    """The victim's connection is in place and their own MCP client still uses it."""
    async with mcp_client(servers, victim, mode, on_url=manual) as (client, _):
        assert not (await client.session.call_tool("whoami", {})).is_error


async def test_admin_api_refuses_a_request_without_a_token(servers: Servers) -> None:
    victim = unique("admin-victim")
    await seed_connection(servers, victim)
    async with admin_client(servers) as (http, _admin), attack(servers) as a:
        a.status(await http.get("/admin/connections"), 401)
        answer = a.status(await http.post("/admin/connections/revoke", json={"sub": victim}), 401)
        a.check(answer.headers["www-authenticate"] == "Bearer", "RFC 6750 challenge")
        a.status(
            await http.post("/admin/providers/mockhub/revoke-all", headers={"Authorization": "Bearer "}), 401
        )
        a.status(await http.get("/admin/connections", headers={"Authorization": "Basic YTpi"}), 401)


@pytest.mark.parametrize("mode", MODES)
async def test_admin_api_refuses_a_user_token_without_the_admin_scope(
    servers: Servers, browser: Browser, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    victim, attacker = unique("admin-victim"), unique("admin-attacker")
    async with elicit(servers, victim, mode) as e:
        await connect_fully(browser, servers, e.url, victim)
        await retry(e)
    user_token = admin_bearer(servers, attacker, scope="profile")  # for the admin API, no admin scope
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")
    async with admin_client(servers) as (http, _admin), attack(servers) as a:
        headers = {"Authorization": f"Bearer {user_token}"}
        answer = a.status(
            await http.post("/admin/connections/revoke", json={"sub": victim}, headers=headers), 403
        )
        a.check('error="insufficient_scope"' in answer.headers["www-authenticate"], "insufficient_scope")
        a.status(await http.get("/admin/connections", headers=headers), 403)
        a.status(await http.post("/admin/providers/mockhub/revoke-all", headers=headers), 403)
        a.status(await http.get("/admin/connections", headers={"Authorization": "Bearer " + "x" * 40}), 401)
        wrong_static = {"Authorization": f"Bearer {STATIC_TOKEN}x"}
        a.status(await http.get("/admin/connections", headers=wrong_static), 401)
    refused = [e for e in audit_events(caplog) if e["event"] == "operator_refused"]
    assert {e["actor"] for e in refused if e["reason"] == "insufficient_scope"} == {
        f"bearer:{attacker} client:ops-automation"
    }
    await victim_still_served(servers, victim, mode)


@pytest.mark.parametrize("mode", MODES)
async def test_an_mcp_token_with_the_admin_scope_is_not_an_admin_token(
    servers: Servers, browser: Browser, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """An MCP client an admin authorized, which asked for the admin scope, holds a token for the
    MCP resource: the admin API, a resource of its own (RFC 8707), refuses it; and the admin
    API's own token opens no MCP session."""
    victim, admin = unique("admin-victim"), unique("admin-ops")
    async with elicit(servers, victim, mode) as e:
        await connect_fully(browser, servers, e.url, victim)
        await retry(e)
    mcp_token = bearer(servers, admin, client_id="an-mcp-client", scope=f"{ADMIN_SCOPE} profile")
    admin_token = admin_bearer(servers, admin)
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")
    async with admin_client(servers) as (http, _admin), attack(servers) as a:
        mcp_headers = {"Authorization": f"Bearer {mcp_token}"}
        a.status(await http.get("/admin/connections", headers=mcp_headers), 401)
        a.status(await http.post("/admin/connections/revoke", json={"sub": victim}, headers=mcp_headers), 401)
        a.status(await http.post("/admin/providers/mockhub/revoke-all", headers=mcp_headers), 401)
        # The admin token is for the admin API only: /mcp refuses it (its audience is not /mcp's).
        async with httpx.AsyncClient() as public:
            at_mcp = await public.post(
                servers.mcp_url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "Authorization": f"Bearer {admin_token}",
                    "Accept": "application/json, text/event-stream",
                },
            )
        a.status(at_mcp, 401)
        listed = a.status(
            await http.get(
                "/admin/connections",
                params={"sub": victim},
                headers={"Authorization": f"Bearer {admin_token}"},
            ),
            200,
        )
        a.check([row["sub"] for row in listed.json()["connections"]] == [victim], "the admin token lists")
    events = audit_events(caplog)
    assert [e["event"] for e in events if e.get("actor") == f"bearer:{admin} client:ops-automation"] == [
        "operator_list"
    ]
    assert {e["reason"] for e in events if e["event"] == "operator_refused"} == {"invalid_token"}
    await victim_still_served(servers, victim, mode)


async def test_only_listed_admin_clients_act_as_operators(
    servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    victim, admin = unique("admin-victim"), unique("admin-ops")
    kept = await seed_connection(servers, victim)
    other_client = admin_bearer(servers, admin, client_id="a-dashboard-the-admin-signed-in-to")
    listed_client = admin_bearer(servers, admin, client_id="ops-automation")
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")
    async with (
        admin_client(servers, admin_client_ids=("ops-automation",)) as (http, runtime),
        attack(servers) as a,
    ):
        refused = a.status(
            await http.post(
                "/admin/connections/revoke",
                json={"sub": victim},
                headers={"Authorization": f"Bearer {other_client}"},
            ),
            403,
        )
        a.check(refused.json()["error"] == "insufficient_scope", "the documented error")
        allowed = {"Authorization": f"Bearer {listed_client}"}
        a.status(await http.get("/admin/connections", params={"sub": victim}, headers=allowed), 200)
        assert await runtime.store.find_connections(sub=victim) == [kept]
    refusals = [e for e in audit_events(caplog) if e["event"] == "operator_refused"]
    assert [(e["reason"], e["actor"]) for e in refusals] == [
        ("client_not_allowed", f"bearer:{admin} client:a-dashboard-the-admin-signed-in-to")
    ]


async def test_an_unknown_query_parameter_is_refused_not_ignored(servers: Servers) -> None:
    """`?usr=alice` (misspelt) must not list every user, nor `?sub=a&sub=b` act on one of them."""
    alice, bob = unique("admin-alice"), unique("admin-bob")
    await seed_connection(servers, alice)
    await seed_connection(servers, bob)
    async with admin_client(servers) as (http, _admin), attack(servers) as a:
        for query in ({"usr": alice}, {"sub": alice, "provder": "mockhub"}, [("sub", alice), ("sub", bob)]):
            answer = a.status(await http.get("/admin/connections", params=query, headers=STATIC), 400)
            a.check(answer.json()["error"] == "invalid_request", f"{query}: the documented error")
        a.status(
            await http.post(
                "/admin/connections/revoke", params={"sub": bob}, json={"sub": alice}, headers=STATIC
            ),
            400,
        )
        a.status(
            await http.post(
                "/admin/providers/mockhub/revoke-all", params={"dry_run": "true"}, headers=STATIC
            ),
            400,
        )
        listed = a.status(await http.get("/admin/connections", params={"sub": alice}, headers=STATIC), 200)
        a.check([row["sub"] for row in listed.json()["connections"]] == [alice], "alice's row only")


async def test_refused_authentications_are_audited_at_a_bounded_rate(
    servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    victim, admin = unique("admin-victim"), unique("admin-ops")
    await seed_connection(servers, victim)
    clock = MovableClock()
    no_scope = {"Authorization": f"Bearer {admin_bearer(servers, admin, scope='profile')}"}
    kinds = [{}, {"Authorization": "Bearer not-a-token"}, no_scope]
    flood = 3 * REFUSALS_AUDITED
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")
    async with admin_client(servers, clock=clock) as (http, runtime), attack(servers) as a:
        for i in range(flood):
            a.status(await http.get("/admin/connections", headers=kinds[i % 3]), 401, 403)
        refused = [e for e in audit_events(caplog) if e["event"] == "operator_refused"]
        a.check(len(refused) == REFUSALS_AUDITED, f"{len(refused)} audited of {flood}")
        a.check(
            [e["reason"] for e in refused[:3]] == ["no_token", "invalid_token", "insufficient_scope"],
            "each refusal says why",
        )
        a.check(refused[2]["actor"] == f"bearer:{admin} client:ops-automation", "a verified token names who")
        a.check(refused[0]["actor"] == "anonymous", "an unverified one names nobody")
        counted = runtime.metrics.registry.get_sample_value
        a.check(
            sum(
                counted("mcpuc_admin_refusals_total", {"reason": r}) or 0
                for r in ("no_token", "invalid_token", "insufficient_scope")
            )
            == flood,
            "the metric counts every refusal",
        )
        clock.advance(61)  # the next window: written again, with how many were left out
        a.status(await http.get("/admin/connections"), 401)
        a.status(await http.get("/admin/connections", headers=STATIC), 200)  # the operator is not locked out
    refused = [e for e in audit_events(caplog) if e["event"] == "operator_refused"]
    assert len(refused) == REFUSALS_AUDITED + 1 and refused[-1]["suppressed"] == flood - REFUSALS_AUDITED


async def test_malformed_requests_get_the_documented_json_error(servers: Servers) -> None:
    """A deeply nested body, an unknown route, a method a route does not take: 400, 404, 405 with
    the `Error` of docs/admin-openapi.json, never a 500 or a plain-text page."""
    victim = unique("admin-victim")
    kept = await seed_connection(servers, victim)
    nested = b'{"sub": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    async with admin_client(servers) as (http, runtime), attack(servers) as a:
        for path in ("/admin/connections/revoke", "/admin/providers/mockhub/revoke-all"):
            answer = a.status(await http.post(path, content=nested, headers=STATIC), 400)
            a.check(answer.json()["error"] == "invalid_request", f"{path}: nested body")
        missing = a.status(await http.get("/admin/nothing-here", headers=STATIC), 404)
        a.check(missing.json()["error"] == "not_found", "404 as JSON")
        wrong = a.status(await http.delete("/admin/connections", headers=STATIC), 405)
        a.check(wrong.json()["error"] == "method_not_allowed", "405 as JSON")
        a.check(wrong.headers["allow"] == "GET, HEAD", "405 says what is allowed (RFC 9110 §15.5.6)")
        for answer in (missing, wrong):
            a.check(set(answer.json()) == {"error", "error_description"}, "the documented shape")
        assert await runtime.store.find_connections(sub=victim) == [kept]


async def test_admin_api_refuses_a_request_on_the_public_port(servers: Servers) -> None:
    victim = unique("admin-victim")
    await seed_connection(servers, victim)
    static = STATIC
    public_port = servers.demo.settings.port
    async with admin_client(servers, public_port) as (misrouted, admin), attack(servers) as a:
        # The admin app reached through another listener: not found, even with a valid token.
        a.status(await misrouted.post("/admin/connections/revoke", json={"sub": victim}, headers=static), 404)
        a.status(await misrouted.get("/admin/connections", headers=static), 404)
    async with httpx.AsyncClient(base_url=servers.public_url) as public, attack(servers) as a:
        # The public app has no admin routes at all.
        for path in (
            "/admin/connections",
            "/admin/connections/revoke",
            "/admin/providers/mockhub/revoke-all",
        ):
            answer = await public.post(path, json={"sub": victim}, headers=static)
            a.check(answer.status_code in (401, 404, 405), f"{path} not served on the public port")
    async with admin_client(servers) as (_, admin):
        assert await admin.store.find_connections(sub=victim) != []


async def test_admin_api_lets_the_static_token_act_and_audits_it(
    servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    leaver, stayer = unique("admin-leaver"), unique("admin-stayer")
    await seed_connection(servers, leaver)
    kept = await seed_connection(servers, stayer)
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")
    static = {"Authorization": f"Bearer {STATIC_TOKEN}"}
    async with admin_client(servers) as (http, admin), attack(servers, removed_connections=1) as a:
        listed = a.status(await http.get("/admin/connections", params={"sub": leaver}, headers=static), 200)
        a.check([row["sub"] for row in listed.json()["connections"]] == [leaver], "one row, the leaver's")
        a.status(await http.post("/admin/connections/revoke", json={"sub": 3}, headers=static), 400)
        a.status(await http.post("/admin/connections/revoke", content=b"[", headers=static), 400)
        a.status(
            await http.post(
                "/admin/connections/revoke", json={"sub": leaver, "provider": "nope"}, headers=static
            ),
            404,
        )
        misspelt = {"sub": stayer, "provder": "mockhub"}  # must not widen to every provider: refused
        a.status(await http.post("/admin/connections/revoke", json=misspelt, headers=static), 400)
        done = a.status(
            await http.post("/admin/connections/revoke", json={"sub": leaver}, headers=static), 200
        )
        a.check(done.json()["deleted"] == 1, "the leaver's connection deleted")
        assert await admin.store.find_connections(sub=stayer) == [kept]
    events = [json.loads(r.getMessage()) for r in caplog.records if r.name == "mcp_url_connect.audit"]
    actions = [e["event"] for e in events if e.get("actor") == "static-token"]
    assert actions == ["operator_list", "operator_revoke_user"]
