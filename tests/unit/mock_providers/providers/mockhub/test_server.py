"""mock_providers/providers/mockhub/server.py: MockHub's OAuth (authorization, consent, token, refresh
rotation,
revocation) and its API, over ASGI."""

from __future__ import annotations

import time

import httpx
import pytest
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc9207 import AuthorizationServerMetadata as IssMetadata

from mock_providers import (
    MockHub,
)
from tests.support.mock_provider_setup import (
    HUB,
    HUB_CALLBACK,
    HUB_CLIENT_ID,
    HUB_SECRET,
    bearer,
    dev_as_login,
    hub_refresh,
    hub_tokens,
    hub_user_status,
    only_form,
    pkce_pair,
    query_of,
)


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


def hub_authorize_params(challenge: str, **extra: str) -> dict[str, str]:
    return {
        "response_type": "code",
        "client_id": HUB_CLIENT_ID,
        "redirect_uri": HUB_CALLBACK,
        "scope": "read:user repo",
        "state": "hub-state",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }


async def hub_consent(
    client: httpx.AsyncClient, *, decision: str = "approve", login: str = "octocat", **extra: str
) -> tuple[dict[str, str], str]:
    """GET the consent page, submit it; returns the callback parameters and the PKCE verifier."""
    verifier, challenge = pkce_pair()
    page = await client.get("/mockhub/authorize", params=hub_authorize_params(challenge, **extra))
    assert page.status_code == 200, page.text
    form = only_form(page.text)
    assert form["action"] == "/mockhub/authorize"
    assert form["fields"]["login"] == "octocat"
    assert sorted(form["buttons"]) == [("decision", "approve"), ("decision", "deny")]
    response = await client.post(
        "/mockhub/authorize", data={**form["fields"], "login": login, "decision": decision}
    )
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(HUB_CALLBACK + "?")
    return query_of(location), verifier


async def hub_exchange(
    client: httpx.AsyncClient, code: str, verifier: str, *, redirect_uri: str = HUB_CALLBACK
) -> httpx.Response:
    return await client.post(
        "/mockhub/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        },
        auth=(HUB_CLIENT_ID, HUB_SECRET),
    )


async def test_mockhub_metadata(client: httpx.AsyncClient) -> None:
    document = (await client.get("/.well-known/oauth-authorization-server/mockhub")).json()
    assert document["issuer"] == HUB
    assert document["authorization_endpoint"] == HUB + "/authorize"
    assert document["token_endpoint"] == HUB + "/token"
    assert document["revocation_endpoint"] == HUB + "/revoke"
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert document["authorization_response_iss_parameter_supported"] is True
    AuthorizationServerMetadata(document).validate(metadata_classes=[IssMetadata])


async def test_mockhub_approve_token_user(client: httpx.AsyncClient, hub: MockHub) -> None:
    callback, verifier = await hub_consent(client, login="monalisa")
    assert set(callback) == {"code", "state", "iss"}
    assert callback["state"] == "hub-state" and callback["iss"] == HUB

    token = await hub_exchange(client, callback["code"], verifier)
    assert token.status_code == 200, token.text
    body = token.json()
    assert body["access_token"].startswith("mhat_") and body["refresh_token"].startswith("mhrt_")
    assert body["expires_in"] == 28800 and body["scope"] == "read:user repo"
    assert hub.issued_access_tokens == {body["access_token"]}
    assert hub.issued_refresh_tokens == {body["refresh_token"]}

    user = await client.get("/mockhub/user", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert user.status_code == 200
    info = user.json()
    assert info["login"] == "monalisa" and info["scopes"] == ["read:user", "repo"] and info["name"]
    assert isinstance(info["id"], int)

    again, verifier2 = await hub_consent(client, login="monalisa")
    body2 = (await hub_exchange(client, again["code"], verifier2)).json()
    info2 = (
        await client.get("/mockhub/user", headers={"Authorization": f"Bearer {body2['access_token']}"})
    ).json()
    assert info2["id"] == info["id"]

    assert [(r.grant_type, r.client_id, r.ok) for r in hub.token_requests] == [
        ("authorization_code", HUB_CLIENT_ID, True),
        ("authorization_code", HUB_CLIENT_ID, True),
    ]
    assert hub.user_requests == 2


async def test_mockhub_client_secret_post_and_bad_secret(client: httpx.AsyncClient, hub: MockHub) -> None:
    callback, verifier = await hub_consent(client)
    form = {
        "grant_type": "authorization_code",
        "code": callback["code"],
        "redirect_uri": HUB_CALLBACK,
        "code_verifier": verifier,
        "client_id": HUB_CLIENT_ID,
    }
    bad = await client.post("/mockhub/token", data={**form, "client_secret": "wrong"})
    assert bad.status_code in (400, 401) and bad.json()["error"] == "invalid_client"
    good = await client.post("/mockhub/token", data={**form, "client_secret": HUB_SECRET})
    assert good.status_code == 200
    assert [(r.ok, r.error) for r in hub.token_requests] == [(False, "invalid_client"), (True, None)]
    assert all(r.client_id == HUB_CLIENT_ID for r in hub.token_requests)


async def test_mockhub_deny(client: httpx.AsyncClient, hub: MockHub) -> None:
    callback, _ = await hub_consent(client, decision="deny")
    assert callback["error"] == "access_denied"
    assert callback["state"] == "hub-state" and callback["iss"] == HUB
    assert "code" not in callback
    assert hub.issued_access_tokens == set()


async def test_mockhub_code_is_single_use(client: httpx.AsyncClient, hub: MockHub) -> None:
    callback, verifier = await hub_consent(client)
    assert (await hub_exchange(client, callback["code"], verifier)).status_code == 200
    reuse = await hub_exchange(client, callback["code"], verifier)
    assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"
    assert [r.ok for r in hub.token_requests] == [True, False]
    assert hub.token_requests[-1].error == "invalid_grant"


async def test_mockhub_wrong_verifier(client: httpx.AsyncClient) -> None:
    callback, _ = await hub_consent(client)
    wrong = await hub_exchange(client, callback["code"], pkce_pair()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"


async def test_mockhub_token_redirect_uri_must_match(client: httpx.AsyncClient) -> None:
    callback, verifier = await hub_consent(client)
    other = await hub_exchange(client, callback["code"], verifier, redirect_uri=HUB_CALLBACK + "/x")
    assert other.status_code == 400 and other.json()["error"] == "invalid_grant"


async def test_mockhub_bad_redirect_or_client_is_a_400_page(client: httpx.AsyncClient) -> None:
    _, challenge = pkce_pair()
    for extra in (
        {"redirect_uri": HUB_CALLBACK + "/other"},
        {"redirect_uri": HUB_CALLBACK.replace("127.0.0.1", "localhost")},
        {"redirect_uri": "https://attacker.example/cb"},
        {"client_id": "unknown"},
    ):
        params = hub_authorize_params(challenge, **extra)
        for response in (
            await client.get("/mockhub/authorize", params=params),
            await client.post("/mockhub/authorize", data={**params, "login": "x", "decision": "approve"}),
        ):
            assert response.status_code == 400
            assert "location" not in response.headers
            assert response.headers["content-type"].startswith("text/html")


async def test_mockhub_requires_s256_pkce(client: httpx.AsyncClient) -> None:
    params = hub_authorize_params("x")
    del params["code_challenge"], params["code_challenge_method"]
    response = await client.get("/mockhub/authorize", params=params)
    assert response.status_code == 302
    assert query_of(response.headers["location"]) == {
        "error": "invalid_request",
        "error_description": "PKCE is required: missing 'code_challenge'.",
        "state": "hub-state",
        "iss": HUB,
    }


async def test_mockhub_refresh_rotation(client: httpx.AsyncClient, hub: MockHub) -> None:
    # Reuse then leaves the rest of the grant alone (the default revokes it all:
    # see test_mock_providers_lifecycle.py).
    hub.revoke_grant_on_reuse = False
    callback, verifier = await hub_consent(client)
    first = (await hub_exchange(client, callback["code"], verifier)).json()

    async def refresh(refresh_token: str) -> httpx.Response:
        return await client.post(
            "/mockhub/token",
            data={"grant_type": "refresh_token", "refresh_token": refresh_token},
            auth=(HUB_CLIENT_ID, HUB_SECRET),
        )

    second = await refresh(first["refresh_token"])
    assert second.status_code == 200, second.text
    rotated = second.json()
    assert rotated["refresh_token"].startswith("mhrt_") and rotated["refresh_token"] != first["refresh_token"]
    assert rotated["access_token"] != first["access_token"] and rotated["scope"] == "read:user repo"
    stale = await refresh(first["refresh_token"])
    assert stale.status_code == 400 and stale.json()["error"] == "invalid_grant"
    assert (await refresh(rotated["refresh_token"])).status_code == 200
    assert hub.reuse_detections == 1
    assert [(r.grant_type, r.ok) for r in hub.token_requests] == [
        ("authorization_code", True),
        ("refresh_token", True),
        ("refresh_token", False),
        ("refresh_token", True),
    ]
    assert len(hub.issued_refresh_tokens) == 3 and len(hub.issued_access_tokens) == 3


@pytest.mark.parametrize(("mode", "expected"), [("correct", HUB), ("omit", None), ("wrong", "WRONG")])
async def test_mockhub_iss_mode(
    client: httpx.AsyncClient, hub: MockHub, mode: str, expected: str | None
) -> None:
    hub.iss_mode = mode  # type: ignore[assignment]
    for decision in ("approve", "deny"):
        callback, _ = await hub_consent(client, decision=decision)
        if expected is None:
            assert "iss" not in callback
        elif expected == "WRONG":
            assert callback["iss"] == hub.wrong_issuer and callback["iss"] != HUB
        else:
            assert callback["iss"] == expected


async def test_mockhub_user_requires_valid_token(client: httpx.AsyncClient, hub: MockHub) -> None:
    missing = await client.get("/mockhub/user")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="mockhub"'
    assert missing.json()["error"]
    bogus = await client.get("/mockhub/user", headers={"Authorization": "Bearer mhat_nope"})
    assert bogus.status_code == 401 and "invalid_token" in bogus.headers["www-authenticate"]


async def test_mockhub_ttl_knob_and_expiry(client: httpx.AsyncClient, hub: MockHub) -> None:
    hub.access_token_ttl = 120
    callback, verifier = await hub_consent(client)
    body = (await hub_exchange(client, callback["code"], verifier)).json()
    assert body["expires_in"] == 120
    headers = {"Authorization": f"Bearer {body['access_token']}"}
    assert (await client.get("/mockhub/user", headers=headers)).status_code == 200
    start = time.time()
    hub.clock = lambda: start + 121
    assert (await client.get("/mockhub/user", headers=headers)).status_code == 401


async def test_mockhub_revoke(client: httpx.AsyncClient, hub: MockHub) -> None:
    callback, verifier = await hub_consent(client)
    body = (await hub_exchange(client, callback["code"], verifier)).json()
    revoked = await client.post(
        "/mockhub/revoke",
        data={"token": body["refresh_token"], "token_type_hint": "refresh_token"},
        auth=(HUB_CLIENT_ID, HUB_SECRET),
    )
    assert revoked.status_code == 200
    assert {body["access_token"], body["refresh_token"]} <= hub.revoked_tokens
    user = await client.get("/mockhub/user", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert user.status_code == 401
    refresh = await client.post(
        "/mockhub/token",
        data={"grant_type": "refresh_token", "refresh_token": body["refresh_token"]},
        auth=(HUB_CLIENT_ID, HUB_SECRET),
    )
    assert refresh.status_code == 400
    unauthenticated = await client.post("/mockhub/revoke", data={"token": body["access_token"]})
    assert unauthenticated.status_code in (400, 401)


async def test_mockhub_consent_page_validates_login_and_escapes(client: httpx.AsyncClient) -> None:
    _, challenge = pkce_pair()
    params = hub_authorize_params(challenge, state='"><script>x</script>')
    page = await client.get("/mockhub/authorize", params=params)
    assert page.status_code == 200 and "<script>" not in page.text
    bad_login = await client.post(
        "/mockhub/authorize", data={**params, "login": "-bad-", "decision": "approve"}
    )
    assert bad_login.status_code == 400 and "location" not in bad_login.headers
    no_decision = await client.post("/mockhub/authorize", data={**params, "login": "octocat"})
    assert no_decision.status_code == 400 and "location" not in no_decision.headers


async def test_mockhub_consent_prefills_a_login_from_the_dev_as_user(
    client: httpx.AsyncClient,
) -> None:
    _, challenge = pkce_pair()
    params = hub_authorize_params(challenge)
    anonymous = only_form((await client.get("/mockhub/authorize", params=params)).text)
    assert anonymous["fields"]["login"] == "octocat"
    await dev_as_login(client, "alice", "")
    signed_in = only_form((await client.get("/mockhub/authorize", params=params)).text)
    assert signed_in["fields"]["login"] == "alice-hub"
    await dev_as_login(client, "erin.o_neil@example", "")
    odd = only_form((await client.get("/mockhub/authorize", params=params)).text)
    assert odd["fields"]["login"] == "erin-o-neil-example-hub"
