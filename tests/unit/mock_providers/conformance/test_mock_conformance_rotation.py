"""Refresh token rotation with reuse detection, over HTTP (OAuth 2.1 §4.3.1, RFC 9700 §4.14.2).

MockHub rotates: each refresh returns a new refresh token and retires the old one. A retired
refresh token presented again means two parties hold the grant; the server cannot tell which is
legitimate, so it refuses the request and revokes the whole token family (every access and refresh
token descended from the same authorization). The dev AS rotates too and detects reuse the same
way for its refresh tokens (its access tokens are JWTs, which expire but cannot be revoked).
MockGoogle's refresh tokens do not rotate (Google's don't), MockSlack has none.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from mock_providers import MockHub
from tests.support.mock_conformance import (
    DEV_AS,
    MOCKGOOGLE,
    MOCKHUB,
    OAuthProvider,
    api_status,
    assert_oauth_error,
    obtain_tokens,
    refresh,
)


async def refreshed(http: httpx.AsyncClient, provider: OAuthProvider, refresh_token: str) -> dict[str, Any]:
    response = await refresh(http, provider, refresh_token)
    assert response.status_code == 200, response.status_code
    body: dict[str, Any] = response.json()
    return body


async def family(http: httpx.AsyncClient, provider: OAuthProvider, length: int) -> list[dict[str, Any]]:
    """A grant's token responses: the code exchange, then ``length - 1`` chained refreshes."""
    chain = [await obtain_tokens(http, provider)]
    for _ in range(length - 1):
        chain.append(await refreshed(http, provider, chain[-1]["refresh_token"]))
    return chain


@pytest.mark.parametrize("provider", [MOCKHUB, DEV_AS], ids=str)
async def test_each_refresh_rotates_the_refresh_token(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    chain = await family(http, provider, 3)
    refresh_tokens = [body["refresh_token"] for body in chain]
    access_tokens = [body["access_token"] for body in chain]
    assert len(set(refresh_tokens)) == 3 and len(set(access_tokens)) == 3
    # The newest refresh token works; it is now rotated out in turn.
    newest = await refreshed(http, provider, refresh_tokens[-1])
    assert newest["refresh_token"] not in refresh_tokens


@pytest.mark.parametrize("provider", [MOCKHUB, DEV_AS], ids=str)
@pytest.mark.parametrize("reused", [0, 1], ids=["first", "middle"])
async def test_reuse_revokes_the_whole_family(
    http: httpx.AsyncClient, provider: OAuthProvider, reused: int
) -> None:
    other = await obtain_tokens(http, provider, login="bob")
    chain = await family(http, provider, 3)
    live_refresh = chain[-1]["refresh_token"]

    assert_oauth_error(await refresh(http, provider, chain[reused]["refresh_token"]), "invalid_grant")

    # The refresh token the legitimate client (or the attacker) holds now is dead too ...
    assert_oauth_error(await refresh(http, provider, live_refresh), "invalid_grant")
    # ... and so is every access token of the family, where the provider can revoke them.
    if provider is MOCKHUB:
        for body in chain:
            assert await api_status(http, provider, body["access_token"]) == 401
    # Another grant (another authorization) is untouched.
    assert await api_status(http, provider, other["access_token"]) == 200
    await refreshed(http, provider, other["refresh_token"])


async def test_reuse_is_counted_and_the_family_tokens_listed_as_revoked(
    http: httpx.AsyncClient, hub: MockHub
) -> None:
    """The documented counters agree with what HTTP shows."""
    chain = await family(http, MOCKHUB, 2)
    assert hub.reuse_detections == 0
    assert_oauth_error(await refresh(http, MOCKHUB, chain[0]["refresh_token"]), "invalid_grant")
    assert hub.reuse_detections == 1
    for body in chain:
        assert {body["access_token"], body["refresh_token"]} <= hub.revoked_tokens
    # Presenting the (revoked, not rotated) newest refresh token is no second reuse.
    assert_oauth_error(await refresh(http, MOCKHUB, chain[-1]["refresh_token"]), "invalid_grant")
    assert hub.reuse_detections == 1


async def test_knob_revoke_grant_on_reuse_off_only_refuses(http: httpx.AsyncClient, hub: MockHub) -> None:
    """Deviation on request (``revoke_grant_on_reuse = False``): the reused token is refused, the
    family lives on."""
    hub.revoke_grant_on_reuse = False
    chain = await family(http, MOCKHUB, 2)
    assert_oauth_error(await refresh(http, MOCKHUB, chain[0]["refresh_token"]), "invalid_grant")
    assert hub.reuse_detections == 1
    assert await api_status(http, MOCKHUB, chain[-1]["access_token"]) == 200
    await refreshed(http, MOCKHUB, chain[-1]["refresh_token"])


async def test_google_refresh_tokens_do_not_rotate(http: httpx.AsyncClient) -> None:
    """Deviation by design: Google's refresh tokens are long-lived and not rotated, so there is no
    reuse to detect (a confidential client's refresh tokens need not rotate, OAuth 2.1 §4.3.1)."""
    tokens = await obtain_tokens(http, MOCKGOOGLE)
    for _ in range(2):
        body = await refreshed(http, MOCKGOOGLE, tokens["refresh_token"])
        assert "refresh_token" not in body
        assert await api_status(http, MOCKGOOGLE, body["access_token"]) == 200
