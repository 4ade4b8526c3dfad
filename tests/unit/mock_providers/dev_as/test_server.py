"""mock_providers/dev_as/server.py: the development authorization server, driven over ASGI."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc9207 import AuthorizationServerMetadata as IssMetadata
from authlib.oidc.discovery import OpenIDProviderMetadata
from starlette.applications import Starlette

from mock_providers import (
    NoDevKeys,
    create_mock_providers_app,
    mint_access_token,
)
from tests.support.mock_provider_setup import (
    BASE,
    DCR_CALLBACK,
    LOGIN_CALLBACK,
    LOGIN_CLIENT_ID,
    LOGIN_SECRET,
    MCP_RESOURCE,
    dev_as_login,
    make_config,
    only_form,
    pkce_pair,
    query_of,
)

# -- helpers ---------------------------------------------------------------------------


def verify_jwt(token: str, jwks: dict[str, Any], *, audience: str, typ: str) -> dict[str, Any]:
    header = jwt.get_unverified_header(token)
    assert header["typ"] == typ
    assert header["alg"] == "RS256"
    key = jwt.PyJWKSet.from_dict(jwks)[header["kid"]]
    claims: dict[str, Any] = jwt.decode(
        token,
        key=key,
        algorithms=["RS256"],
        audience=audience,
        issuer=BASE,
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )
    return claims


async def register_public_client(client: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    body = {
        "redirect_uris": [DCR_CALLBACK],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "client_name": "Test MCP client",
        **extra,
    }
    response = await client.post("/register", json=body)
    assert response.status_code == 201, response.text
    registered: dict[str, Any] = response.json()
    return registered


async def dev_login_and_authorize(
    client: httpx.AsyncClient,
    *,
    client_id: str,
    redirect_uri: str,
    username: str = "alice",
    state: str = "state-1",
    **params: str,
) -> tuple[dict[str, str], str]:
    """Walk /authorize -> login page -> /login -> /authorize; returns callback params and verifier."""
    verifier, challenge = pkce_pair()
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **params,
    }
    page = await client.get("/authorize", params=query)
    if page.status_code == 200:
        form = only_form(page.text)
        assert form["action"] == "/login"
        login = await client.post("/login", data={**form["fields"], "username": username})
        assert login.status_code == 303
        page = await client.get(login.headers["location"])
    assert page.status_code == 302, page.text
    location = page.headers["location"]
    assert location.startswith(redirect_uri + "?")
    return query_of(location), verifier


async def dev_token(client: httpx.AsyncClient, **form: str) -> httpx.Response:
    return await client.post("/token", data=form)


# -- dev authorization server ----------------------------------------------------------


async def test_dev_as_metadata_and_discovery(client: httpx.AsyncClient) -> None:
    oauth = (await client.get("/.well-known/oauth-authorization-server")).json()
    oidc = (await client.get("/.well-known/openid-configuration")).json()
    for document in (oauth, oidc):
        assert document["issuer"] == BASE
        assert document["authorization_endpoint"] == BASE + "/authorize"
        assert document["token_endpoint"] == BASE + "/token"
        assert document["registration_endpoint"] == BASE + "/register"
        assert document["jwks_uri"] == BASE + "/jwks.json"
        assert document["userinfo_endpoint"] == BASE + "/userinfo"
        assert document["code_challenge_methods_supported"] == ["S256"]
        assert "none" in document["token_endpoint_auth_methods_supported"]
    AuthorizationServerMetadata(oauth).validate(metadata_classes=[IssMetadata])
    OpenIDProviderMetadata(oidc).validate()


async def test_jwks_is_public_only(client: httpx.AsyncClient) -> None:
    response = await client.get("/jwks.json", headers={"Origin": "http://localhost:6274"})  # a browser client
    (key,) = response.json()["keys"]
    assert key["kty"] == "RSA" and key["alg"] == "RS256" and key["use"] == "sig" and key["kid"]
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(key)
    assert response.headers["access-control-allow-origin"] == "*"


async def test_dcr_public_client_full_flow(client: httpx.AsyncClient) -> None:
    registered = await register_public_client(client)
    assert registered["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in registered
    client_id = registered["client_id"]

    verifier, challenge = pkce_pair()
    page = await client.get(
        "/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": DCR_CALLBACK,
            "state": "s-123",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": "http://127.0.0.1:8000/mcp/other",
            "scope": "mcp:tools",
        },
    )
    assert page.status_code == 200
    assert "development only" in page.text.lower()
    form = only_form(page.text)
    assert form["types"]["username"] == "text"
    assert "password" not in form["types"].values()
    assert '<button type="submit">' in page.text

    login = await client.post("/login", data={**form["fields"], "username": "alice"})
    assert login.status_code == 303
    cookie = login.headers["set-cookie"].lower()
    assert cookie.startswith("devas_session=") and "httponly" in cookie and "samesite=lax" in cookie

    back = await client.get(login.headers["location"])
    assert back.status_code == 302
    callback = query_of(back.headers["location"])
    assert callback["state"] == "s-123" and callback["iss"] == BASE

    token = await dev_token(
        client,
        grant_type="authorization_code",
        code=callback["code"],
        redirect_uri=DCR_CALLBACK,
        client_id=client_id,
        code_verifier=verifier,
        resource="http://127.0.0.1:8000/mcp/other",
    )
    assert token.status_code == 200, token.text
    body = token.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600 and body["refresh_token"]
    assert "id_token" not in body

    jwks = (await client.get("/jwks.json")).json()
    claims = verify_jwt(body["access_token"], jwks, audience="http://127.0.0.1:8000/mcp/other", typ="at+jwt")
    assert claims["sub"] == "alice"
    assert claims["client_id"] == client_id
    assert claims["scope"] == "mcp:tools"
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["jti"]
    assert jwt.get_unverified_header(body["access_token"])["kid"] == jwks["keys"][0]["kid"]

    # The browser stays signed in: the next authorization is immediate (automatic consent).
    again, _ = await dev_login_and_authorize(client, client_id=client_id, redirect_uri=DCR_CALLBACK)
    assert again["code"] != callback["code"]


async def test_default_audience_is_the_mcp_resource(client: httpx.AsyncClient) -> None:
    client_id = (await register_public_client(client))["client_id"]
    callback, verifier = await dev_login_and_authorize(client, client_id=client_id, redirect_uri=DCR_CALLBACK)
    token = await dev_token(
        client,
        grant_type="authorization_code",
        code=callback["code"],
        redirect_uri=DCR_CALLBACK,
        client_id=client_id,
        code_verifier=verifier,
    )
    jwks = (await client.get("/jwks.json")).json()
    claims = verify_jwt(token.json()["access_token"], jwks, audience=MCP_RESOURCE, typ="at+jwt")
    assert claims["sub"] == "alice"


async def test_loopback_redirect_may_change_port(client: httpx.AsyncClient) -> None:
    client_id = (await register_public_client(client))["client_id"]
    callback, _ = await dev_login_and_authorize(
        client, client_id=client_id, redirect_uri="http://127.0.0.1:40001/callback"
    )
    assert callback["code"]


async def test_openid_login_client_gets_id_token_with_nonce(client: httpx.AsyncClient) -> None:
    callback, verifier = await dev_login_and_authorize(
        client,
        client_id=LOGIN_CLIENT_ID,
        redirect_uri=LOGIN_CALLBACK,
        username="bob",
        scope="openid",
        nonce="n-0S6_WzA2Mj",
    )
    token = await client.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": callback["code"],
            "redirect_uri": LOGIN_CALLBACK,
            "code_verifier": verifier,
        },
        auth=(LOGIN_CLIENT_ID, LOGIN_SECRET),
    )
    assert token.status_code == 200, token.text
    body = token.json()
    jwks = (await client.get("/jwks.json")).json()
    id_claims = verify_jwt(body["id_token"], jwks, audience=LOGIN_CLIENT_ID, typ="JWT")
    assert id_claims["sub"] == "bob"
    assert id_claims["nonce"] == "n-0S6_WzA2Mj"
    assert abs(id_claims["auth_time"] - time.time()) < 60
    assert id_claims["exp"] > id_claims["iat"]

    info = await client.get("/userinfo", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert info.status_code == 200
    assert info.json() == {"sub": "bob"}

    no_token = await client.get("/userinfo")
    assert no_token.status_code == 401 and no_token.headers["www-authenticate"] == "Bearer"
    id_as_access = await client.get("/userinfo", headers={"Authorization": f"Bearer {body['id_token']}"})
    assert id_as_access.status_code == 401


async def test_login_client_may_use_client_secret_post(client: httpx.AsyncClient) -> None:
    callback, verifier = await dev_login_and_authorize(
        client, client_id=LOGIN_CLIENT_ID, redirect_uri=LOGIN_CALLBACK, scope="openid"
    )
    common = {
        "grant_type": "authorization_code",
        "code": callback["code"],
        "redirect_uri": LOGIN_CALLBACK,
        "code_verifier": verifier,
        "client_id": LOGIN_CLIENT_ID,
    }
    without_secret = await dev_token(client, **common)
    assert without_secret.status_code == 401
    assert without_secret.json()["error"] == "invalid_client"
    with_secret = await dev_token(client, **common, client_secret=LOGIN_SECRET)
    assert with_secret.status_code == 200, with_secret.text
    assert "id_token" in with_secret.json()


async def test_missing_or_plain_pkce_is_rejected(client: httpx.AsyncClient) -> None:
    client_id = (await register_public_client(client))["client_id"]
    await dev_as_login(client, "alice", "")
    base = {"response_type": "code", "client_id": client_id, "redirect_uri": DCR_CALLBACK, "state": "x"}
    for extra in (
        {},
        {"code_challenge": "a" * 43, "code_challenge_method": "plain"},
        {"code_challenge": "a" * 43},
    ):
        response = await client.get("/authorize", params={**base, **extra})
        assert response.status_code == 302
        params = query_of(response.headers["location"])
        assert params["error"] == "invalid_request" and params["state"] == "x" and params["iss"] == BASE
        assert "code" not in params


async def test_dev_as_wrong_verifier_and_code_reuse(client: httpx.AsyncClient) -> None:
    client_id = (await register_public_client(client))["client_id"]
    callback, verifier = await dev_login_and_authorize(client, client_id=client_id, redirect_uri=DCR_CALLBACK)
    form = {
        "grant_type": "authorization_code",
        "code": callback["code"],
        "redirect_uri": DCR_CALLBACK,
        "client_id": client_id,
    }
    missing = await dev_token(client, **form)
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    wrong = await dev_token(client, **form, code_verifier=pkce_pair()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    assert (await dev_token(client, **form, code_verifier=verifier)).status_code == 200
    reuse = await dev_token(client, **form, code_verifier=verifier)
    assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"


async def test_dev_as_refresh_rotates(client: httpx.AsyncClient) -> None:
    client_id = (await register_public_client(client))["client_id"]
    callback, verifier = await dev_login_and_authorize(
        client, client_id=client_id, redirect_uri=DCR_CALLBACK, resource=MCP_RESOURCE
    )
    first = (
        await dev_token(
            client,
            grant_type="authorization_code",
            code=callback["code"],
            redirect_uri=DCR_CALLBACK,
            client_id=client_id,
            code_verifier=verifier,
        )
    ).json()
    refreshed = await dev_token(
        client, grant_type="refresh_token", refresh_token=first["refresh_token"], client_id=client_id
    )
    assert refreshed.status_code == 200, refreshed.text
    second = refreshed.json()
    assert second["refresh_token"] != first["refresh_token"]
    jwks = (await client.get("/jwks.json")).json()
    claims = verify_jwt(second["access_token"], jwks, audience=MCP_RESOURCE, typ="at+jwt")
    assert claims["sub"] == "alice"
    other_resource = await dev_token(
        client,
        grant_type="refresh_token",
        refresh_token=second["refresh_token"],
        client_id=client_id,
        resource="https://elsewhere.example/mcp",
    )
    assert other_resource.status_code == 400 and other_resource.json()["error"] == "invalid_target"
    # The rotated-out token is refused, and its reuse revokes the grant's current one too.
    old = await dev_token(
        client, grant_type="refresh_token", refresh_token=first["refresh_token"], client_id=client_id
    )
    assert old.status_code == 400 and old.json()["error"] == "invalid_grant"
    current = await dev_token(
        client, grant_type="refresh_token", refresh_token=second["refresh_token"], client_id=client_id
    )
    assert current.status_code == 400 and current.json()["error"] == "invalid_grant"


async def test_dev_as_bad_client_or_redirect_is_a_page_not_a_redirect(client: httpx.AsyncClient) -> None:
    client_id = (await register_public_client(client))["client_id"]
    _, challenge = pkce_pair()
    base = {"response_type": "code", "code_challenge": challenge, "code_challenge_method": "S256"}
    for params in (
        {"client_id": client_id, "redirect_uri": "https://attacker.example/cb"},
        {"client_id": "no-such-client", "redirect_uri": DCR_CALLBACK},
    ):
        response = await client.get("/authorize", params={**base, **params})
        assert response.status_code == 400
        assert "location" not in response.headers
        assert response.headers["content-type"].startswith("text/html")


async def test_dev_as_escapes_client_supplied_text(client: httpx.AsyncClient) -> None:
    client_id = (await register_public_client(client, client_name="<script>alert(1)</script>"))["client_id"]
    _, challenge = pkce_pair()
    page = await client.get(
        "/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": DCR_CALLBACK,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "scope": '"><img src=x>',
        },
    )
    assert page.status_code == 200
    assert "<script>" not in page.text and "<img" not in page.text
    assert "&lt;script&gt;" in page.text


async def test_prompt_none_without_login_and_prompt_login_with_one(client: httpx.AsyncClient) -> None:
    _, challenge = pkce_pair()
    params = {
        "response_type": "code",
        "client_id": LOGIN_CLIENT_ID,
        "redirect_uri": LOGIN_CALLBACK,
        "scope": "openid",
        "state": "p",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    silent = await client.get("/authorize", params={**params, "prompt": "none"})
    assert silent.status_code == 302
    assert query_of(silent.headers["location"])["error"] == "login_required"

    await dev_as_login(client, "alice", "")
    forced = await client.get("/authorize", params={**params, "prompt": "login"})
    assert forced.status_code == 200
    return_to = only_form(forced.text)["fields"]["return_to"]
    assert return_to.startswith("/authorize?") and "prompt" not in return_to
    relogin = await dev_as_login(client, "erin", return_to)
    done = await client.get(relogin.headers["location"])
    assert done.status_code == 302 and "code" in query_of(done.headers["location"])


async def test_max_age_asks_for_the_login_again_once_exceeded(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    _, challenge = pkce_pair()
    params = {
        "response_type": "code",
        "client_id": LOGIN_CLIENT_ID,
        "redirect_uri": LOGIN_CALLBACK,
        "scope": "openid profile email",
        "state": "m",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "max_age": "60",
    }
    await dev_as_login(client, "alice", "")
    start = time.time()
    app.state.dev_as.clock = lambda: start + 30
    recent = await client.get("/authorize", params=params)
    assert recent.status_code == 302 and "code" in query_of(recent.headers["location"])
    app.state.dev_as.clock = lambda: start + 120
    stale = await client.get("/authorize", params=params)
    assert stale.status_code == 200
    return_to = only_form(stale.text)["fields"]["return_to"]
    assert "max_age" not in return_to  # signing in satisfies it
    done = await client.get((await dev_as_login(client, "alice", return_to)).headers["location"])
    assert done.status_code == 302 and "code" in query_of(done.headers["location"])


async def test_login_form_needs_its_own_token(client: httpx.AsyncClient) -> None:
    """Login CSRF: a POST without this browser's login-page token signs nobody in."""
    for data in ({}, {"csrf": ""}, {"csrf": "A" * 43}):
        refused = await client.post("/login", data={"username": "mallory", "return_to": "", **data})
        assert refused.status_code == 403
    _, challenge = pkce_pair()
    params = {
        "response_type": "code",
        "client_id": LOGIN_CLIENT_ID,
        "redirect_uri": LOGIN_CALLBACK,
        "scope": "openid",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    assert (await client.get("/authorize", params=params)).status_code == 200  # still the login form
    assert (await dev_as_login(client, "alice", "")).status_code == 200  # with the token: signed in


async def test_cors_preflight_on_machine_endpoints(client: httpx.AsyncClient) -> None:
    for path in ("/register", "/token", "/.well-known/oauth-authorization-server"):
        response = await client.options(
            path, headers={"Origin": "http://localhost:6274", "Access-Control-Request-Method": "POST"}
        )
        assert response.status_code == 200  # Starlette's CORSMiddleware: a preflight is 200 OK
        assert response.headers["access-control-allow-origin"] == "*"
        assert "POST" in response.headers["access-control-allow-methods"]
    metadata = await client.get(
        "/.well-known/oauth-authorization-server", headers={"Origin": "http://localhost:6274"}
    )
    assert metadata.headers["access-control-allow-origin"] == "*"
    page = await client.get("/login")
    assert "access-control-allow-origin" not in page.headers
    assert page.headers["x-frame-options"] == "DENY"


async def test_login_rejects_bad_usernames_and_foreign_return_to(client: httpx.AsyncClient) -> None:
    bad = await dev_as_login(client, "", "")
    assert bad.status_code == 400
    elsewhere = await dev_as_login(client, "alice", "https://evil.example/")
    assert elsewhere.status_code == 200 and "location" not in elsewhere.headers


async def test_registration_requires_redirect_uris(client: httpx.AsyncClient) -> None:
    response = await client.post("/register", json={"token_endpoint_auth_method": "none"})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_redirect_uri"
    confidential = await client.post("/register", json={"redirect_uris": [DCR_CALLBACK]})
    assert confidential.status_code == 201
    assert confidential.json()["client_secret"]


async def test_mint_access_token_verifies_like_token_endpoint(
    client: httpx.AsyncClient, data_dir: Path
) -> None:
    jwks = (await client.get("/jwks.json")).json()
    token = mint_access_token(data_dir, "carol")
    claims = verify_jwt(token, jwks, audience=MCP_RESOURCE, typ="at+jwt")
    assert claims["sub"] == "carol" and claims["client_id"] == "dev-token"
    assert claims["exp"] - claims["iat"] == 3600 and claims["jti"]

    other = mint_access_token(
        data_dir, "carol", audience="https://x.example/mcp", lifetime=60, client_id="cli"
    )
    claims = verify_jwt(other, jwks, audience="https://x.example/mcp", typ="at+jwt")
    assert claims["exp"] - claims["iat"] == 60 and claims["client_id"] == "cli"


def test_mint_access_token_without_keys(tmp_path: Path) -> None:
    with pytest.raises(NoDevKeys, match=r"dev-as\.json"):
        mint_access_token(tmp_path, "carol")


async def test_key_persists_across_app_instances(data_dir: Path) -> None:
    first = create_mock_providers_app(make_config(data_dir))
    second = create_mock_providers_app(make_config(data_dir))
    assert stat.S_IMODE(os.stat(data_dir / "dev-as.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    jwks = []
    for app in (first, second):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
            jwks.append((await http.get("/jwks.json")).json())
    assert jwks[0] == jwks[1]
    token = mint_access_token(data_dir, "dave")
    verify_jwt(token, jwks[1], audience=MCP_RESOURCE, typ="at+jwt")

    moved = create_mock_providers_app(make_config(data_dir, mcp_resource="http://127.0.0.1:9000/mcp"))
    assert moved.state.dev_as.keys.kid == first.state.dev_as.keys.kid
    verify_jwt(
        mint_access_token(data_dir, "dave"), jwks[0], audience="http://127.0.0.1:9000/mcp", typ="at+jwt"
    )


def test_non_loopback_http_base_url_is_refused(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="loopback"):
        create_mock_providers_app(make_config(data_dir, base_url="http://dev.example:8001"))
