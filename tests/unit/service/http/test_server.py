"""How the servers run (service/http/server.py). The event loop (setting `event_loop`): uvloop
by default, asyncio's own on request, and a clear configuration error for uvloop where it is not
installed (tests/unit/service/test_settings.py). The HTTP protocol: h11, with slow request heads bounded
in time and in number (on real sockets)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
import uvloop
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from mock_providers.testing.servers import HOST, free_port
from service import settings as settings_module
from service.http.server import REQUEST_TIMEOUT, BoundedHeadH11Protocol, loop_factory
from service.ops.cli.serving import Server, build_server
from service.settings import EventLoopChoice, event_loop_name, load_settings
from tests.support.settle import wait_until


def test_auto_takes_uvloop_when_installed() -> None:
    assert event_loop_name("auto") == "uvloop"
    assert loop_factory("auto") is uvloop.new_event_loop
    assert load_settings({}).event_loop == "auto"


def test_the_http_parser_is_h11_whatever_is_installed() -> None:
    # httptools accepts header fields of any size and keeps trailing whitespace in field values.
    protocol = build_server(Starlette(), "127.0.0.1", 0).config.http
    assert isinstance(protocol, type) and issubclass(protocol, BoundedHeadH11Protocol)


def test_asyncio_on_request() -> None:
    assert loop_factory("asyncio") is None  # asyncio.Runner's own loop
    assert load_settings({"MCPUC_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"


def test_without_uvloop_auto_falls_back_to_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_module, "_installed", lambda module: False)
    assert event_loop_name("auto") == "asyncio" and loop_factory("auto") is None


@pytest.mark.parametrize(
    ("choice", "expected"), [("uvloop", uvloop.Loop), ("asyncio", asyncio.BaseEventLoop)]
)
def test_the_chosen_loop_runs_the_servers(choice: EventLoopChoice, expected: type) -> None:
    async def running_loop() -> type[asyncio.AbstractEventLoop]:
        return type(asyncio.get_running_loop())

    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        assert issubclass(runner.run(running_loop()), expected)


# ---- request heads (real sockets: the bound is on the connection, below any app) -----------------
HEAD_TIMEOUT = 3.0  # long enough to open 300 connections first on a loaded machine
SLOW_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


async def _slow_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["path"] == "/slow":  # an answer that takes longer than the head timeout
        await asyncio.sleep(HEAD_TIMEOUT + 1)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def serving(awaiting_head: int) -> AsyncIterator[tuple[int, Server]]:
    port = free_port()
    server = build_server(_slow_app, HOST, port, head_timeout=HEAD_TIMEOUT, awaiting_head=awaiting_head)
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started, "uvicorn to start")  # a flag, not an event
        yield port, server
    finally:
        server.should_exit = True
        await task


async def _open_slow_heads(port: int, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    heads = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(SLOW_HEAD)
        heads.append((reader, writer))
    for _, writer in heads:
        await writer.drain()
    return heads


async def test_a_slow_head_is_closed_and_a_prompt_client_is_served_meanwhile() -> None:
    async with serving(awaiting_head=512) as (port, server), httpx.AsyncClient() as http:
        heads = await _open_slow_heads(port, 300)
        # A prompt client, while the 300 are open (none has reached the timeout yet).
        assert (await http.get(f"http://{HOST}:{port}/")).status_code == 200
        assert len(server.server_state.connections) >= 300
        # A request whose head arrived in time may take longer than the head timeout.
        assert (await http.get(f"http://{HOST}:{port}/slow", timeout=HEAD_TIMEOUT + 10)).status_code == 200
        with anyio.fail_after(HEAD_TIMEOUT + 20):
            answers = [await reader.read() for reader, _ in heads]
        assert set(answers) == {REQUEST_TIMEOUT}  # RFC 9110 §15.5.9, then closed
        for _, writer in heads:
            writer.close()
        # The prompt client's kept-alive connection was not cut, and new ones are served.
        assert (await http.get(f"http://{HOST}:{port}/")).status_code == 200


async def test_at_most_max_connections_wait_for_a_head() -> None:
    """Past the bound the connection waiting longest is closed: slow heads cannot use up the file
    descriptors a prompt client needs."""
    async with serving(awaiting_head=50) as (port, server), httpx.AsyncClient() as http:
        # A kept-alive connection between two requests is not waiting for a head (a proxy may
        # be sending its next request on it): it outlives the slow heads.
        kept_reader, kept = await asyncio.open_connection(HOST, port)
        kept.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await kept_reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        heads = await _open_slow_heads(port, 300)
        assert (await http.get(f"http://{HOST}:{port}/")).status_code == 200
        kept.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await kept_reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        kept.close()
        with anyio.fail_after(HEAD_TIMEOUT / 2):  # closed at once, long before the timeout
            closed = [await reader.read() for reader, _ in heads[:250]]
        assert set(closed) == {REQUEST_TIMEOUT}
        assert len(server.server_state.connections) <= 52  # the 50 newest and the two kept alive
        for _, writer in heads:
            writer.close()
