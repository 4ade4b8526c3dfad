"""The test-only proxy that adds a bearer for clients that cannot (tests/support/bearer_proxy.py),
in process: what it forwards and what it hands back."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.bearer_proxy import BearerProxyApp


async def echo(request: Request) -> Response:
    """The upstream: what it received, and two fields of the same name."""
    answer = JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "body": (await request.body()).decode(),
            "headers": dict(request.headers),
        },
        status_code=202,
        headers={"mcp-session-id": "s1"},
    )
    answer.raw_headers += [(b"x-twice", b"1"), (b"x-twice", b"2")]
    return answer


def proxy_client() -> httpx.AsyncClient:
    upstream = Starlette(routes=[Route("/mcp", echo, methods=["GET", "POST", "DELETE"])])
    proxy = BearerProxyApp("http://upstream.test", "tok", transport=httpx.ASGITransport(app=upstream))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy), base_url="http://127.0.0.1:9999")


async def test_the_bearer_is_added_and_the_rest_goes_as_sent() -> None:
    async with proxy_client() as client:
        response = await client.post(
            "/mcp?a=1",
            content=b'{"jsonrpc":"2.0"}',
            headers={
                "Origin": "http://evil.example",
                "Authorization": "Bearer other",
                "Proxy-Authorization": "Basic eDp5",
            },
        )
    seen = response.json()
    assert (seen["method"], seen["path"], seen["query"], seen["body"]) == (
        "POST",
        "/mcp",
        "a=1",
        '{"jsonrpc":"2.0"}',
    )
    assert seen["headers"]["authorization"] == "Bearer tok"  # the client's own is replaced
    # The client's Host and Origin, not the proxy's: the server's DNS-rebinding check judges them.
    assert seen["headers"]["host"] == "127.0.0.1:9999"
    assert seen["headers"]["origin"] == "http://evil.example"
    assert "proxy-authorization" not in seen["headers"]  # hop-by-hop (RFC 9110 §7.6.1)


async def test_the_response_comes_back_as_the_server_sent_it() -> None:
    async with proxy_client() as client:
        response = await client.delete("/mcp")
    assert response.status_code == 202
    assert response.headers["mcp-session-id"] == "s1"
    assert response.headers.get_list("x-twice") == ["1", "2"]
