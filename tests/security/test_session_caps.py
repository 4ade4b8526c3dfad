"""The session caps cannot be skipped: a repeated protocol-version, session-id or authorization
header is refused with 400 before our code or the SDK's reads it (RFC 9110 §5.3), and concurrent
`initialize` calls of one user cannot race past the per-user cap (docs/threat-model.md,
invariant 9). The demo here runs with a per-user cap of 5, as in the report that found both."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from mock_providers.testing.client import MODES
from tests.security.attack import Servers, attack, unique
from tests.security.flows import bearer
from tests.security.rpc import ACCEPT, CAPABILITIES, CLIENT_INFO, LEGACY_VERSION, MODERN_VERSION, RawMcp

PER_USER = 5
pytestmark = [pytest.mark.security, pytest.mark.demo_settings(max_sessions_per_user=PER_USER)]
ORDERS = {"legacy first": (LEGACY_VERSION, MODERN_VERSION), "modern first": (MODERN_VERSION, LEGACY_VERSION)}


def sessions_of(servers: Servers, user: str) -> int:
    """2025-11-25 sessions the SDK holds for `user` (its owner records)."""
    owners = servers.apps["mcp"].state.sessions.session_owners
    return sum(1 for owner in owners.values() if owner["subject"] == user)


def opening(mode: str) -> dict[str, Any]:
    """The first request of a client: initialize (2025-11-25) or a stateless tools/call."""
    if mode == "legacy":
        params = {"protocolVersion": LEGACY_VERSION, "capabilities": CAPABILITIES, "clientInfo": CLIENT_INFO}
        return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
    }
    params = {"name": "whoami", "arguments": {}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def refused_for(answer: httpx.Response, field: str) -> bool:
    """400 with a JSON-RPC error naming the repeated field, and no session opened."""
    body = answer.json()
    return (
        answer.status_code == 400
        and body["error"]["code"] == -32600
        and f"the {field} header field appears more than once" in body["error"]["message"]
        and "mcp-session-id" not in answer.headers
    )


async def bystander_still_served(servers: Servers, http: httpx.AsyncClient, mode: str) -> None:
    """Another user's client opens and calls a tool as usual."""
    raw = RawMcp(servers, http, mode, bearer(servers, unique("bystander")))
    assert (await raw.open()).status_code == 200
    answer = await raw.call_tool("list_connections")
    assert "result" in answer, answer


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_repeated_protocol_version_is_refused_before_any_session_opens(
    servers: Servers, mode: str, order: str
) -> None:
    """Two MCP-Protocol-Version lines, either order: 400 every time, no session for the flooder
    however often it tries (the SDK routes on the first line, a dict on the last)."""
    flooder = unique("flooder")
    token = bearer(servers, flooder)
    first, second = ORDERS[order]
    headers = [
        ("Accept", ACCEPT),
        ("Content-Type", "application/json"),
        ("Authorization", f"Bearer {token}"),
        ("MCP-Protocol-Version", first),
        ("MCP-Protocol-Version", second),
    ]
    if mode != "legacy":
        headers += [("Mcp-Method", "tools/call"), ("Mcp-Name", "whoami")]
    async with httpx.AsyncClient() as http:
        async with attack(servers) as a:
            for _ in range(2 * PER_USER):
                answer = await http.post(servers.mcp_url, headers=headers, content=json.dumps(opening(mode)))
                a.status(answer, 400)
                a.check(refused_for(answer, "mcp-protocol-version"), answer.text)
            a.check(sessions_of(servers, flooder) == 0, f"{sessions_of(servers, flooder)} sessions opened")
        await bystander_still_served(servers, http, mode)


@pytest.mark.parametrize("mode", MODES)
async def test_a_repeated_session_id_is_refused(servers: Servers, mode: str) -> None:
    """Two Mcp-Session-Id lines (the caller's own, then another's, or the reverse): 400."""
    user, other = unique("doubler"), unique("other")
    async with httpx.AsyncClient() as http:
        mine = RawMcp(servers, http, "legacy", bearer(servers, user))
        theirs = RawMcp(servers, http, "legacy", bearer(servers, other))
        assert (await mine.open()).status_code == 200 and (await theirs.open()).status_code == 200
        assert mine.session_id is not None and theirs.session_id is not None
        raw = RawMcp(servers, http, mode, bearer(servers, user))
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
        base = raw._headers("tools/list", None)
        base.pop("Mcp-Session-Id", None)
        if mode == "legacy":
            base["MCP-Protocol-Version"] = LEGACY_VERSION
        async with attack(servers) as a:
            for ids in ((mine.session_id, theirs.session_id), (theirs.session_id, mine.session_id)):
                headers = [*base.items(), *(("Mcp-Session-Id", i) for i in ids)]
                answer = await http.post(servers.mcp_url, headers=headers, content=json.dumps(call))
                a.status(answer, 400)
                a.check(refused_for(answer, "mcp-session-id"), answer.text)
        # Both sessions are intact and still their owners' only.
        assert "result" in await mine.call_tool("list_connections")
        assert "result" in await theirs.call_tool("list_connections")
        await bystander_still_served(servers, http, mode)


@pytest.mark.parametrize("mode", MODES)
async def test_a_repeated_authorization_is_refused(servers: Servers, mode: str) -> None:
    """Two Authorization lines (two users' bearers, either order): 400 naming the field, never
    a bearer; no session opened for either user."""
    alice, mallory = unique("alice"), unique("mallory")
    tokens = (bearer(servers, alice), bearer(servers, mallory))
    async with httpx.AsyncClient() as http:
        base = RawMcp(servers, http, mode, None)._headers(
            *(("initialize", None) if mode == "legacy" else ("tools/call", "whoami"))
        )
        async with attack(servers) as a:
            for pair in (tokens, tokens[::-1]):
                headers = [*base.items(), *(("Authorization", f"Bearer {t}") for t in pair)]
                answer = await http.post(servers.mcp_url, headers=headers, content=json.dumps(opening(mode)))
                a.status(answer, 400)
                a.check(refused_for(answer, "authorization"), answer.text)
            a.check(sessions_of(servers, alice) + sessions_of(servers, mallory) == 0, "no session opened")
        await bystander_still_served(servers, http, mode)


async def test_concurrent_initializes_of_one_user_cannot_race_past_the_cap(servers: Servers) -> None:
    """12 concurrent initialize calls of one user against a cap of 5: exactly 5 sessions, the
    rest 429 (the count and the admission are one step). 2025-11-25 only: the 2026-07-28
    revision opens no session."""
    racer = unique("racer")
    token = bearer(servers, racer)
    async with httpx.AsyncClient() as http:
        async with attack(servers) as a:
            clients = [RawMcp(servers, http, "legacy", token) for _ in range(12)]
            answers = await asyncio.gather(*(c.open() for c in clients))
            statuses = sorted(answer.status_code for answer in answers)
            a.check(statuses == [200] * PER_USER + [429] * (12 - PER_USER), f"statuses: {statuses}")
            for answer in answers:
                a.status(answer, 200, 429)
            a.check(sessions_of(servers, racer) == PER_USER, f"{sessions_of(servers, racer)} sessions held")
        await bystander_still_served(servers, http, "legacy")
        # The racer's admitted sessions work.
        admitted = [c for c in clients if c.session_id is not None]
        assert len(admitted) == PER_USER
        assert "result" in await admitted[0].call_tool("list_connections")
