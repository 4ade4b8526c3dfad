"""The drain's last step, in process: once it starts closing the 2025-11-25 sessions, a request
naming a session is answered 404 "Session not found" by the replica itself (service/http/drain.py).

Without that, a proxy reusing a connection freed by a stream that just ended could hand the SDK a
call for a session about to be terminated: the SDK accepts it, then fails it with a 500.
"""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.http.drain import Drain
from service.http.request_pass import RequestPass


class Terminated:
    def __init__(self) -> None:
        self.terminated = False

    async def terminate(self) -> None:
        self.terminated = True


def app_with(drain: Drain) -> Starlette:
    async def mcp(request: Request) -> JSONResponse:
        return JSONResponse({"served": True})

    app = Starlette(routes=[Route("/mcp", mcp, methods=["POST", "GET", "DELETE"])])
    app.add_middleware(RequestPass, drain=drain)
    return app


async def post(app: Starlette, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)


async def test_once_sessions_close_a_request_naming_one_gets_404_session_not_found() -> None:
    session = Terminated()
    sessions: dict[str, Any] = {"abc": session}
    drain = Drain(lambda: sessions)
    app = app_with(drain)
    drain.begin()
    assert (await post(app, {"Mcp-Session-Id": "abc"})).json() == {"served": True}  # still served
    assert await drain.close_sessions(settle_seconds=0) == 1 and session.terminated
    gone = await post(app, {"Mcp-Session-Id": "abc"})
    assert gone.status_code == 404
    assert gone.json()["error"] == {"code": -32600, "message": "Session not found"}
    assert gone.headers["connection"] == "close"
    # Without a session (initialize, or a 2026-07-28 call) the replica still answers until it exits.
    assert (await post(app, {})).json() == {"served": True}
