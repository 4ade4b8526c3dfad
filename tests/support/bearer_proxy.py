"""A loopback reverse proxy that adds a bearer token: TEST-ONLY, never deployed.

Some third-party MCP test clients (the official conformance suite among them) have no way to send
an `Authorization` header, while our server refuses every MCP request without one. This proxy
sits between them on a free 127.0.0.1 port and forwards every request to `upstream` with
`Authorization: Bearer <token>` set, everything else as sent: method, path, query, body and the
client's own `Host` and `Origin` (the server's DNS-rebinding checks must judge what the client
sent, not the proxy). Responses stream back unchanged, chunk by chunk, so SSE (event ids, `retry`
fields, long-lived GET streams) reaches the client as the server wrote it.

    with BearerProxy("http://127.0.0.1:8000", token) as proxy:
        run_client(proxy.url + "/mcp")
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from mock_providers.testing.servers import HOST, ThreadedServers, free_port

# RFC 9110 §7.6.1: connection-specific fields are not forwarded by a proxy. `content-length` is
# recomputed by each side's HTTP stack (the body streams through in chunks).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
# Fields the proxy's own HTTP server (uvicorn) writes on every response: not passed on twice.
OWN_FIELDS = frozenset({"date", "server"})


class BearerProxyApp:
    """The ASGI app: each request forwarded to `upstream` with the bearer added."""

    def __init__(self, upstream: str, token: str, transport: httpx.AsyncBaseTransport | None = None) -> None:
        """`transport`: for tests of the proxy itself (e.g. httpx.ASGITransport to an app)."""
        self._upstream = upstream.rstrip("/")
        self._token = token
        # No read timeout: a GET SSE stream legitimately stays silent for long stretches.
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None), transport=transport)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        headers = [(k, v) for k, v in request.headers.items() if k not in HOP_BY_HOP | {"authorization"}]
        headers.append(("authorization", f"Bearer {self._token}"))
        upstream = self._client.build_request(
            request.method,
            self._upstream + request.url.path,
            params=request.url.query,
            headers=headers,
            content=await request.body(),
        )
        response = await self._client.send(upstream, stream=True)
        try:
            streamed = StreamingResponse(response.aiter_raw(), status_code=response.status_code)
            # Raw pairs, so repeated fields (and their order) pass through as the server sent them.
            streamed.raw_headers = [
                (k, v) for k, v in response.headers.raw if k.lower().decode() not in HOP_BY_HOP | OWN_FIELDS
            ]
            await streamed(scope, receive, send)  # ends when either side closes
        finally:
            # The upstream connection goes with the client's: a GET stream left open upstream
            # would count as a request in flight for the token's user.
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


class BearerProxy:
    """The proxy served on a free loopback port from a background thread; `url` is its origin."""

    def __init__(self, upstream: str, token: str) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self._servers = ThreadedServers([(BearerProxyApp(upstream, token), self.port)])

    def __enter__(self) -> BearerProxy:
        self._servers.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._servers.stop()
