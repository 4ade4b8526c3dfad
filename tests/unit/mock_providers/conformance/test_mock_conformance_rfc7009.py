"""RFC 7009 (token revocation) conformance of the mock providers, over HTTP.

MockHub's ``/mockhub/revoke`` is RFC 7009's endpoint. MockGoogle's ``/mockgoogle/revoke`` is
Google's (no client authentication, ``400 invalid_token`` for an unknown token); its tests assert
that documented deviation. The dev AS has no revocation endpoint and does not advertise one;
MockSlack has Slack's ``auth.revoke`` (docs/mock-providers.md, "Conformance").
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.mock_conformance import (
    MOCKGOOGLE,
    MOCKHUB,
    MOCKSLACK,
    api_status,
    assert_oauth_error,
    exchange_code,
    obtain_code,
    obtain_tokens,
    refresh,
)
from tests.support.mock_provider_setup import BASE

HUB_REVOKE = "/mockhub/revoke"
GOOGLE_REVOKE = "/mockgoogle/revoke"


async def hub_revoke(http: httpx.AsyncClient, token: str, hint: str | None = None) -> httpx.Response:
    form = {"token": token}
    if hint is not None:
        form["token_type_hint"] = hint
    return await http.post(HUB_REVOKE, data=form, auth=(MOCKHUB.client_id, MOCKHUB.client_secret))


async def hub_refresh_ok(http: httpx.AsyncClient, refresh_token: str) -> dict[str, Any]:
    response = await refresh(http, MOCKHUB, refresh_token)
    assert response.status_code == 200, response.status_code
    body: dict[str, Any] = response.json()
    return body


# -- MockHub: RFC 7009 --------------------------------------------------------------------------


async def test_metadata_advertises_the_revocation_endpoint(http: httpx.AsyncClient) -> None:
    """RFC 8414 §2 / RFC 7009 §4: where it is and how the client authenticates there."""
    metadata = (await http.get("/.well-known/oauth-authorization-server/mockhub")).json()
    assert metadata["revocation_endpoint"] == BASE + HUB_REVOKE
    assert metadata["revocation_endpoint_auth_methods_supported"] == [
        "client_secret_basic",
        "client_secret_post",
    ]


@pytest.mark.parametrize("hint", [None, "access_token", "refresh_token"])
async def test_unknown_token_is_200(http: httpx.AsyncClient, hint: str | None) -> None:
    """§2.2: invalid tokens do not cause an error response (nothing to learn by probing)."""
    response = await hub_revoke(http, "mhat_" + "x" * 40, hint)
    assert response.status_code == 200, response.status_code


@pytest.mark.parametrize("kind", ["access_token", "refresh_token"])
@pytest.mark.parametrize("hint", [None, "access_token", "refresh_token"])
async def test_either_token_revokes_with_any_hint(
    http: httpx.AsyncClient, kind: str, hint: str | None
) -> None:
    """§2.1: the hint is only a hint; a wrong one must not stop the revocation. Revoking either
    token of a pair revokes both (§2.1: the server MAY revoke the refresh token with an access
    token, and SHOULD revoke the access tokens with a refresh token)."""
    tokens = await obtain_tokens(http, MOCKHUB)
    response = await hub_revoke(http, tokens[kind], hint)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    assert await api_status(http, MOCKHUB, tokens["access_token"]) == 401
    assert_oauth_error(await refresh(http, MOCKHUB, tokens["refresh_token"]), "invalid_grant")
    # Revoking again is still fine (§2.2: already invalid).
    assert (await hub_revoke(http, tokens[kind], hint)).status_code == 200


@pytest.mark.parametrize("hint", ["id_token", "bogus"])
async def test_unknown_hint_value_is_ignored(http: httpx.AsyncClient, hint: str) -> None:
    """§2.1: the hint only helps the lookup, and the server searches all its token types anyway.
    ``unsupported_token_type`` (§2.2.1) is for a token the server cannot revoke, which MockHub's
    tokens never are: an unknown hint is ignored and the token revoked."""
    tokens = await obtain_tokens(http, MOCKHUB)
    response = await hub_revoke(http, tokens["access_token"], hint)
    assert response.status_code == 200, response.status_code
    assert await api_status(http, MOCKHUB, tokens["access_token"]) == 401


@pytest.mark.parametrize("auth", ["none", "wrong-basic", "wrong-post", "client-id-only"])
async def test_client_authentication_is_required(http: httpx.AsyncClient, auth: str) -> None:
    """§2.1: the server first validates the client credentials; the token stays valid."""
    tokens = await obtain_tokens(http, MOCKHUB)
    form = {"token": tokens["access_token"]}
    if auth == "wrong-basic":
        response = await http.post(HUB_REVOKE, data=form, auth=(MOCKHUB.client_id, "wrong"))
        assert_oauth_error(response, "invalid_client", 401)
        assert response.headers["www-authenticate"].startswith("Basic ")
    else:
        if auth == "wrong-post":
            form.update(client_id=MOCKHUB.client_id, client_secret="wrong")
        elif auth == "client-id-only":
            form["client_id"] = MOCKHUB.client_id
        response = await http.post(HUB_REVOKE, data=form)
        assert response.status_code in (400, 401)
        assert_oauth_error(response, "invalid_client", response.status_code)
    assert await api_status(http, MOCKHUB, tokens["access_token"]) == 200


async def test_missing_token_is_invalid_request(http: httpx.AsyncClient) -> None:
    response = await http.post(HUB_REVOKE, data={}, auth=(MOCKHUB.client_id, MOCKHUB.client_secret))
    assert_oauth_error(response, "invalid_request")


async def test_revoking_a_refresh_token_revokes_every_access_token_of_its_grant(
    http: httpx.AsyncClient,
) -> None:
    """§2.1: "If the particular token is a refresh token and the authorization server supports the
    revocation of access tokens, then the authorization server SHOULD also invalidate all access
    tokens based on the same authorization grant" -- including those issued before a rotation."""
    first = await obtain_tokens(http, MOCKHUB)
    other = await obtain_tokens(http, MOCKHUB, login="bob")
    second = await hub_refresh_ok(http, first["refresh_token"])
    third = await hub_refresh_ok(http, second["refresh_token"])
    for body in (first, second, third):
        assert await api_status(http, MOCKHUB, body["access_token"]) == 200

    assert (await hub_revoke(http, third["refresh_token"], "refresh_token")).status_code == 200
    for body in (first, second, third):
        assert await api_status(http, MOCKHUB, body["access_token"]) == 401
    assert_oauth_error(await refresh(http, MOCKHUB, third["refresh_token"]), "invalid_grant")
    # Another grant is untouched.
    assert await api_status(http, MOCKHUB, other["access_token"]) == 200
    await hub_refresh_ok(http, other["refresh_token"])


async def test_revoking_an_access_token_leaves_other_grants(http: httpx.AsyncClient) -> None:
    mine = await obtain_tokens(http, MOCKHUB)
    other = await obtain_tokens(http, MOCKHUB, login="bob")
    assert (await hub_revoke(http, mine["access_token"])).status_code == 200
    assert await api_status(http, MOCKHUB, mine["access_token"]) == 401
    assert await api_status(http, MOCKHUB, other["access_token"]) == 200


# -- MockGoogle: Google's revocation --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["access_token", "refresh_token"])
async def test_google_revocation_revokes_the_grant(http: httpx.AsyncClient, kind: str) -> None:
    tokens = await obtain_tokens(http, MOCKGOOGLE)
    other = await obtain_tokens(http, MOCKGOOGLE, login="bob")
    response = await http.post(GOOGLE_REVOKE, data={"token": tokens[kind]})
    assert response.status_code == 200
    assert await api_status(http, MOCKGOOGLE, tokens["access_token"]) == 401
    assert_oauth_error(await refresh(http, MOCKGOOGLE, tokens["refresh_token"]), "invalid_grant")
    assert await api_status(http, MOCKGOOGLE, other["access_token"]) == 200


async def test_google_revocation_deviations(http: httpx.AsyncClient) -> None:
    """Deviation (Google's endpoint): no client authentication; the token may be in the query;
    an unknown or already revoked token is ``400 invalid_token``, not 200."""
    tokens = await obtain_tokens(http, MOCKGOOGLE)
    unknown = await http.post(GOOGLE_REVOKE, data={"token": "ya29.unknown"})
    assert (unknown.status_code, unknown.json()["error"]) == (400, "invalid_token")
    by_query = await http.get(GOOGLE_REVOKE, params={"token": tokens["access_token"]})
    assert by_query.status_code == 200
    again = await http.post(GOOGLE_REVOKE, data={"token": tokens["refresh_token"]})
    assert (again.status_code, again.json()["error"]) == (400, "invalid_token")


# -- the dev AS and MockSlack --------------------------------------------------------------------


async def test_dev_as_advertises_no_revocation_endpoint(http: httpx.AsyncClient) -> None:
    metadata = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert "revocation_endpoint" not in metadata
    assert (await http.post("/revoke", data={"token": "x"})).status_code in (404, 405)


async def test_slack_auth_revoke_revokes_the_one_token(http: httpx.AsyncClient) -> None:
    """Deviation (Slack's ``auth.revoke``): the token authenticates itself; one token per call."""
    code, verifier = await obtain_code(http, MOCKSLACK)
    body = (await exchange_code(http, MOCKSLACK, code, verifier)).json()
    bot, user = body["access_token"], body["authed_user"]["access_token"]
    revoked = await http.post("/mockslack/auth.revoke", headers={"Authorization": f"Bearer {bot}"})
    assert revoked.json() == {"ok": True, "revoked": True}
    bot_test = await http.post("/mockslack/auth.test", headers={"Authorization": f"Bearer {bot}"})
    assert bot_test.json() == {"ok": False, "error": "token_revoked"}
    user_test = await http.post("/mockslack/auth.test", headers={"Authorization": f"Bearer {user}"})
    assert user_test.json()["ok"] is True
