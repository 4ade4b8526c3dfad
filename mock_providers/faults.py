"""Failure modes the mock providers can put on their token and API endpoints.

Each provider has two knobs of type :data:`EndpointMode`: ``token_endpoint_mode``
(its token endpoint) and ``api_mode`` (its user/API endpoint). ``"ok"`` is normal
service; the others answer before the provider looks at the request, so no
code is consumed and no token is issued or rotated:

* ``"junk"``: status 200 with an HTML body that is not JSON;
* ``"500"``: status 500 with a JSON error body;
* ``"hang"``: no answer until the client goes away (or ``hang_seconds`` pass,
  then 504). The wait is an ``anyio`` sleep, so cancelling the request -- a
  client timeout through ``httpx.ASGITransport``, or a closed connection under
  uvicorn -- ends it at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

EndpointMode = Literal["ok", "junk", "500", "hang"]
ENDPOINT_MODES: tuple[str, ...] = get_args(EndpointMode)
DEFAULT_HANG_SECONDS = 3600.0

JUNK_BODY = "<!doctype html><html><body><h1>Bad gateway</h1><p>upstream returned junk</p></body></html>"
_SERVER_ERROR = {"error": "server_error", "error_description": "mock provider failure (knob set to '500')"}
_GATEWAY_TIMEOUT = {"error": "temporarily_unavailable", "error_description": "mock provider hung"}


def check_mode(mode: str) -> EndpointMode:
    """``mode`` if it is an :data:`EndpointMode`; ``ValueError`` otherwise."""
    if mode not in ENDPOINT_MODES:
        raise ValueError(f"unknown endpoint mode {mode!r}; use one of {', '.join(ENDPOINT_MODES)}")
    return mode  # type: ignore[return-value]  # narrowed by the membership test


def fault_label(mode: EndpointMode) -> str:
    """What a request record's ``error`` says for a request answered by a fault."""
    return f"fault:{mode}"


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client has gone away (consumes any unread body)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def fault_response(
    mode: str,
    request: Request,
    *,
    hang_seconds: float = DEFAULT_HANG_SECONDS,
    server_error_body: Mapping[str, object] | None = None,
) -> Response | None:
    """The faulty answer for ``mode``, or ``None`` for ``"ok"`` (serve normally)."""
    checked = check_mode(mode)
    if checked == "ok":
        return None
    if checked == "junk":
        return HTMLResponse(JUNK_BODY, status_code=200)
    if checked == "500":
        return JSONResponse(dict(server_error_body or _SERVER_ERROR), status_code=500)
    with anyio.move_on_after(hang_seconds):
        await wait_for_disconnect(request)
    return JSONResponse(_GATEWAY_TIMEOUT, status_code=504)
