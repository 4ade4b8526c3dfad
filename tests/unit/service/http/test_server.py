"""How the servers run (service/http/server.py). The event loop (setting `event_loop`): uvloop
by default, asyncio's own on request, and a clear configuration error for uvloop where it is not
installed (tests/unit/service/test_settings.py). The HTTP protocol: h11, with slow request heads and
bodies bounded in time and in number, the number within the open-file limit, and a request that
frames its body twice refused (on real sockets: the bounds are on the connection, below any app)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn
import uvloop
import websockets
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from mock_providers.testing.servers import HOST, free_port
from service import settings as settings_module
from service.http.server import (
    REQUEST_TIMEOUT,
    BoundedRequestH11Protocol,
    RequestBounds,
    loop_factory,
    server_config,
)
from service.ops.cli.serving import build_server
from service.settings import EventLoopChoice, event_loop_name, load_settings
from tests.support.settle import quiet_for, wait_until


def test_auto_takes_uvloop_when_installed() -> None:
    assert event_loop_name("auto") == "uvloop"
    assert loop_factory("auto") is uvloop.new_event_loop
    assert load_settings({}).event_loop == "auto"


def test_the_http_parser_is_h11_whatever_is_installed() -> None:
    # httptools accepts header fields of any size and keeps trailing whitespace in field values.
    protocol = build_server(Starlette(), "127.0.0.1", 0).config.http
    assert isinstance(protocol, type) and issubclass(protocol, BoundedRequestH11Protocol)


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


# ---- slow requests (real sockets: the bounds are on the connection, below any app) -------------
HEAD_TIMEOUT = 3.0  # long enough to open 300 connections first on a loaded machine
BODY_TIMEOUT = 3.0
SLOW_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
# A complete head and the first bytes of a body of 100.
SLOW_BODY = b"POST /read HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nab"

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class SlowApp:
    """Answers at once, or after the head timeout on `/slow`, or after reading the whole body on
    `/read`; counts the requests that ended with the client gone before their body was read."""

    def __init__(self) -> None:
        self.abandoned = 0
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] == "websocket":  # echoes one message
            await receive()
            await send({"type": "websocket.accept"})
            message = await receive()
            await send({"type": "websocket.send", "text": message.get("text")})
            await send({"type": "websocket.close"})
            return
        self.paths.append(scope["path"])
        if scope["path"] == "/slow":  # an answer that takes longer than the head timeout
            await asyncio.sleep(HEAD_TIMEOUT + 1)
        if scope["path"] == "/read":
            while (message := await receive())["type"] == "http.request" and message["more_body"]:
                pass
            if message["type"] == "http.disconnect":
                self.abandoned += 1
                return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def serving(awaiting: int, app: SlowApp | None = None) -> AsyncIterator[tuple[int, uvicorn.Server]]:
    port = free_port()
    bounds = RequestBounds(head_timeout=HEAD_TIMEOUT, body_timeout=BODY_TIMEOUT, max_waiting=awaiting)
    server = uvicorn.Server(server_config(app or SlowApp(), HOST, port, bounds=bounds))
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started, "uvicorn to start")  # a flag, not an event
        yield port, server
    finally:
        server.should_exit = True
        await task


async def _open_slow(port: int, count: int, start: bytes) -> list[Stream]:
    """`count` connections that each sent `start` and nothing more."""
    opened = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(start)
        opened.append((reader, writer))
    for _, writer in opened:
        await writer.drain()
    return opened


def _close(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.close()


async def test_a_slow_head_is_closed_and_a_prompt_client_is_served_meanwhile() -> None:
    async with serving(awaiting=512) as (port, server), httpx.AsyncClient() as http:
        heads = await _open_slow(port, 300, SLOW_HEAD)
        # A prompt client, while the 300 are open (none has reached the timeout yet).
        assert (await http.get(f"http://{HOST}:{port}/")).status_code == 200
        assert len(server.server_state.connections) >= 300
        # A request whose head arrived in time may take longer than the head timeout.
        assert (await http.get(f"http://{HOST}:{port}/slow", timeout=HEAD_TIMEOUT + 10)).status_code == 200
        with anyio.fail_after(HEAD_TIMEOUT + 20):
            answers = [await reader.read() for reader, _ in heads]
        assert set(answers) == {REQUEST_TIMEOUT}  # RFC 9110 §15.5.9, then closed
        _close(heads)
        # The prompt client's kept-alive connection was not cut, and new ones are served.
        assert (await http.get(f"http://{HOST}:{port}/")).status_code == 200


async def test_a_slow_body_is_closed_and_a_prompt_client_is_served_meanwhile() -> None:
    """A complete head and then a body that does not come: 408 after the body timeout, and the
    app reading it learns the client is gone; a prompt body is served meanwhile, and a kept-alive
    connection may send a slow body too."""
    app = SlowApp()
    async with serving(awaiting=512, app=app) as (port, server), httpx.AsyncClient() as http:
        bodies = await _open_slow(port, 100, SLOW_BODY)
        kept_reader, kept = await asyncio.open_connection(HOST, port)
        kept.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await kept_reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        kept.write(SLOW_BODY)  # its second request
        bodies.append((kept_reader, kept))
        prompt = await http.post(f"http://{HOST}:{port}/read", content=b"x" * 100)
        assert prompt.status_code == 200 and prompt.text == "ok"
        assert len(server.server_state.connections) >= 101
        with anyio.fail_after(BODY_TIMEOUT + 20):
            answers = [await reader.read() for reader, _ in bodies]
        assert set(answers) == {REQUEST_TIMEOUT}
        _close(bodies)
        await wait_until(lambda: app.abandoned == 101, "the app to see each slow body's client gone")


async def test_a_body_still_coming_after_its_answer_is_bounded_too() -> None:
    """An app may answer before it reads the body (a refusal, say): the connection then stays
    open only until the body timeout, and gets no 408 after the answer."""
    async with serving(awaiting=512) as (port, _server):
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nab")
        with anyio.fail_after(BODY_TIMEOUT + 20):
            while not (received := await reader.read(1024)).endswith(b"ok"):
                pass
            assert received.startswith(b"HTTP/1.1 200")
            # One more byte now and then would hold the connection open forever without the bound.
            writer.write(b"c")
            assert await reader.read() == b""  # closed, nothing more written
        writer.close()


async def test_a_websocket_outlives_the_request_timeouts() -> None:
    """An upgraded connection is the WebSocket protocol's: no head or body timeout closes it."""
    async with serving(awaiting=512) as (port, _server), websockets.connect(f"ws://{HOST}:{port}/ws") as ws:
        await quiet_for(max(HEAD_TIMEOUT, BODY_TIMEOUT) + 1, "the request timeouts to pass")
        await ws.send("still here")
        assert await ws.recv() == "still here"


async def test_at_most_max_connections_wait_for_a_head_or_a_body() -> None:
    """Past the bound the connection waiting longest is closed, whether it waits for a head or a
    body: slow clients cannot use up the file descriptors a prompt client needs."""
    async with serving(awaiting=50) as (port, server), httpx.AsyncClient() as http:
        # A kept-alive connection between two requests is not waiting for a head (a proxy may
        # be sending its next request on it): it outlives the slow heads.
        kept_reader, kept = await asyncio.open_connection(HOST, port)
        kept.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await kept_reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        bodies = await _open_slow(port, 100, SLOW_BODY)
        heads = await _open_slow(port, 200, SLOW_HEAD)
        assert (await http.get(f"http://{HOST}:{port}/")).status_code == 200
        kept.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await kept_reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        kept.close()
        with anyio.fail_after(HEAD_TIMEOUT / 2):  # closed at once, long before the timeouts
            closed = [await reader.read() for reader, _ in [*bodies, *heads[:150]]]
        assert set(closed) == {REQUEST_TIMEOUT}
        assert len(server.server_state.connections) <= 52  # the 50 newest and the two kept alive
        _close(bodies + heads)


async def test_a_request_that_frames_its_body_twice_is_refused_and_its_connection_closed() -> None:
    """RFC 9112 §6.1: a request with both Content-Length and Transfer-Encoding gets 400 and the
    connection closes, so a request that a proxy framed by its Content-Length never gets two
    answers (the second one smuggled inside its body). Framed once either way, the same requests
    are served on a connection that stays open."""
    smuggled = b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    head = b"POST /read HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n" % len(smuggled)
    app = SlowApp()
    async with serving(awaiting=512, app=app) as (port, _server):
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(head + b"Transfer-Encoding: chunked\r\n\r\n" + smuggled)
        with anyio.fail_after(10):
            answer = await reader.read()  # to the end: the server closed the connection
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1, answer
        assert app.paths == []  # the app never saw it

        for framed_once in (
            head + b"\r\n" + smuggled,
            b"POST /read HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        ):
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(framed_once + b"GET /next HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            with anyio.fail_after(10):
                first = await reader.readuntil(b"ok")
                second = await reader.readuntil(b"ok")
            writer.close()
            assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")
        assert app.paths == ["/read", "/next", "/read", "/next"]


CLAMPED_SERVER = """
import asyncio, resource, sys
import uvicorn
from service.http.server import RequestBounds, server_config
from tests.unit.service.http.test_server import SlowApp

resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
# The default bound (512 waiting), heads that may take long: only the clamp protects a prompt client.
config = server_config(SlowApp(), "127.0.0.1", int(sys.argv[1]), bounds=RequestBounds(head_timeout=600))
asyncio.run(uvicorn.Server(config).serve())
"""


async def test_waiting_connections_are_bounded_by_half_the_open_file_limit(tmp_path: Path) -> None:
    """With `ulimit -n 256` and the default bound of 512, 300 slow heads would take every file
    descriptor and a prompt client would get its connection reset: at most 128 wait, the longest
    waiting closed at once, and the server says so when it starts."""
    port = free_port()
    log = tmp_path / "server.log"
    root = Path(__file__).parents[4]
    with log.open("wb") as out:
        child = await anyio.open_process(
            [sys.executable, "-c", CLAMPED_SERVER, str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
    try:

        async def listening() -> bool:
            assert child.returncode is None, log.read_text()
            try:
                _, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                return False
            writer.close()
            return True

        await wait_until(listening, "the server with 256 open files to start")
        heads = await _open_slow(port, 300, SLOW_HEAD)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://{HOST}:{port}/healthz", timeout=30)).status_code == 200
        with anyio.fail_after(HEAD_TIMEOUT):  # closed at once: the head timeout is 600 s
            closed = [await reader.read() for reader, _ in heads[: 300 - 128]]
        assert set(closed) == {REQUEST_TIMEOUT}
        _close(heads)
        assert "at most 128 connections wait for a request, not 512" in log.read_text()
    finally:
        child.terminate()
        with anyio.fail_after(30):
            await child.wait()
