"""service/http/client_gone.py, in the request pass: a client that disconnects before its body was
read ends its request with an INFO line, never an ERROR with a traceback (in process; over real
sockets: tests/security/test_slow_clients.py)."""

from __future__ import annotations

import logging

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Message

from service.http.drain import Drain
from service.http.request_pass import RequestPass


async def read_form(request: Request) -> PlainTextResponse:
    form = await request.form()
    return PlainTextResponse(str(form.get("csrf")))


async def boom(request: Request) -> PlainTextResponse:
    raise RuntimeError("a real bug")


ROUTES = [Route("/logout", read_form, methods=["POST"]), Route("/boom", boom, methods=["POST"])]
SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/logout",
    "raw_path": b"/logout",
    "query_string": b"state=s3cret",
    "headers": [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/x-www-form-urlencoded"),
        (b"content-length", b"100"),
    ],
}


async def half_a_body_then_gone(path: str, drain: Drain | None) -> list[Message]:
    messages: list[Message] = [
        {"type": "http.request", "body": b"csrf=ab", "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    # Installed as service/app.py and the embedding's browser half install it: inside Starlette's
    # error handler, which would answer 500 for an exception that reached it.
    app = Starlette(routes=ROUTES, middleware=[Middleware(RequestPass, drain=drain)])
    await app({**SCOPE, "path": path, "raw_path": path.encode()}, receive, send)
    return sent


@pytest.mark.parametrize("drain", [Drain(dict), None], ids=["our server", "an embedding server"])
async def test_a_client_gone_before_its_body_is_an_info_line(
    drain: Drain | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert await half_a_body_then_gone("/logout", drain) == []  # nobody to answer
    [line] = [r for r in caplog.records if r.name == "service.http.client_gone"]
    assert line.levelno == logging.INFO and line.exc_info is None
    assert line.getMessage() == "client went away before its request was read: POST /logout"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    if drain is not None:
        assert drain.in_flight == 0


async def test_any_other_exception_still_propagates() -> None:
    with pytest.raises(RuntimeError, match="a real bug"):
        await half_a_body_then_gone("/boom", Drain(dict))
