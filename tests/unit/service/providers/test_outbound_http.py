"""Outbound HTTP: one TLS context, a GET resent once on a reset connection, a POST never, every
answer read within a byte limit and the whole call within one deadline."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import anyio
import httpx
import httpx2
import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client

from service.providers.outbound_http import (
    MAX_IN_FLIGHT_PER_ORIGIN,
    AuthlibResponseTooLarge,
    OutboundHttp,
    ResponseTooLarge,
    origin_of,
)


class ResettingPool(httpx.AsyncBaseTransport):
    """Resets the first `resets` requests, then answers 200."""

    def __init__(self, resets: int) -> None:
        self.resets = resets
        self.methods: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.methods.append(request.method)
        if len(self.methods) <= self.resets:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200)


async def test_a_get_is_resent_once_on_a_reset_connection() -> None:
    pool = ResettingPool(resets=1)
    outbound = OutboundHttp(5.0, pool=pool)
    assert (await outbound.client.get("https://idp.example/jwks")).status_code == 200
    assert pool.methods == ["GET", "GET"]


async def test_a_get_is_not_resent_twice() -> None:
    pool = ResettingPool(resets=2)
    outbound = OutboundHttp(5.0, pool=pool)
    with pytest.raises(httpx.RemoteProtocolError):
        await outbound.client.get("https://idp.example/jwks")
    assert pool.methods == ["GET", "GET"]


async def test_a_token_endpoint_post_is_never_resent() -> None:
    # A code or a rotating refresh token is single-use: a second POST could burn it.
    pool = ResettingPool(resets=1)
    outbound = OutboundHttp(5.0, pool=pool)
    with pytest.raises(httpx.RemoteProtocolError):
        await outbound.client.post("https://idp.example/token", data={"grant_type": "refresh_token"})
    assert pool.methods == ["POST"]


def test_authlib_clients_borrow_the_one_pool_and_follow_no_redirects() -> None:
    outbound = OutboundHttp(7.0, tls=ssl.create_default_context())
    options = outbound.authlib_options()
    assert set(options) == {"transport", "timeout", "follow_redirects"}
    assert options["timeout"] == 7.0 and options["follow_redirects"] is False
    assert outbound.client.follow_redirects is False


class CountingPool(httpx2.AsyncBaseTransport):
    def __init__(self) -> None:
        self.requests = 0
        self.closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        return httpx2.Response(200, json={"access_token": "at", "token_type": "Bearer"})

    async def aclose(self) -> None:
        self.closed = True


async def test_an_authlib_client_closing_does_not_close_the_shared_pool() -> None:
    pool = CountingPool()
    outbound = OutboundHttp(5.0, authlib_pool=pool)
    for _ in range(2):  # as provider_oauth does: a client per exchange, closed after it
        async with AsyncOAuth2Client(client_id="c", **outbound.authlib_options()) as client:
            await client.fetch_token("https://idp.example/token", grant_type="client_credentials")
    assert pool.requests == 2 and not pool.closed
    await outbound.aclose()
    assert pool.closed


class HangingHost(httpx.AsyncBaseTransport):
    """idp.example never answers (until released); any other host answers at once. `full` is set
    once `expected` requests wait there."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.release = anyio.Event()
        self.full = anyio.Event()
        self.waiting = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "idp.example":
            self.waiting += 1
            if self.waiting == self.expected:
                self.full.set()
            await self.release.wait()
        return httpx.Response(200)


async def test_a_hanging_host_holds_only_its_share_of_the_pool() -> None:
    pool = HangingHost(expected=MAX_IN_FLIGHT_PER_ORIGIN)
    outbound = OutboundHttp(5.0, pool=pool)
    async with anyio.create_task_group() as tasks:
        for _ in range(MAX_IN_FLIGHT_PER_ORIGIN):
            tasks.start_soon(outbound.client.get, "https://idp.example/token")
        await pool.full.wait()
        # Another provider is served at once; one more request to the hanging host waits for a
        # slot only as long as the pool timeout, then fails (never an unbounded wait).
        assert (await outbound.client.get("https://api.other.example/user")).status_code == 200
        with anyio.fail_after(5), pytest.raises(httpx.PoolTimeout):
            await outbound.client.get("https://idp.example/token", timeout=httpx.Timeout(5.0, pool=0.01))
        assert pool.waiting == MAX_IN_FLIGHT_PER_ORIGIN
        pool.release.set()


def test_slots_are_counted_per_origin_not_per_host_name() -> None:
    # The dev stack serves every mock provider and the dev AS from one host: only the port (and
    # scheme) tells two services apart.
    assert origin_of(httpx.URL("http://127.0.0.1:8001/mockhub/token")) == "http://127.0.0.1:8001"
    assert origin_of(httpx.URL("http://127.0.0.1:8002/token")) != origin_of(
        httpx.URL("http://127.0.0.1:8001/x")
    )
    assert origin_of(httpx2.URL("https://idp.example/token")) == "https://idp.example:"


class Endless(httpx.AsyncByteStream, httpx2.AsyncByteStream):
    """A body of `chunk`-sized pieces (`pause` seconds between them), far longer than any limit
    but finite (a client without the limit reads it all and the test fails, not the machine);
    counts the bytes it handed out."""

    def __init__(self, chunk: int, pause: float = 0.0, total: int = 8 * 1024 * 1024) -> None:
        self.chunk, self.pause, self.sent, self.total = chunk, pause, 0, total

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < self.total:
            if self.pause:
                await anyio.sleep(self.pause)
            self.sent += self.chunk
            yield b"x" * self.chunk

    async def aclose(self) -> None:
        return None


class EndlessPool(httpx.AsyncBaseTransport):
    def __init__(self, body: Endless, headers: dict[str, str] | None = None) -> None:
        self.body, self.headers = body, headers or {}
        self.accept_encoding: str | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.accept_encoding = request.headers.get("accept-encoding")
        return httpx.Response(200, headers=self.headers, stream=self.body)


class EndlessAuthlibPool(httpx2.AsyncBaseTransport):
    def __init__(self, body: Endless) -> None:
        self.body = body

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, stream=self.body)


async def test_an_answer_over_the_byte_limit_is_refused_without_being_read_whole() -> None:
    body = Endless(64 * 1024)
    outbound = OutboundHttp(5.0, pool=EndlessPool(body), max_response_bytes=1024 * 1024)
    with anyio.fail_after(10), pytest.raises(ResponseTooLarge):
        await outbound.client.get("https://api.example/user")
    assert body.sent <= 1024 * 1024 + 64 * 1024  # read up to the limit, then no further


async def test_a_token_answer_over_its_byte_limit_is_refused_at_authlib() -> None:
    body = Endless(16 * 1024)
    outbound = OutboundHttp(5.0, authlib_pool=EndlessAuthlibPool(body), max_token_response_bytes=64 * 1024)
    async with AsyncOAuth2Client(client_id="c", **outbound.authlib_options()) as client:
        with anyio.fail_after(10), pytest.raises(AuthlibResponseTooLarge):
            await client.fetch_token("https://idp.example/token", grant_type="client_credentials")
    assert body.sent <= 64 * 1024 + 16 * 1024


async def test_a_dripping_answer_ends_at_the_whole_call_deadline() -> None:
    # Each piece comes well within the timeout; only a deadline for the whole call ends it.
    body = Endless(1, pause=0.02)
    outbound = OutboundHttp(0.3, pool=EndlessPool(body))
    with anyio.fail_after(3), pytest.raises(httpx.ReadTimeout):
        await outbound.client.get("https://api.example/user")


async def test_a_dripping_token_answer_ends_at_the_whole_call_deadline() -> None:
    body = Endless(1, pause=0.02)
    outbound = OutboundHttp(0.3, authlib_pool=EndlessAuthlibPool(body))
    async with AsyncOAuth2Client(client_id="c", **outbound.authlib_options()) as client:
        with anyio.fail_after(3), pytest.raises(httpx2.ReadTimeout):
            await client.fetch_token("https://idp.example/token", grant_type="client_credentials")


async def test_an_encoded_answer_is_refused_since_only_identity_is_asked_for() -> None:
    # A small gzip body could unpack into far more than the byte limit counts.
    pool = EndlessPool(Endless(16), headers={"Content-Encoding": "gzip"})
    outbound = OutboundHttp(5.0, pool=pool)
    with pytest.raises(ResponseTooLarge):
        await outbound.client.get("https://api.example/user")
    assert pool.accept_encoding == "identity"
