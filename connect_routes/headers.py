"""Security headers on every response (pure ASGI, so the MCP SSE streams pass untouched)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = {
    # Pages carry codes and states in their URLs and user data in their bodies.
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",  # the callback URL holds the code: never pass it on
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
}
# As an ASGI response start message carries them.
_FIELDS = tuple((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in HEADERS.items())


def add_security_headers(headers: list[tuple[bytes, bytes]]) -> None:
    """Append each of `HEADERS` that the response does not set itself (a page may widen its CSP)."""
    present = {name.lower() for name, _ in headers}
    # mutant: headers.security_headers pass
    headers += [field for field in _FIELDS if field[0] not in present]


class SecurityHeadersMiddleware:
    """`add_security_headers` on every response of an app of its own (service/embedding/sdk.py's
    browser app; service/app.py does it in its one pass, service/http/request_pass.py)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message["headers"] = list(message.get("headers", ()))
                add_security_headers(headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)
