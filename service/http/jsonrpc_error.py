"""The JSON-RPC error body the HTTP layer answers for an MCP request it refuses before the SDK
reads it (a repeated header, a session gone during a drain, a session limit).

It lives with the HTTP layer, below `service/mcp/`, because the checks that answer it run in the
app's one pass over each request (service/http/request_pass.py), ahead of any MCP session.
"""

from __future__ import annotations

import json


def http_error_body(code: int, message: str) -> bytes:
    """A JSON-RPC error answered at the HTTP layer, before the request body is read: its id is
    null (JSON-RPC 2.0 §5: "If there was an error in detecting the id in the Request object ...
    it MUST be Null")."""
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
