"""Header fields that may appear once: a request that repeats one is refused before anything reads it.

Two readers of one request must not see two different values. The SDK routes on the first
`MCP-Protocol-Version` line while a `dict(scope["headers"])` keeps the last: with `2025-11-25` and
then `2026-07-28`, a check that reads the last would take a request that opens a 2025-11-25
session for a stateless one. Every field listed here has a single value (none is a
comma-separated list), so a request repeating one is malformed, and it gets 400 first, in the
app's one pass over each request (service/http/request_pass.py), before the drain, the request id, the
bearer check or the SDK look at it. The shipped nginx refuses the same requests
(deploy/nginx/nginx.conf).
"""

from __future__ import annotations

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INVALID_REQUEST
from starlette.responses import Response
from starlette.types import Scope

from service.http.jsonrpc_error import http_error_body
from service.urls import is_mcp_path

# As ASGI names them (lower case). Authorization: RFC 9110 §11.6.2; the MCP fields: 2025-11-25
# basic/transports ("Session Management", "Protocol Version Header") and the 2026-07-28 request
# headers (transports-streamable-http); Host: RFC 9112 §3.2.
SINGLE_VALUED = (
    b"authorization",
    b"host",
    b"last-event-id",
    b"mcp-method",
    b"mcp-name",
    MCP_PROTOCOL_VERSION_HEADER.encode(),
    MCP_SESSION_ID_HEADER.encode(),
)


def repeated_field(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The first single-valued field name that appears more than once, or None."""
    seen: set[bytes] = set()
    for name, _ in headers:
        if name in SINGLE_VALUED:
            if name in seen:
                return name.decode("latin-1")
            seen.add(name)
    return None


def require_single_valued_headers(scope: Scope) -> Response | None:
    """The 400 refusal of a request that repeats a single-valued header field, or None.

    RFC 9110 §5.3: "A sender MUST NOT generate multiple field lines with the same name in a
    message ... unless that field's definition allows multiple field line values to be
    recombined as a comma-separated list"; none of `SINGLE_VALUED` allows it. On `/mcp` the
    answer is a JSON-RPC error (no id: the body is not read), elsewhere plain text. The message
    names the field, never a value (an Authorization value is a bearer).
    """
    repeated = repeated_field(scope["headers"])
    # mutant: headers.single_valued_fields true
    if repeated is None:
        return None
    message = f"Bad request: the {repeated} header field appears more than once."
    if is_mcp_path(scope["path"]):
        body, media_type = http_error_body(INVALID_REQUEST, message), "application/json"
    else:
        body, media_type = message.encode(), "text/plain"
    no_store = {"cache-control": "no-store", "x-content-type-options": "nosniff"}
    return Response(body, status_code=400, headers=no_store, media_type=media_type)
