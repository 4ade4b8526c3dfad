"""Per-user and per-replica caps on 2025-11-25 sessions and requests in flight, on the real SDK
session manager, in process (no sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from pydantic import AnyHttpUrl

from service.mcp.sdk.hooks import adopt_session_manager
from service.mcp.sdk.session_limits import Limit, SessionLimits

ISSUER = "https://as.example"
RESOURCE = "http://127.0.0.1:8000/mcp"


class NameIsTheToken:
    """A verifier for tests: the bearer `alice` is user alice of ISSUER."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(
            token=token, client_id="c", scopes=[], resource=RESOURCE, subject=token, claims={"iss": ISSUER}
        )


def initialize(n: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextlib.asynccontextmanager
async def served(
    sessions_per_user: int = 3,
    requests_per_user: int = 2,
    *,
    per_second: float = 1000.0,
    burst: int = 1000,
    clock: Callable[[], float] = time.monotonic,
    refused: Callable[[Limit], None] = lambda limit: None,
) -> AsyncIterator[tuple[httpx.AsyncClient, SessionLimits, tuple[anyio.Event, anyio.Event]]]:
    # A context manager, not a fixture: the session manager's task group must be entered and
    # left in the same task.
    server: MCPServer[Any] = MCPServer(
        "t",
        token_verifier=NameIsTheToken(),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(ISSUER),
            resource_server_url=AnyHttpUrl(RESOURCE),
            validate_token_resource=True,
        ),
    )
    release, both_running, running = anyio.Event(), anyio.Event(), [0]

    @server.tool()
    async def wait() -> str:
        running[0] += 1
        if running[0] == 2:
            both_running.set()
        await release.wait()
        return "done"

    app = server.streamable_http_app(streamable_http_path="/mcp", json_response=True)
    limits = SessionLimits.around(
        adopt_session_manager(server),
        sessions_per_user=sessions_per_user,
        sessions_per_replica=5,
        requests_per_user=requests_per_user,
        requests_per_second_per_user=per_second,
        request_burst_per_user=burst,
        refused=refused,
        clock=clock,
    )
    async with (
        server.session_manager.run(),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client,
    ):
        yield client, limits, (release, both_running)


async def _open(client: httpx.AsyncClient, user: str) -> httpx.Response:
    return await client.post(
        "/mcp", json=initialize(1), headers={**HEADERS, "Authorization": f"Bearer {user}"}
    )


async def test_sessions_per_user_are_capped_with_429_and_other_users_are_unaffected() -> None:
    async with served() as (client, _, _):
        opened = [await _open(client, "alice") for _ in range(3)]
        assert [r.status_code for r in opened] == [200, 200, 200]
        refused = await _open(client, "alice")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "30"
        assert refused.json()["error"] == {
            "code": -32600,
            "message": "Too many open MCP sessions for this user (limit 3); "
            "close one (HTTP DELETE) or let an idle one expire.",
        }
        assert (await _open(client, "bob")).status_code == 200
        # Closing a session frees its place.
        session = opened[0].headers["mcp-session-id"]
        closed = await client.delete(
            "/mcp", headers={**HEADERS, "Authorization": "Bearer alice", "Mcp-Session-Id": session}
        )
        assert closed.status_code < 300
        assert (await _open(client, "alice")).status_code == 200


async def test_concurrent_initializes_of_one_user_are_admitted_up_to_the_cap_only() -> None:
    # The count and the admission are one step: none of the 12 sees a count taken before the
    # others were admitted.
    async with served(sessions_per_user=3, requests_per_user=20) as (client, _, _):
        answers = await asyncio.gather(*(_open(client, "alice") for _ in range(12)))
        assert sorted(r.status_code for r in answers) == [200] * 3 + [429] * 9
        assert (await _open(client, "bob")).status_code == 200


async def test_a_refused_initialize_leaves_no_session_behind() -> None:
    async with served() as (client, limits, _):
        for _ in range(3):
            await _open(client, "alice")
        assert (await _open(client, "alice")).status_code == 429
        owners = limits._owners()
        assert sum(1 for o in owners.values() if o["subject"] == "alice") == 3


async def test_sessions_per_replica_are_capped() -> None:
    async with served() as (client, _, _):
        for user in ("u1", "u2", "u3", "u4", "u5"):
            assert (await _open(client, user)).status_code == 200
        refused = await _open(client, "u6")
        assert refused.status_code == 429
        assert "too many open MCP sessions" in refused.json()["error"]["message"]


async def test_requests_in_flight_per_user_are_capped() -> None:
    async with served() as (client, limits, (release, both_running)):
        headers = {**HEADERS, "Authorization": "Bearer alice", "Mcp-Protocol-Version": "2025-11-25"}
        headers["Mcp-Session-Id"] = (await _open(client, "alice")).headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await client.post("/mcp", json=initialized, headers=headers)
        results: list[int] = []

        def call(request_id: int) -> dict[str, Any]:
            params = {"name": "wait", "arguments": {}}
            return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

        async def slow_call(request_id: int) -> None:
            results.append((await client.post("/mcp", json=call(request_id), headers=headers)).status_code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call, 2)
            tg.start_soon(slow_call, 3)
            with anyio.fail_after(5):
                await both_running.wait()
            assert limits.in_flight((ISSUER, "alice")) == 2
            with anyio.fail_after(5):  # past the cap the answer is immediate, not a wait
                third = await client.post("/mcp", json=call(4), headers=headers)
            assert third.status_code == 429 and "requests in progress" in third.json()["error"]["message"]
            assert (await _open(client, "bob")).status_code == 200
            release.set()
        assert results == [200, 200]
        assert limits.in_flight((ISSUER, "alice")) == 0


async def test_requests_a_second_per_user_are_limited_with_retry_after_and_other_users_are_unaffected() -> (
    None
):
    """A burst of 3, then one a second: the 4th request at once gets 429 with Retry-After and a
    JSON-RPC error, counted; another user is served meanwhile; a second later alice is again."""
    now, refused = [0.0], []
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with served(per_second=1, burst=3, clock=lambda: now[0], refused=refused.append) as (client, _, _):

        async def send(user: str) -> httpx.Response:
            return await client.post(
                "/mcp", json=ping, headers={**HEADERS, "Authorization": f"Bearer {user}"}
            )

        assert [(await send("alice")).status_code != 429 for _ in range(3)] == [True] * 3
        refusal = await send("alice")
        assert refusal.status_code == 429 and refusal.headers["retry-after"] == "1"
        assert refusal.json()["error"] == {
            "code": -32600,
            "message": "Too many requests for this user (limit 1 a second, bursts of 3); "
            "retry after the time Retry-After gives.",
        }
        assert refused == [Limit.REQUESTS_PER_SECOND_PER_USER]
        assert (await send("bob")).status_code != 429
        now[0] += 1.0
        assert (await send("alice")).status_code != 429
        assert (await send("alice")).status_code == 429
