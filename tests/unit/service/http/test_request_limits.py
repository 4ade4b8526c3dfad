"""service/http/request_limits.py: a replica bounds request heads and bodies itself, however the bytes
arrive (in process, and on a real uvicorn socket where h11 alone would take a large head)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from mock_providers.demo import build_demo
from mock_providers.testing.servers import free_port
from service.app import create_app
from service.http.request_limits import (
    MAX_REQUEST_BODY_BYTES,
    MAX_REQUEST_HEAD_BYTES,
    request_head_bytes,
    require_bounded_request,
)
from tests.support.settle import eventually


async def echo(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


def plain_app() -> Starlette:
    return Starlette(routes=[Route("/echo", echo, methods=["GET", "POST"])])


def bounded_app() -> Starlette:
    app = plain_app()
    app.add_middleware(require_bounded_request)  # type: ignore[arg-type]  # a factory, as in create_app
    return app


def test_head_bytes_count_the_request_line_and_every_field() -> None:
    scope = {
        "method": "GET",
        "path": "/echo",
        "raw_path": b"/echo",
        "query_string": b"a=1",
        "headers": [(b"host", b"x"), (b"accept", b"*/*")],
    }
    assert request_head_bytes(scope) == len(b"GET /echo?a=1 HTTP/1.1\r\nhost: x\r\naccept: */*\r\n\r\n")


def test_a_head_or_body_over_the_limits_is_refused_and_one_at_them_served() -> None:
    with TestClient(bounded_app()) as client:
        # TestClient adds host, accept, accept-encoding, connection and user-agent lines.
        assert client.get("/echo", headers={"X-Fill": "f" * 15000}).status_code == 200
        big = client.get("/echo", headers={"X-Fill": "f" * MAX_REQUEST_HEAD_BYTES})
        assert big.status_code == 431 and big.text == "Request header fields too large"
        split = {f"X-Fill-{i}": "f" * 3000 for i in range(6)}  # many fields add up
        assert client.get("/echo", headers=split).status_code == 431
        assert client.post("/echo", content=b"x" * MAX_REQUEST_BODY_BYTES).text == str(MAX_REQUEST_BODY_BYTES)
        assert client.post("/echo", content=b"x" * (MAX_REQUEST_BODY_BYTES + 1)).status_code == 413

        def streamed() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(17):
                yield b"x" * 65536

        assert client.post("/echo", content=streamed()).status_code == 413
        # The next request is served.
        assert client.get("/echo").status_code == 200


def _serve(app: Starlette) -> Iterator[int]:
    port = free_port()
    # log_config=None: uvicorn would otherwise reconfigure its loggers for the whole test process.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http="h11", log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def started() -> bool:
        assert thread.is_alive(), "uvicorn exited"
        return server.started

    eventually(started, "uvicorn to start")
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def _status_of_one_piece_head(port: int, head_bytes: int) -> int:
    head = b"GET /echo HTTP/1.1\r\nhost: 127.0.0.1\r\nx-fill: " + b"f" * head_bytes + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(head)  # one write: h11 finds the whole head in one read
        answer = conn.recv(65536)
    return int(answer.split(b" ", 2)[1])


@pytest.fixture
def plain_port() -> Iterator[int]:
    yield from _serve(plain_app())


@pytest.fixture
def bounded_port() -> Iterator[int]:
    yield from _serve(bounded_app())


def test_a_large_head_in_one_piece_is_refused_on_a_real_socket(plain_port: int, bounded_port: int) -> None:
    """The control first: h11 alone serves a 24 KiB head that arrives at once (its 16 KiB bound
    holds only while a head is incomplete); with the check, the same head gets 431."""
    assert _status_of_one_piece_head(plain_port, 24 * 1024) == 200
    assert _status_of_one_piece_head(bounded_port, 24 * 1024) == 431
    assert _status_of_one_piece_head(bounded_port, 8 * 1024) == 200


async def test_the_app_bounds_heads_and_bodies_on_every_route(tmp_path: Path) -> None:
    """create_app installs the check: a browser route and /mcp both refuse a head or a body over
    the limits, before any other middleware answers."""
    settings = build_demo("127.0.0.1", 9310, 9311, tmp_path).settings
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url=settings.public_url) as http:
        for path in ("/connections", "/mcp"):
            big_head = await http.post(path, headers={"X-Fill": "f" * MAX_REQUEST_HEAD_BYTES})
            assert big_head.status_code == 431, path
            big_body = await http.post(path, content=b"x" * (MAX_REQUEST_BODY_BYTES + 1))
            assert big_body.status_code == 413, path
        assert (await http.get("/healthz")).status_code == 200
