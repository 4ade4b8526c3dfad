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
  uvicorn -- ends it at once;
* ``"huge_body"``: status 200 and a JSON-looking body of ``huge_body_bytes``,
  streamed (the mock never holds it whole).

A malicious provider's answers (MockHub and MockGoogle; :func:`mangle`) come
*after* the request is processed normally -- the code is consumed, the token
issued or rotated -- and change what is sent back:

* ``"drip"``: the real answer, one byte every ``drip_seconds``;
* ``"huge_scope"``: the token response's ``scope`` padded to 2 MB;
* ``"token_type_mac"``: the token response's ``token_type`` is ``"MAC"``;
* ``"non_ascii_token"``: the access token gets non-ASCII letters appended;
* ``"long_account"`` (``api_mode`` of MockHub's user endpoint): the account
  ``id`` is :data:`LONG_ACCOUNT_ID`, 300 characters.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Literal, get_args

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

EndpointMode = Literal[
    "ok",
    "junk",
    "500",
    "hang",
    "huge_body",
    "drip",
    "huge_scope",
    "token_type_mac",
    "non_ascii_token",
    "long_account",
]
ENDPOINT_MODES: tuple[str, ...] = get_args(EndpointMode)
# Answered after the request is processed, by :func:`mangle`.
MANGLING_MODES = frozenset({"drip", "huge_scope", "token_type_mac", "non_ascii_token", "long_account"})
DEFAULT_HANG_SECONDS = 3600.0
DEFAULT_HUGE_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_DRIP_SECONDS = 1.0
HUGE_SCOPE_BYTES = 2 * 1024 * 1024
LONG_ACCOUNT_ID = "9" * 300
_CHUNK = 64 * 1024

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


async def _padding(size: int) -> AsyncIterator[bytes]:
    yield b'{"access_token": "'
    sent = 0
    while sent < size:
        piece = min(_CHUNK, size - sent)
        sent += piece
        yield b"x" * piece


async def _dripping(body: bytes, seconds: float) -> AsyncIterator[bytes]:
    for byte in body:
        yield bytes([byte])
        await anyio.sleep(seconds)


async def fault_response(
    mode: str,
    request: Request,
    *,
    hang_seconds: float = DEFAULT_HANG_SECONDS,
    huge_body_bytes: int = DEFAULT_HUGE_BODY_BYTES,
    server_error_body: Mapping[str, object] | None = None,
) -> Response | None:
    """The faulty answer for ``mode``, or ``None`` to serve normally (``"ok"`` and the modes
    :func:`mangle` applies to the normal answer)."""
    checked = check_mode(mode)
    if checked == "ok" or checked in MANGLING_MODES:
        return None
    if checked == "huge_body":
        return StreamingResponse(_padding(huge_body_bytes), media_type="application/json")
    if checked == "junk":
        return HTMLResponse(JUNK_BODY, status_code=200)
    if checked == "500":
        return JSONResponse(dict(server_error_body or _SERVER_ERROR), status_code=500)
    with anyio.move_on_after(hang_seconds):
        await wait_for_disconnect(request)
    return JSONResponse(_GATEWAY_TIMEOUT, status_code=504)


def mangle(mode: str, response: Response, *, drip_seconds: float = DEFAULT_DRIP_SECONDS) -> Response:
    """``response`` (a JSON answer processed normally) as a malicious provider sends it for
    ``mode``; unchanged for the other modes."""
    checked = check_mode(mode)
    if checked not in MANGLING_MODES or not 200 <= response.status_code < 300:
        return response
    if checked == "drip":
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return StreamingResponse(
            _dripping(bytes(response.body), drip_seconds), status_code=response.status_code, headers=headers
        )
    body = json.loads(bytes(response.body))
    if checked == "huge_scope":
        body["scope"] = " ".join(["repo"] * (HUGE_SCOPE_BYTES // 5))
    elif checked == "token_type_mac":
        body["token_type"] = "MAC"
    elif checked == "non_ascii_token":
        body["access_token"] = body["access_token"] + "\u00e9t\u00e9"
    elif checked == "long_account":
        body["id"] = LONG_ACCOUNT_ID
    headers = {
        k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")
    }
    return JSONResponse(body, status_code=response.status_code, headers=headers)
