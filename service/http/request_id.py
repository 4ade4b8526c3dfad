"""`X-Request-ID`: taken from the proxy (or generated), echoed in the response, on every log line.

Assigned in the app's one pass over each request (service/http/request_pass.py), which sets it in the
log context (service/observability/logs.py `request_context`) and adds it to the response. An incoming id is
used only when it has a plain shape: a client must not be able to write arbitrary text into our
logs through it.
"""

from __future__ import annotations

import re
import secrets

from starlette.types import Scope

HEADER = "x-request-id"
_FIELD = HEADER.encode()  # as ASGI names headers
# nginx's $request_id is 32 hex digits; deploy/nginx/nginx.conf accepts a caller's id in this shape.
REQUEST_ID_SHAPE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_from(value: str | None) -> str:
    """The caller's id when it has our shape, else a fresh one."""
    # mutant: logs.request_id_shape drop 1
    if value is not None and REQUEST_ID_SHAPE.fullmatch(value):
        return value
    return secrets.token_hex(16)


def request_id_of(scope: Scope) -> str:
    """The id of this HTTP request: its first `X-Request-ID` line when it has our shape."""
    for name, value in scope["headers"]:
        if name == _FIELD:
            return request_id_from(value.decode("latin-1"))
    return request_id_from(None)
