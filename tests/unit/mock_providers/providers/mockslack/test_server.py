"""mock_providers/providers/mockslack/server.py: MockSlack's bot and user tokens, scopes, ok:false errors and
revocation, over ASGI."""

from __future__ import annotations

import httpx

from mock_providers import (
    MockSlack,
)
from tests.support.mock_provider_setup import (
    SLACK_CALLBACK,
    SLACK_CLIENT_ID,
    SLACK_SECRET,
    auth_test,
    bearer,
    consent,
    pkce_pair,
    query_of,
    slack_access,
    slack_params,
)


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
