"""`X-Request-ID`: taken from the proxy (or generated), echoed in the response, on every log line.

A pure ASGI middleware (not Starlette's BaseHTTPMiddleware, which would buffer the MCP SSE
streams). An incoming id is used only when it has a plain shape: a client must not be able to
write arbitrary text into our logs through it.
"""

from __future__ import annotations

import re
import secrets

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.logs import request_context

HEADER = "x-request-id"
# nginx's $request_id is 32 hex digits; deploy/nginx/nginx.conf accepts a caller's id in this shape.
REQUEST_ID_SHAPE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_from(value: str | None) -> str:
    """The caller's id when it has our shape, else a fresh one."""
    # mutant: logs.request_id_shape drop 1
    if value is not None and REQUEST_ID_SHAPE.fullmatch(value):
        return value
    return secrets.token_hex(16)


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope["headers"]:
            if name == HEADER.encode():
                incoming = value.decode("latin-1")
                break
        request_id = request_id_from(incoming)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        with request_context(request_id):
            await self.app(scope, receive, send_with_id)
