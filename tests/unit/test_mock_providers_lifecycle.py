"""mock_providers: token lifecycles and failure knobs of MockHub, MockGoogle and MockSlack, over ASGI."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from authlib.oidc.discovery import OpenIDProviderMetadata
from starlette.applications import Starlette

from mock_providers import (
    MockGoogle,
    MockHub,
    MockSlack,
    create_mock_providers_app,
)
from mock_providers.faults import JUNK_BODY, check_mode
from tests.support.mock_provider_setup import (
    BASE,
    GOOGLE,
    GOOGLE_CALLBACK,
    GOOGLE_CLIENT_ID,
    GOOGLE_SECRET,
    HUB_CALLBACK,
    HUB_CLIENT_ID,
    HUB_SECRET,
    SLACK_CALLBACK,
    SLACK_CLIENT_ID,
    SLACK_SECRET,
    full_config,
    make_config,
    only_form,
    pkce_pair,
    query_of,
)


@pytest.fixture
def app(tmp_path: Path) -> Starlette:
    return create_mock_providers_app(full_config(tmp_path / "data"))


@pytest.fixture
def hub(app: Starlette) -> MockHub:
    mockhub: MockHub = app.state.mockhub
    return mockhub


@pytest.fixture
def google(app: Starlette) -> MockGoogle:
    mockgoogle: MockGoogle = app.state.mockgoogle
    return mockgoogle


@pytest.fixture
def slack(app: Starlette) -> MockSlack:
    mockslack: MockSlack = app.state.mockslack
    return mockslack


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def consent(
    client: httpx.AsyncClient,
    path: str,
    params: dict[str, str],
    *,
    login: str,
    decision: str = "approve",
    expect_default: str | None = None,
) -> dict[str, str]:
    """GET a consent page, submit its form as the user would; returns the callback parameters."""
    page = await client.get(path, params=params)
    assert page.status_code == 200, page.text
    form = only_form(page.text)
    assert form["action"] == path
    assert sorted(form["buttons"]) == [("decision", "approve"), ("decision", "deny")]
    if expect_default is not None:
        assert form["fields"]["login"] == expect_default
    response = await client.post(path, data={**form["fields"], "login": login, "decision": decision})
    assert response.status_code == 302, response.text
    return query_of(response.headers["location"])


# -- mockhub: refresh lifecycle ------------------------------------------------------------


async def hub_tokens(client: httpx.AsyncClient, login: str = "octocat") -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    params = {
        "response_type": "code",
        "client_id": HUB_CLIENT_ID,
        "redirect_uri": HUB_CALLBACK,
        "scope": "read:user",
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    callback = await consent(client, "/mockhub/authorize", params, login=login)
    token = await client.post(
        "/mockhub/token",
        data={
            "grant_type": "authorization_code",
            "code": callback["code"],
            "redirect_uri": HUB_CALLBACK,
            "code_verifier": verifier,
        },
        auth=(HUB_CLIENT_ID, HUB_SECRET),
    )
    assert token.status_code == 200, token.text
    body: dict[str, Any] = token.json()
    return body


async def hub_refresh(client: httpx.AsyncClient, refresh_token: str) -> httpx.Response:
    return await client.post(
        "/mockhub/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh_token},
        auth=(HUB_CLIENT_ID, HUB_SECRET),
    )


async def hub_user_status(client: httpx.AsyncClient, access_token: str) -> int:
    return (await client.get("/mockhub/user", headers=bearer(access_token))).status_code


async def test_hub_reuse_of_rotated_refresh_token_revokes_the_grant(
    client: httpx.AsyncClient, hub: MockHub
) -> None:
    first = await hub_tokens(client)
    other = await hub_tokens(client)  # a second authorization of the same user: another grant
    second = (await hub_refresh(client, first["refresh_token"])).json()
    third = (await hub_refresh(client, second["refresh_token"])).json()
    assert len({first["refresh_token"], second["refresh_token"], third["refresh_token"]}) == 3
    assert await hub_user_status(client, third["access_token"]) == 200
    assert hub.reuse_detections == 0

    reused = await hub_refresh(client, first["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert hub.reuse_detections == 1
    for body in (first, second, third):
        assert await hub_user_status(client, body["access_token"]) == 401
        assert body["access_token"] in hub.revoked_tokens
    current = await hub_refresh(client, third["refresh_token"])
    assert current.status_code == 400 and current.json()["error"] == "invalid_grant"
    assert hub.reuse_detections == 1  # the current token was revoked, not reused

    # The other grant is untouched.
    assert await hub_user_status(client, other["access_token"]) == 200
    assert (await hub_refresh(client, other["refresh_token"])).status_code == 200

    assert hub.refresh_requests == 5
    assert [r.ok for r in hub.token_requests if r.grant_type == "refresh_token"] == [
        True,
        True,
        False,
        False,
        True,
    ]


async def test_hub_without_rotation_the_refresh_token_stays(client: httpx.AsyncClient, hub: MockHub) -> None:
    hub.rotate_refresh_tokens = False
    first = await hub_tokens(client)
    refreshed = []
    for _ in range(2):
        response = await hub_refresh(client, first["refresh_token"])
        assert response.status_code == 200, response.text
        refreshed.append(response.json())
    assert all("refresh_token" not in body for body in refreshed)
    assert refreshed[0]["access_token"] != refreshed[1]["access_token"]
    assert hub.issued_refresh_tokens == {first["refresh_token"]}
    assert hub.reuse_detections == 0
    for body in (first, *refreshed):
        assert await hub_user_status(client, body["access_token"]) == 200

    # Revoking the newest access token revokes the refresh token it holds (revoking the refresh
    # token would revoke the whole grant, RFC 7009 section 2.1).
    revoked = await client.post(
        "/mockhub/revoke", data={"token": refreshed[1]["access_token"]}, auth=(HUB_CLIENT_ID, HUB_SECRET)
    )
    assert revoked.status_code == 200
    assert (await hub_refresh(client, first["refresh_token"])).status_code == 400
    assert await hub_user_status(client, refreshed[1]["access_token"]) == 401
    # The rest of the grant goes with revoke_grant; each access token counts once.
    assert hub.revoke_grant("octocat") == 2
    for body in (first, refreshed[0]):
        assert await hub_user_status(client, body["access_token"]) == 401


async def test_hub_refresh_token_lifetime(client: httpx.AsyncClient, hub: MockHub) -> None:
    hub.refresh_token_lifetime = 60
    first = await hub_tokens(client)
    assert first["refresh_token_expires_in"] == 60
    start = time.time()
    hub.clock = lambda: start + 30
    second = (await hub_refresh(client, first["refresh_token"])).json()
    assert second["refresh_token_expires_in"] == 60  # a rotated refresh token starts afresh
    hub.clock = lambda: start + 30 + 61
    expired = await hub_refresh(client, second["refresh_token"])
    assert expired.status_code == 400 and expired.json()["error"] == "invalid_grant"
    assert hub.reuse_detections == 0

    hub.refresh_token_lifetime = None
    hub.clock = time.time
    third = await hub_tokens(client)
    assert "refresh_token_expires_in" not in third
    hub.expire_refresh_tokens()
    assert (await hub_refresh(client, third["refresh_token"])).status_code == 400


async def test_hub_access_token_expiry(client: httpx.AsyncClient, hub: MockHub) -> None:
    hub.access_token_ttl = 600
    body = await hub_tokens(client)
    assert body["expires_in"] == 600
    start = time.time()
    hub.clock = lambda: start + 599
    assert await hub_user_status(client, body["access_token"]) == 200
    hub.clock = lambda: start + 601
    expired = await client.get("/mockhub/user", headers=bearer(body["access_token"]))
    assert expired.status_code == 401 and "invalid_token" in expired.headers["www-authenticate"]
    # An expired access token is no reason to refuse the refresh token.
    renewed = (await hub_refresh(client, body["refresh_token"])).json()
    assert await hub_user_status(client, renewed["access_token"]) == 200
    hub.expire_access_tokens()
    assert await hub_user_status(client, renewed["access_token"]) == 401


async def test_hub_revoke_on_demand(client: httpx.AsyncClient, hub: MockHub) -> None:
    alice = await hub_tokens(client, login="alice")
    alice_refreshed = (await hub_refresh(client, alice["refresh_token"])).json()
    bob = await hub_tokens(client, login="bob")

    assert hub.revoke_grant("Alice") == 2
    for body in (alice, alice_refreshed):
        assert await hub_user_status(client, body["access_token"]) == 401
    refused = await hub_refresh(client, alice_refreshed["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    assert await hub_user_status(client, bob["access_token"]) == 200
    assert hub.revoke_grant("alice") == 0

    assert hub.revoke_all_tokens() == 1
    assert await hub_user_status(client, bob["access_token"]) == 401
    assert (await hub_refresh(client, bob["refresh_token"])).json()["error"] == "invalid_grant"
    assert {bob["access_token"], bob["refresh_token"]} <= hub.revoked_tokens


# -- failure modes ---------------------------------------------------------------------------


def test_unknown_mode_is_refused() -> None:
    assert check_mode("hang") == "hang"
    with pytest.raises(ValueError, match="unknown endpoint mode"):
        check_mode("slow")


@pytest.mark.parametrize("mode", ["junk", "500"])
async def test_hub_token_endpoint_modes(client: httpx.AsyncClient, hub: MockHub, mode: str) -> None:
    body = await hub_tokens(client)
    hub.token_endpoint_mode = mode  # type: ignore[assignment]
    response = await hub_refresh(client, body["refresh_token"])
    if mode == "junk":
        assert response.status_code == 200 and response.text == JUNK_BODY
        with pytest.raises(ValueError):
            response.json()
    else:
        assert response.status_code == 500 and response.json()["error"] == "server_error"
    assert hub.token_requests[-1].error == f"fault:{mode}" and not hub.token_requests[-1].ok
    # The faulty answer came before any processing: the refresh token still works, once.
    hub.token_endpoint_mode = "ok"
    assert (await hub_refresh(client, body["refresh_token"])).status_code == 200
    assert hub.reuse_detections == 0
    assert hub.refresh_requests == 2


async def test_hub_token_endpoint_hang_is_cancellable(client: httpx.AsyncClient, hub: MockHub) -> None:
    body = await hub_tokens(client)
    hub.token_endpoint_mode = "hang"
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hub_refresh(client, body["refresh_token"]), timeout=0.3)
    assert time.monotonic() - started < 5
    assert hub.token_requests[-1].error == "fault:hang"

    hub.hang_seconds = 0.05  # a bounded hang ends with a 504
    response = await hub_refresh(client, body["refresh_token"])
    assert response.status_code == 504

    hub.token_endpoint_mode = "ok"
    assert (await hub_refresh(client, body["refresh_token"])).status_code == 200


@pytest.mark.parametrize("mode", ["junk", "500", "hang"])
async def test_hub_api_modes(client: httpx.AsyncClient, hub: MockHub, mode: str) -> None:
    body = await hub_tokens(client)
    hub.api_mode = mode  # type: ignore[assignment]
    request = client.get("/mockhub/user", headers=bearer(body["access_token"]))
    if mode == "hang":
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(request, timeout=0.2)
    else:
        response = await request
        if mode == "junk":
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/html")
        else:
            assert response.status_code == 500
    assert hub.user_requests == 1
    hub.api_mode = "ok"
    assert await hub_user_status(client, body["access_token"]) == 200
    assert hub.token_requests[-1].ok  # the token endpoint was not affected


async def test_hang_ends_when_the_client_goes_away_under_uvicorn(tmp_path: Path) -> None:
    app = create_mock_providers_app(make_config(tmp_path / "data"))
    hub: MockHub = app.state.mockhub
    hub.api_mode = hub.token_endpoint_mode = "hang"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        async with httpx.AsyncClient(timeout=0.5) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.get(f"http://127.0.0.1:{port}/mockhub/user")
            with pytest.raises(httpx.ReadTimeout):  # a POST whose body was read first
                await http.post(
                    f"http://127.0.0.1:{port}/mockhub/token",
                    data={"grant_type": "refresh_token", "refresh_token": "mhrt_x"},
                    auth=(HUB_CLIENT_ID, HUB_SECRET),
                )
    finally:
        server.should_exit = True
        # Shutdown waits for running requests: the hang must have ended with the connection.
        await asyncio.wait_for(serving, timeout=5)
        listener.close()
    assert hub.user_requests == 1 and hub.refresh_requests == 1


# -- mockgoogle -----------------------------------------------------------------------------


def google_params(challenge: str, **extra: str) -> dict[str, str]:
    return {
        "response_type": "code",
        "client_id": GOOGLE_CLIENT_ID,
        "redirect_uri": GOOGLE_CALLBACK,
        "scope": "openid email profile",
        "state": "g-state",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }


async def google_tokens(
    client: httpx.AsyncClient, login: str = "alice@example.com", **extra: str
) -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockgoogle/authorize", google_params(challenge, **extra), login=login)
    assert callback["state"] == "g-state" and callback["iss"] == GOOGLE
    token = await client.post(
        "/mockgoogle/token",
        data={
            "grant_type": "authorization_code",
            "code": callback["code"],
            "redirect_uri": GOOGLE_CALLBACK,
            "code_verifier": verifier,
            "client_id": GOOGLE_CLIENT_ID,
            "client_secret": GOOGLE_SECRET,
        },
    )
    assert token.status_code == 200, token.text
    body: dict[str, Any] = token.json()
    return body


async def google_refresh(client: httpx.AsyncClient, refresh_token: str) -> httpx.Response:
    return await client.post(
        "/mockgoogle/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh_token},
        auth=(GOOGLE_CLIENT_ID, GOOGLE_SECRET),
    )


async def verify_id_token(client: httpx.AsyncClient, id_token: str) -> dict[str, Any]:
    discovery = (await client.get("/mockgoogle/.well-known/openid-configuration")).json()
    jwks = (await client.get(discovery["jwks_uri"].removeprefix(BASE))).json()
    header = jwt.get_unverified_header(id_token)
    assert header["alg"] == "RS256" and header["typ"] == "JWT"
    key = jwt.PyJWKSet.from_dict(jwks)[header["kid"]]
    claims: dict[str, Any] = jwt.decode(
        id_token,
        key=key,
        algorithms=["RS256"],
        audience=GOOGLE_CLIENT_ID,
        issuer=discovery["issuer"],
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )
    return claims


async def test_google_discovery_and_jwks(client: httpx.AsyncClient) -> None:
    response = await client.get(
        "/mockgoogle/.well-known/openid-configuration", headers={"Origin": "http://localhost:6274"}
    )
    document = response.json()
    assert response.headers["access-control-allow-origin"] == "*"
    assert document["issuer"] == GOOGLE
    assert document["authorization_endpoint"] == GOOGLE + "/authorize"
    assert document["token_endpoint"] == GOOGLE + "/token"
    assert document["userinfo_endpoint"] == GOOGLE + "/userinfo"
    assert document["revocation_endpoint"] == GOOGLE + "/revoke"
    assert document["jwks_uri"] == GOOGLE + "/jwks.json"
    OpenIDProviderMetadata(document).validate()
    (key,) = (await client.get("/mockgoogle/jwks.json")).json()["keys"]
    assert key["kty"] == "RSA" and key["alg"] == "RS256" and key["use"] == "sig" and key["kid"]
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(key)


async def test_google_id_token_and_userinfo(client: httpx.AsyncClient, google: MockGoogle) -> None:
    body = await google_tokens(client, nonce="n-123", access_type="offline")
    assert body["access_token"].startswith("ya29.") and body["refresh_token"].startswith("1//")
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3599
    assert body["scope"] == "openid email profile"
    claims = await verify_id_token(client, body["id_token"])
    assert claims["iss"] == GOOGLE and claims["aud"] == GOOGLE_CLIENT_ID and claims["azp"] == GOOGLE_CLIENT_ID
    assert claims["sub"].isdigit() and len(claims["sub"]) == 21
    assert claims["email"] == "alice@example.com" and claims["email_verified"] is True
    assert claims["name"] == "Alice" and claims["nonce"] == "n-123" and claims["at_hash"]
    assert google.issued_id_tokens == [body["id_token"]]

    info = await client.get("/mockgoogle/userinfo", headers=bearer(body["access_token"]))
    assert info.status_code == 200
    assert info.json() == {
        "sub": claims["sub"],
        "email": "alice@example.com",
        "email_verified": True,
        "name": "Alice",
    }
    assert google.userinfo_requests == 1
    missing = await client.get("/mockgoogle/userinfo")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="mockgoogle"'

    # The same account always has the same sub; a bare name becomes an address at mockgoogle.test.
    again = await google_tokens(client, login="ALICE@example.com")
    assert (await verify_id_token(client, again["id_token"]))["sub"] == claims["sub"]
    bare = await google_tokens(client, login="bob")
    assert (await verify_id_token(client, bare["id_token"]))["email"] == "bob@mockgoogle.test"


async def test_google_claims_follow_scope(client: httpx.AsyncClient) -> None:
    body = await google_tokens(client, scope="openid")
    claims = await verify_id_token(client, body["id_token"])
    assert "email" not in claims and "name" not in claims
    info = (await client.get("/mockgoogle/userinfo", headers=bearer(body["access_token"]))).json()
    assert set(info) == {"sub"}
    plain = await google_tokens(client, scope="email")
    assert "id_token" not in plain


async def test_google_refresh_token_only_on_first_consent(
    client: httpx.AsyncClient, google: MockGoogle
) -> None:
    online = await google_tokens(client)
    assert "refresh_token" not in online

    first = await google_tokens(client, access_type="offline")
    assert first["refresh_token"].startswith("1//")
    again = await google_tokens(client, access_type="offline")
    assert "refresh_token" not in again and again["access_token"]
    forced = await google_tokens(client, access_type="offline", prompt="consent")
    assert forced["refresh_token"] != first["refresh_token"]
    # Another user's first consent gets one: (client, user) pairs count.
    carol = await google_tokens(client, login="carol@example.com", access_type="offline")
    assert google.issued_refresh_tokens == {
        first["refresh_token"],
        forced["refresh_token"],
        carol["refresh_token"],
    }

    # Google's refresh tokens do not rotate: both stay valid, none comes back.
    for refresh_token in (first["refresh_token"], forced["refresh_token"], first["refresh_token"]):
        response = await google_refresh(client, refresh_token)
        assert response.status_code == 200, response.text
        refreshed = response.json()
        assert "refresh_token" not in refreshed
        claims = await verify_id_token(client, refreshed["id_token"])
        assert claims["email"] == "alice@example.com"
        info = await client.get("/mockgoogle/userinfo", headers=bearer(refreshed["access_token"]))
        assert info.status_code == 200
    assert google.refresh_requests == 3


async def test_google_revoke(client: httpx.AsyncClient, google: MockGoogle) -> None:
    first = await google_tokens(client, access_type="offline")
    refreshed = (await google_refresh(client, first["refresh_token"])).json()
    # No client authentication, token in the query, like Google's.
    revoked = await client.post("/mockgoogle/revoke", params={"token": first["refresh_token"]})
    assert revoked.status_code == 200 and revoked.json() == {}
    for access_token in (first["access_token"], refreshed["access_token"]):
        assert (await client.get("/mockgoogle/userinfo", headers=bearer(access_token))).status_code == 401
    refused = await google_refresh(client, first["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    twice = await client.post("/mockgoogle/revoke", data={"token": first["access_token"]})
    assert twice.status_code == 400 and twice.json()["error"] == "invalid_token"
    assert {first["access_token"], first["refresh_token"], refreshed["access_token"]} <= google.revoked_tokens

    # The grant is gone, so the next offline consent is a first one again.
    renewed = await google_tokens(client, access_type="offline")
    assert renewed["refresh_token"]
    assert google.revoke_grant("alice@example.com") == 2
    assert (await google_refresh(client, renewed["refresh_token"])).json()["error"] == "invalid_grant"
    assert "refresh_token" in await google_tokens(client, access_type="offline")
    assert google.revoke_all_tokens() == 2


async def test_google_pkce_deny_and_login_hint(client: httpx.AsyncClient, google: MockGoogle) -> None:
    _, challenge = pkce_pair()
    params = google_params(challenge, login_hint="dora@example.com")
    callback = await consent(
        client, "/mockgoogle/authorize", params, login="dora@example.com", expect_default="dora@example.com"
    )
    form = {
        "grant_type": "authorization_code",
        "code": callback["code"],
        "redirect_uri": GOOGLE_CALLBACK,
    }
    wrong = await client.post(
        "/mockgoogle/token",
        data={**form, "code_verifier": pkce_pair()[0]},
        auth=(GOOGLE_CLIENT_ID, GOOGLE_SECRET),
    )
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    denied = await consent(
        client, "/mockgoogle/authorize", google_params(challenge), login="x", decision="deny"
    )
    assert denied["error"] == "access_denied" and "code" not in denied
    no_pkce = google_params(challenge)
    del no_pkce["code_challenge"]
    response = await client.get("/mockgoogle/authorize", params=no_pkce)
    assert (
        response.status_code == 302 and query_of(response.headers["location"])["error"] == "invalid_request"
    )
    bad_login = await client.post(
        "/mockgoogle/authorize",
        data={**google_params(challenge), "login": "not an email", "decision": "approve"},
    )
    assert bad_login.status_code == 400 and "location" not in bad_login.headers
    assert [(r.grant_type, r.ok, r.error) for r in google.token_requests] == [
        ("authorization_code", False, "invalid_grant")
    ]


@pytest.mark.parametrize("mode", ["junk", "500", "hang"])
async def test_google_modes(client: httpx.AsyncClient, google: MockGoogle, mode: str) -> None:
    body = await google_tokens(client, access_type="offline")
    google.token_endpoint_mode = google.api_mode = mode  # type: ignore[assignment]
    google.hang_seconds = 0.05
    token = await google_refresh(client, body["refresh_token"])
    info = await client.get("/mockgoogle/userinfo", headers=bearer(body["access_token"]))
    expected = {"junk": 200, "500": 500, "hang": 504}[mode]
    assert token.status_code == info.status_code == expected
    assert google.token_requests[-1].error == f"fault:{mode}"
    google.token_endpoint_mode = google.api_mode = "ok"
    assert (await google_refresh(client, body["refresh_token"])).status_code == 200


# -- mockslack ------------------------------------------------------------------------------


def slack_params(challenge: str, **extra: str) -> dict[str, str]:
    # Slack needs no response_type.
    return {
        "client_id": SLACK_CLIENT_ID,
        "redirect_uri": SLACK_CALLBACK,
        "scope": "commands,chat:write",
        "user_scope": "search:read,users:read",
        "state": "sl-state",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }


async def slack_access(client: httpx.AsyncClient, login: str = "grace", **extra: str) -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockslack/authorize", slack_params(challenge, **extra), login=login)
    assert callback["state"] == "sl-state" and "iss" not in callback
    response = await client.post(
        "/mockslack/oauth.v2.access",
        data={
            "code": callback["code"],
            "redirect_uri": SLACK_CALLBACK,
            "code_verifier": verifier,
            "client_id": SLACK_CLIENT_ID,
            "client_secret": SLACK_SECRET,
        },
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def auth_test(client: httpx.AsyncClient, token: str) -> dict[str, Any]:
    response = await client.post("/mockslack/auth.test", headers=bearer(token))
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


async def test_slack_bot_and_user_tokens(client: httpx.AsyncClient, slack: MockSlack) -> None:
    body = await slack_access(client)
    authed = body["authed_user"]
    assert body["ok"] is True and body["token_type"] == "bot" and body["access_token"].startswith("xoxb-")
    assert body["scope"] == "commands,chat:write" and body["bot_user_id"].startswith("U")
    assert body["team"] == {"id": slack.team_id, "name": slack.team_name} and body["app_id"].startswith("A")
    assert authed["id"].startswith("U") and authed["id"] != body["bot_user_id"]
    assert authed["token_type"] == "user" and authed["access_token"].startswith("xoxp-")
    assert authed["scope"] == "search:read,users:read"
    assert slack.issued_bot_tokens == {body["access_token"]}
    assert slack.issued_user_tokens == {authed["access_token"]}
    assert slack.issued_access_tokens == {body["access_token"], authed["access_token"]}
    assert [(r.grant_type, r.client_id, r.ok) for r in slack.token_requests] == [
        ("authorization_code", SLACK_CLIENT_ID, True)
    ]

    bot = await auth_test(client, body["access_token"])
    assert bot["ok"] is True and bot["user_id"] == body["bot_user_id"] and bot["bot_id"].startswith("B")
    assert bot["team_id"] == slack.team_id
    user_response = await client.get("/mockslack/auth.test", headers=bearer(authed["access_token"]))
    user = user_response.json()
    assert user["ok"] is True and user["user_id"] == authed["id"] and user["user"] == "grace"
    assert user["team_id"] == slack.team_id and "bot_id" not in user
    assert user_response.headers["x-oauth-scopes"] == "search:read,users:read"
    # The token may also come as a parameter; the same user always has the same id.
    as_param = await client.post("/mockslack/auth.test", data={"token": authed["access_token"]})
    assert as_param.json()["user_id"] == authed["id"]
    again = await slack_access(client)
    assert again["authed_user"]["id"] == authed["id"] and again["access_token"] != body["access_token"]
    assert slack.auth_test_requests == 3


async def test_slack_only_user_or_only_bot_scopes(client: httpx.AsyncClient, slack: MockSlack) -> None:
    user_only = await slack_access(client, scope="")
    assert "access_token" not in user_only and "bot_user_id" not in user_only
    assert user_only["authed_user"]["access_token"].startswith("xoxp-")
    bot_only = await slack_access(client, user_scope="")
    assert bot_only["access_token"].startswith("xoxb-")
    assert set(bot_only["authed_user"]) == {"id"}
    assert len(slack.issued_user_tokens) == 1 and len(slack.issued_bot_tokens) == 1

    _, challenge = pkce_pair()
    neither = await client.get(
        "/mockslack/authorize", params=slack_params(challenge, scope="", user_scope="")
    )
    assert neither.status_code == 302
    assert query_of(neither.headers["location"])["error"] == "invalid_scope"


async def test_slack_errors_are_ok_false(client: httpx.AsyncClient, slack: MockSlack) -> None:
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockslack/authorize", slack_params(challenge), login="grace")
    form = {
        "code": callback["code"],
        "redirect_uri": SLACK_CALLBACK,
        "code_verifier": verifier,
        "client_id": SLACK_CLIENT_ID,
    }
    cases = [
        ({**form, "client_secret": "wrong"}, "bad_client_secret"),
        ({**form, "client_id": "nope", "client_secret": SLACK_SECRET}, "invalid_client_id"),
        ({**form, "client_secret": SLACK_SECRET, "redirect_uri": SLACK_CALLBACK + "/x"}, "bad_redirect_uri"),
        ({**form, "client_secret": SLACK_SECRET, "code": "bogus"}, "invalid_code"),
        ({**form, "client_secret": SLACK_SECRET, "grant_type": "password"}, "invalid_grant_type"),
        ({**form, "client_secret": SLACK_SECRET, "code_verifier": ""}, "invalid_code_verifier"),
        ({**form, "client_secret": SLACK_SECRET, "code_verifier": pkce_pair()[0]}, "invalid_code"),
    ]
    for data, error in cases:
        response = await client.post("/mockslack/oauth.v2.access", data=data)
        assert response.status_code == 200 and response.json() == {"ok": False, "error": error}, data
    assert [r.error for r in slack.token_requests] == [error for _, error in cases]
    assert not any(r.ok for r in slack.token_requests)

    assert (await client.post("/mockslack/auth.test")).json() == {"ok": False, "error": "not_authed"}
    bogus = await client.post("/mockslack/auth.test", headers=bearer("xoxb-nope"))
    assert bogus.status_code == 200 and bogus.json() == {"ok": False, "error": "invalid_auth"}


async def test_slack_revoke(client: httpx.AsyncClient, slack: MockSlack) -> None:
    body = await slack_access(client)
    user_token = body["authed_user"]["access_token"]
    dry = await client.post("/mockslack/auth.revoke", data={"token": user_token, "test": "true"})
    assert dry.json() == {"ok": True, "revoked": False}
    assert (await auth_test(client, user_token))["ok"] is True

    revoked = await client.post("/mockslack/auth.revoke", headers=bearer(user_token))
    assert revoked.json() == {"ok": True, "revoked": True}
    assert await auth_test(client, user_token) == {"ok": False, "error": "token_revoked"}
    assert (await auth_test(client, body["access_token"]))["ok"] is True  # the bot token stays
    assert slack.revoked_tokens == {user_token}

    other = await slack_access(client, login="heidi")
    assert slack.revoke_grant("grace") == 1  # grace's bot token; her user token was already revoked
    assert await auth_test(client, body["access_token"]) == {"ok": False, "error": "token_revoked"}
    assert (await auth_test(client, other["access_token"]))["ok"] is True
    assert slack.revoke_all_tokens() == 2
    assert (await auth_test(client, other["authed_user"]["access_token"]))["error"] == "token_revoked"


@pytest.mark.parametrize("mode", ["junk", "500", "hang"])
async def test_slack_modes(client: httpx.AsyncClient, slack: MockSlack, mode: str) -> None:
    body = await slack_access(client)
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockslack/authorize", slack_params(challenge), login="grace")
    slack.token_endpoint_mode = slack.api_mode = mode  # type: ignore[assignment]
    slack.hang_seconds = 0.05
    exchange = {
        "code": callback["code"],
        "redirect_uri": SLACK_CALLBACK,
        "code_verifier": verifier,
        "client_id": SLACK_CLIENT_ID,
        "client_secret": SLACK_SECRET,
    }
    token = await client.post("/mockslack/oauth.v2.access", data=exchange)
    api = await client.post("/mockslack/auth.test", headers=bearer(body["access_token"]))
    expected = {"junk": 200, "500": 500, "hang": 504}[mode]
    assert token.status_code == api.status_code == expected
    if mode == "500":
        assert token.json() == {"ok": False, "error": "internal_error"}
    assert slack.token_requests[-1].error == f"fault:{mode}"
    slack.token_endpoint_mode = slack.api_mode = "ok"
    assert (await client.post("/mockslack/oauth.v2.access", data=exchange)).json()["ok"] is True


# -- configuration -------------------------------------------------------------------------


async def test_optional_providers_are_off_by_default(tmp_path: Path) -> None:
    app = create_mock_providers_app(make_config(tmp_path / "data"))
    assert app.state.mockgoogle is None and app.state.mockslack is None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        assert (await http.get("/mockgoogle/.well-known/openid-configuration")).status_code == 404
        assert (await http.post("/mockslack/oauth.v2.access")).status_code == 404
        assert (await http.get("/.well-known/oauth-authorization-server/mockhub")).status_code == 200
