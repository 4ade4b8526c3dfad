"""The admin API (service/ops/admin_api.py) refuses whoever is not an operator: no token, a user's token
without the admin scope, a wrong static token, and any request that is not on the admin port
(docs/threat-model.md, "Operators' controls"). Each refusal leaves every connection in place and
the users' own sessions working; each action that is allowed is audited with who asked.

The admin app runs in process (httpx ASGITransport) on its own runtime over the demo's store,
as a replica's admin listener would; the demo's public port is reached over its socket.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES, mcp_client
from service.ops.admin_api import admin_app
from service.runtime import Runtime
from tests.security.attack import Servers, attack, unique
from tests.security.flows import bearer, connect_fully, elicit, manual, retry, seed_connection

pytestmark = pytest.mark.security

ADMIN_PORT = 9470  # never bound: the in-process transport names it as the server's port
STATIC_TOKEN = secrets.token_urlsafe(32)
ADMIN_SCOPE = "mcp-url-connect:admin"


@asynccontextmanager
async def admin_client(
    servers: Servers, port: int = ADMIN_PORT
) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    """The admin app on its own runtime over the demo's store, reached as if on `port`."""
    settings = servers.demo.settings.replace(
        admin_port=ADMIN_PORT, admin_token_sha256=hashlib.sha256(STATIC_TOKEN.encode()).hexdigest()
    ).require_safe_to_serve()
    runtime = Runtime(settings)
    async with runtime.running():
        transport = httpx.ASGITransport(app=admin_app(runtime))
        async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}") as http:
            yield http, runtime


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
    user_token = bearer(servers, attacker)  # a genuine MCP token, ordinary scopes
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
    refused = [json.loads(r.getMessage()) for r in caplog.records if r.name == "mcp_url_connect.audit"]
    assert {e["actor"] for e in refused if e["event"] == "operator_refused"} == {f"bearer:{attacker}"}
    async with mcp_client(servers, victim, mode, on_url=manual) as (client, _):  # still works
        assert not (await client.session.call_tool("whoami", {})).is_error


async def test_admin_api_refuses_a_request_on_the_public_port(servers: Servers) -> None:
    victim = unique("admin-victim")
    await seed_connection(servers, victim)
    static = {"Authorization": f"Bearer {STATIC_TOKEN}"}
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
