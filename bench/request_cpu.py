"""Server CPU per request, measured inside the MCP server process (bench/server.py only).

The kernel's per-process counters that bench/flow.py reads tick every 10 ms: too coarse for one
request. `time.process_time()` reads the process's CPU clock (all threads, so the SQLite writer
thread's work counts) to the nanosecond. `RequestCpu` notes it when a request arrives and when its
response ends, and keeps the difference by request kind; `GET /_bench/cpu` hands the figures over
(and clears them).

Meaningful only with one request in flight at a time (bench/flow.py's hop table: one user, one
flow after another): the difference covers whatever the process did meanwhile. The session's
`GET /mcp` stream stays open for the whole session, so it is not measured; what the server sends
on it (the completion notification) is done during the callback request and counts there.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PATH = "/_bench/cpu"


class RequestCpu:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seconds: defaultdict[str, list[float]] = defaultdict(list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if path == PATH:
            await self._hand_over(send)
            return
        if method == "GET" and path == "/mcp":
            await self.app(scope, receive, send)
            return
        body = bytearray()

        async def receive_noting_body() -> Message:
            received = await receive()
            if received["type"] == "http.request" and len(body) < 65536:
                body.extend(received.get("body", b""))
            return received

        start = time.process_time()
        try:
            await self.app(scope, receive_noting_body, send)
        finally:
            self.seconds[_kind(method, path, bytes(body))].append(time.process_time() - start)

    async def _hand_over(self, send: Send) -> None:
        payload = json.dumps(self.seconds).encode()
        self.seconds = defaultdict(list)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _kind(method: str, path: str, body: bytes) -> str:
    """ "POST /mcp tools/call" for an MCP request (its JSON-RPC method), else "GET /connect"."""
    if path != "/mcp" or method != "POST":
        return f"{method} {path}"
    try:
        rpc = json.loads(body).get("method", "(response)")
    except (ValueError, AttributeError):
        rpc = "(unparsed)"
    return f"POST /mcp {rpc}"
