"""Outbound HTTP: one TLS context, a GET resent once on a reset connection, a POST never."""

from __future__ import annotations

import ssl

import httpx
import pytest

from service.outbound_http import OutboundHttp


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


def test_authlib_gets_the_one_tls_context_and_no_redirects() -> None:
    tls = ssl.create_default_context()
    outbound = OutboundHttp(7.0, tls=tls)
    options = outbound.authlib_options()
    assert options["verify"] is tls
    assert options == {"verify": tls, "timeout": 7.0, "follow_redirects": False}
    assert outbound.client.follow_redirects is False
