"""Permissive CORS for the endpoints browser-based MCP clients call directly.

Metadata, JWKS, registration, token and userinfo carry no cookies, so
``Access-Control-Allow-Origin: *`` is safe there; the HTML pages get none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import MappingProxyType

from starlette.requests import Request
from starlette.responses import Response

Handler = Callable[[Request], Awaitable[Response]]

_PREFLIGHT_HEADERS = MappingProxyType(
    {
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
        "Access-Control-Allow-Headers": "Authorization, Content-Type, MCP-Protocol-Version",
        "Access-Control-Max-Age": "600",
    }
)


def allow_cors(handler: Handler) -> Handler:
    """Wrap a handler: answer preflights, mark responses readable cross-origin."""

    async def wrapped(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=_PREFLIGHT_HEADERS)
        response = await handler(request)
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    return wrapped
