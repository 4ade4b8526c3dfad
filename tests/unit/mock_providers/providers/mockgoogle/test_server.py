"""mock_providers/providers/mockgoogle/server.py: MockGoogle's discovery, ID tokens, userinfo, refresh and
revocation, over ASGI."""

from __future__ import annotations

import httpx
from authlib.oidc.discovery import OpenIDProviderMetadata

from mock_providers import (
    MockGoogle,
)
from tests.support.mock_provider_setup import (
    GOOGLE,
    GOOGLE_CALLBACK,
    GOOGLE_CLIENT_ID,
    GOOGLE_SECRET,
    bearer,
    consent,
    google_params,
    google_refresh,
    google_tokens,
    pkce_pair,
    query_of,
    verify_id_token,
)


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
