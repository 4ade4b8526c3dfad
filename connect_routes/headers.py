"""Security headers on every response, added in the request pass (service/http/request_pass.py) of
our server and of an embedding server's browser half (pure ASGI, so the MCP SSE streams pass
untouched)."""

from __future__ import annotations

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
