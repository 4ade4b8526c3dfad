"""The size of a request: every replica bounds its head and its body itself, however the bytes
arrive.

h11 (uvicorn's parser) refuses a head over 16 KiB only while the head is incomplete in its buffer:
a larger head that arrives in one read is parsed whole. A proxy in front bounds heads and bodies
too (deploy/nginx/nginx.conf, a little under these limits), but a replica reached directly, or
behind another proxy, must not depend on it.
"""

from __future__ import annotations

from mcp.server.transport_security import RequestBodyLimitMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

# h11's own bound on an incomplete head (uvicorn's h11_max_incomplete_event_size), applied to every
# head; the shipped nginx refuses heads over about 13 KiB, leaving room for the fields it adds.
MAX_REQUEST_HEAD_BYTES = 16 * 1024
# JSON-RPC messages and browser forms are small; the shipped nginx's client_max_body_size.
MAX_REQUEST_BODY_BYTES = 1024 * 1024
_HTTP_VERSION_AND_CRLFS = len(" HTTP/1.1\r\n\r\n")


def request_head_bytes(scope: Scope) -> int:
    """The size of the request head as sent: the request line and one `name: value\\r\\n` line
    per field."""
    target = len(scope.get("raw_path") or scope["path"].encode())
    if scope["query_string"]:
        target += 1 + len(scope["query_string"])
    fields = sum(len(name) + len(value) + 4 for name, value in scope["headers"])
    return len(scope["method"]) + 1 + target + _HTTP_VERSION_AND_CRLFS + fields


def require_bounded_request(app: ASGIApp) -> ASGIApp:
    """Refuse a head over MAX_REQUEST_HEAD_BYTES with 431 and a body over MAX_REQUEST_BODY_BYTES
    with 413, before the app reads either.

    RFC 6585 §5: 431 "to indicate that the server is unwilling to process the request because
    its header fields are too large"; RFC 9110 §15.5.14: 413 when "the request content is larger
    than the server is willing or able to process". The body limit is the MCP SDK's own
    middleware (declared and streamed lengths), applied to every route.
    """
    # mutant: limits.request_body unwrap
    bounded_body = RequestBodyLimitMiddleware(app, MAX_REQUEST_BODY_BYTES)

    async def bounded_request(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        # mutant: limits.request_head
        if request_head_bytes(scope) > MAX_REQUEST_HEAD_BYTES:
            body = b"Request header fields too large"
            await send(
                {
                    "type": "http.response.start",
                    "status": 431,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await bounded_body(scope, receive, send)

    return bounded_request
