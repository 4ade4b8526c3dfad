"""Outbound HTTP: one TLS context, a GET resent once on a reset connection, a POST never."""

from __future__ import annotations

import ssl

import anyio
import httpx
import httpx2
import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client

from service.outbound_http import MAX_IN_FLIGHT_PER_ORIGIN, OutboundHttp, origin_of


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
