"""service/http/request_pass.py: the app's one pass over each request, in process: what every response
carries, where the browser session applies, and the order of the refusals."""

from __future__ import annotations

import httpx
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import Receive, Scope, Send

from connect_routes.headers import HEADERS, add_security_headers
from service.http.drain import Drain
from service.http.request_limits import MAX_REQUEST_HEAD_BYTES
from service.http.request_pass import RequestPass

OWN_CSP = "default-src 'self'"


class Routed:
    """Stands in for the routed app: notes whether a session reached it, writes one on `/login`,
    and answers with a CSP of its own on `/page` and `Connection: keep-alive` everywhere."""

    def __init__(self) -> None:
        self.sessions: dict[str, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.sessions[scope["path"]] = "session" in scope
        if scope["path"] == "/login":
            scope["session"]["user"] = "alice"
        headers = [(b"connection", b"keep-alive")]
        if scope["path"] == "/page":
            headers.append((b"content-security-policy", OWN_CSP.encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})


def client(app: Routed, drain: Drain) -> httpx.AsyncClient:
    session = Middleware(SessionMiddleware, secret_key="s" * 32)
    passed = RequestPass(app, drain, browser_session=session, security_headers=add_security_headers)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=passed), base_url="http://127.0.0.1")


async def test_every_response_carries_one_request_id_and_the_security_headers() -> None:
    async with client(Routed(), Drain(dict)) as http:
        for path in ("/mcp", "/connections", "/page"):
            answer = await http.get(path, headers={"X-Request-ID": f"id-{path[1:]}"})
            assert answer.headers.get_list("x-request-id") == [f"id-{path[1:]}"], path
            for name, value in HEADERS.items():
                expected = OWN_CSP if path == "/page" and name == "Content-Security-Policy" else value
                assert answer.headers.get_list(name) == [expected], (path, name)


async def test_the_browser_session_applies_off_the_mcp_endpoint_only() -> None:
    app = Routed()
    async with client(app, Drain(dict)) as http:
        login = await http.get("/login")
        assert "session=" in login.headers["set-cookie"]
        mcp = await http.post("/mcp")
        assert "set-cookie" not in mcp.headers
    assert app.sessions == {"/login": True, "/mcp": False}


async def test_while_draining_every_response_closes_its_connection() -> None:
    drain = Drain(dict)
    async with client(Routed(), drain) as http:
        assert (await http.get("/mcp")).headers.get_list("connection") == ["keep-alive"]
        drain.begin()
        for path in ("/mcp", "/connections"):
            assert (await http.get(path)).headers.get_list("connection") == ["close"], path
    assert drain.in_flight == 0


async def test_a_repeated_field_is_refused_first_and_the_limits_before_the_app() -> None:
    app = Routed()
    big = {"X-Fill": "f" * MAX_REQUEST_HEAD_BYTES}
    async with client(app, Drain(dict)) as http:
        both = await http.post(
            "/mcp", headers=[*big.items(), ("Mcp-Session-Id", "a"), ("Mcp-Session-Id", "b")]
        )
        assert both.status_code == 400 and "x-request-id" not in both.headers
        head = await http.post("/mcp", headers=big)
        assert head.status_code == 431 and "x-request-id" in head.headers
        body = await http.post("/connections", content=b"x" * (2 * 1024 * 1024))
        assert body.status_code == 413
    assert app.sessions == {}
