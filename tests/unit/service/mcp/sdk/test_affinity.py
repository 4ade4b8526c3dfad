"""Session affinity: the replica's name is added to the session ids it issues and removed on the
way back in; ids without it pass untouched (the SDK then answers 404 for an unknown session)."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from service.mcp.sdk.affinity import SessionAffinityMiddleware


async def sdk(scope: Scope, receive: Receive, send: Send) -> None:
    """Stands in for the SDK: issues session `abc` and echoes the id it was sent."""
    request = Request(scope, receive)
    response = JSONResponse(
        {"seen": request.headers.get("mcp-session-id")}, headers={"Mcp-Session-Id": "abc"}
    )
    await response(scope, receive, send)


def client(replica_id: str) -> httpx.AsyncClient:
    app = SessionAffinityMiddleware(sdk, replica_id)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mcp")


async def test_issued_ids_carry_the_replica_and_lose_it_on_the_way_in() -> None:
    async with client("mcp-1") as http:
        response = await http.post("/mcp", headers={"Mcp-Session-Id": "mcp-1.abc"})
    assert response.headers["mcp-session-id"] == "mcp-1.abc"
    assert response.json() == {"seen": "abc"}


async def test_an_id_for_another_replica_is_passed_as_is() -> None:
    async with client("mcp-1") as http:
        response = await http.post("/mcp", headers={"Mcp-Session-Id": "mcp-2.abc"})
    assert response.json() == {"seen": "mcp-2.abc"}


async def test_a_single_instance_changes_nothing() -> None:
    async with client("") as http:
        response = await http.post("/mcp", headers={"Mcp-Session-Id": "abc"})
    assert response.headers["mcp-session-id"] == "abc"
    assert response.json() == {"seen": "abc"}
