"""Slow, vanishing and ambiguous clients against the demo served as `serve` serves it (the bounded
h11 protocol of service/http/server.py): a request body dripped a byte at a time, a body
abandoned half-sent, a request that frames its body twice. Each is bounded or refused before it
costs the replica its file descriptors, an ERROR record or a second answer, while another user's
session is served on both revisions (RFC 9110 §15.5.9; RFC 9112 §6.1, §9.5)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from mock_providers.testing.client import MODES
from service.http.server import REQUEST_TIMEOUT
from tests.security.attack import Servers, attack, unique
from tests.security.flows import bearer
from tests.security.rpc import RawMcp, messages
from tests.support.settle import wait_until

BODY_TIMEOUT = 3.0
AWAITING = 40  # connections that may wait for a head or a body
pytestmark = [
    pytest.mark.security,
    pytest.mark.demo_settings(
        request_body_timeout_seconds=BODY_TIMEOUT, max_connections_awaiting_head=AWAITING
    ),
]
DRIPS = 60  # more than may wait: the longest-waiting are cut at once, the others at the timeout
GONE = "client went away before its request was read: POST /logout"


async def bystander(servers: Servers, http: httpx.AsyncClient, mode: str) -> RawMcp:
    """Another user's session (2025-11-25) or client (2026-07-28), open before the attack."""
    raw = RawMcp(servers, http, mode, bearer(servers, unique("bystander")))
    assert (await raw.open()).status_code == 200
    return raw


async def still_served(servers: Servers, http: httpx.AsyncClient, raw: RawMcp) -> bool:
    listed = messages(await raw.send("tools/list"))
    healthy = await http.get(f"{servers.public_url}/healthz")
    return any("whoami" in str(m.get("result")) for m in listed) and healthy.status_code == 200


async def logout_head(servers: Servers, http: httpx.AsyncClient, length: int) -> bytes:
    """The head of a `POST /logout` with a session cookie anyone gets from `GET /login?next=…`."""
    login = await http.get(f"{servers.public_url}/login", params={"next": "/connections"})
    assert login.status_code in (302, 303), login.status_code
    cookie = login.headers["set-cookie"].split(";", 1)[0]
    host = urlsplit(servers.public_url).netloc
    return (
        f"POST /logout HTTP/1.1\r\nHost: {host}\r\nOrigin: {servers.public_url}\r\nCookie: {cookie}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def drip(servers: Servers, head: bytes) -> Callable[[], Awaitable[bytes]]:
    """A slowloris body: its connection opened and its head sent now; the returned call then
    sends one byte of the body every half second until the server answers or closes, and gives
    what it answered (nothing if it reset the connection)."""
    parts = urlsplit(servers.public_url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(head + b"csrf=")

    async def dripping() -> bytes:
        try:
            while True:
                await writer.drain()
                try:
                    answered = await asyncio.wait_for(reader.read(1024), timeout=0.5)
                except TimeoutError:
                    writer.write(b"a")
                    continue
                return answered + await reader.read()  # to the end: closed
        except OSError:
            return b""  # reset: closed too
        finally:
            writer.close()

    return dripping


@pytest.mark.parametrize("mode", MODES)
async def test_a_body_dripped_a_byte_at_a_time_is_cut_and_others_are_served(
    servers: Servers, mode: str
) -> None:
    """Anyone can get a session cookie and drip `POST /logout` bodies: each connection is closed
    (408) at most `request_body_timeout_seconds` after its head, those past
    `max_connections_awaiting_head` at once, and another user is served meanwhile."""
    async with httpx.AsyncClient(timeout=30) as http:
        other = await bystander(servers, http, mode)
        head = await logout_head(servers, http, 1000)
        async with attack(servers) as a:
            # All open first: a client that connects while newer connections keep arriving past
            # the bound is among the longest waiting, and may be closed with them.
            opened = [await drip(servers, head) for _ in range(DRIPS)]
            drips = [asyncio.create_task(dripping()) for dripping in opened]
            a.check(await still_served(servers, http, other), "another user is served while the bodies drip")
            with anyio.fail_after(BODY_TIMEOUT + 30):
                answers = await asyncio.gather(*drips)
            # Those cut at once may be cut before the server read their head (then silently), and
            # a connection closed with bytes unread is reset: its client may not read the 408.
            a.check(set(answers) <= {REQUEST_TIMEOUT, b""}, f"every dripped body cut: {set(answers)}")
            a.check(REQUEST_TIMEOUT in answers, "with 408 where the client reads it")
            a.check(await still_served(servers, http, other), "and served afterwards")


@pytest.mark.parametrize("mode", MODES)
async def test_a_body_sent_half_and_abandoned_is_no_server_error(
    servers: Servers, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that sends half a `POST /logout` body and disconnects is not a server error: one
    INFO line each, no ERROR record and no traceback (the attack also fails on any ERROR)."""
    caplog.set_level(logging.INFO, "service.http.client_gone")
    parts = urlsplit(servers.public_url)
    async with httpx.AsyncClient(timeout=30) as http:
        other = await bystander(servers, http, mode)
        head = await logout_head(servers, http, 100)
        async with attack(servers) as a:
            for _ in range(20):
                _, writer = await asyncio.open_connection(parts.hostname, parts.port)
                writer.write(head + b"csrf=ab")
                await writer.drain()
                writer.close()
                await writer.wait_closed()

            def gone() -> list[logging.LogRecord]:
                return [r for r in caplog.records if r.getMessage() == GONE]

            await wait_until(lambda: len(gone()) == 20, "one line per abandoned body")
            a.check({r.levelno for r in gone()} == {logging.INFO}, "logged at INFO")
            a.check(not [r for r in caplog.records if r.exc_info], "no traceback")
            a.check(await still_served(servers, http, other), "another user is served")


@pytest.mark.parametrize("mode", MODES)
async def test_a_request_that_frames_its_body_twice_gets_one_answer(servers: Servers, mode: str) -> None:
    """A proxy that frames by Content-Length would pass on this one request; framed by its
    Transfer-Encoding it ends early and a second request follows inside it. RFC 9112 §6.1: 400,
    and the connection closes: one answer, and the smuggled request never reaches the app."""
    parts = urlsplit(servers.public_url)
    smuggled = f"0\r\n\r\nGET /connections HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    async with httpx.AsyncClient(timeout=30) as http:
        other = await bystander(servers, http, mode)
        fields = "".join(
            f"{name}: {value}\r\n" for name, value in other._headers("tools/call", "whoami").items()
        )
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: {parts.netloc}\r\n{fields}"
            f"Content-Length: {len(smuggled)}\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        async with attack(servers) as a:
            mark = servers.wire.mark()
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            writer.write(head + smuggled)
            with anyio.fail_after(10):
                answer = await reader.read()  # to the end: the server closed the connection
            writer.close()
            a.check(
                answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1 ") == 1, repr(answer[:200])
            )
            reached = [e.exchange.path for e in servers.wire.since(mark) if e.kind == "request"]
            a.check(reached == [], f"nothing reached the app: {reached}")
            a.check(await still_served(servers, http, other), "another user is served")
