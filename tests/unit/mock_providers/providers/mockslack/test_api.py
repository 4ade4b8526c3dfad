"""mock_providers/providers/mockslack/api.py: Slack's Web API as MockSlack stands in for it, over
ASGI: conversations.list by cursor, chat.postMessage, Slack's errors and rate limit."""

from __future__ import annotations

import httpx

from mock_providers import MockSlack
from tests.support.mock_provider_setup import bearer, slack_access


async def user_token(client: httpx.AsyncClient, user_scope: str = "channels:read,chat:write") -> str:
    body = await slack_access(client, user_scope=user_scope)
    token: str = body["authed_user"]["access_token"]
    return token


async def test_conversations_list_pages_by_cursor(client: httpx.AsyncClient, slack: MockSlack) -> None:
    slack.api.channel_count = 250
    headers = bearer(await user_token(client))
    names: list[str] = []
    cursor = ""
    sizes = []
    while True:
        answer = (
            await client.get(
                "/mockslack/conversations.list", params={"limit": 100, "cursor": cursor}, headers=headers
            )
        ).json()
        assert answer["ok"] is True, answer
        sizes.append(len(answer["channels"]))
        names += [c["name"] for c in answer["channels"]]
        cursor = answer["response_metadata"]["next_cursor"]
        if not cursor:
            break
    assert sizes == [100, 100, 50] and names[:3] == ["general", "random", "project-003"]
    assert len(set(names)) == 250
    posted = await client.post("/mockslack/conversations.list", data={"limit": "2"}, headers=headers)
    assert len(posted.json()["channels"]) == 2  # arguments in a form body too
    bad = await client.get("/mockslack/conversations.list?cursor=nope", headers=headers)
    assert bad.json() == {"ok": False, "error": "invalid_cursor"}


async def test_chat_post_message(client: httpx.AsyncClient, slack: MockSlack) -> None:
    headers = bearer(await user_token(client))
    sent = await client.post(
        "/mockslack/chat.postMessage", json={"channel": "#general", "text": "hi"}, headers=headers
    )
    body = sent.json()
    assert sent.status_code == 200 and body["ok"] is True, body
    [message] = slack.api.messages
    assert (message.text, message.channel, body["ts"]) == ("hi", body["channel"], message.ts)
    assert body["message"]["user"] == message.user
    nowhere = await client.post(
        "/mockslack/chat.postMessage", json={"channel": "nope", "text": "hi"}, headers=headers
    )
    assert nowhere.json() == {"ok": False, "error": "channel_not_found"}
    empty = await client.post(
        "/mockslack/chat.postMessage", data={"channel": body["channel"]}, headers=headers
    )
    assert empty.json() == {"ok": False, "error": "no_text"}


async def test_slack_refuses_as_slack_does(client: httpx.AsyncClient, slack: MockSlack) -> None:
    reader = bearer(await user_token(client, user_scope="users:read"))
    missing = (
        await client.post(
            "/mockslack/chat.postMessage", json={"channel": "general", "text": "x"}, headers=reader
        )
    ).json()
    assert missing == {
        "ok": False,
        "error": "missing_scope",
        "needed": "chat:write",
        "provided": "users:read",
    }
    assert (await client.get("/mockslack/conversations.list")).json() == {"ok": False, "error": "not_authed"}
    slack.revoke_all_tokens()
    assert (await client.get("/mockslack/conversations.list", headers=reader)).json()[
        "error"
    ] == "token_revoked"
    headers = bearer(await user_token(client))
    slack.api.throttle(retry_after=30)
    limited = await client.get("/mockslack/conversations.list", headers=headers)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "30"
    assert limited.json() == {"ok": False, "error": "ratelimited"}
    unknown = await client.get("/mockslack/users.list", headers=headers)
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_method"
    slack.api.route("GET", "/users.list", json={"ok": True, "members": []})
    assert (await client.get("/mockslack/users.list", headers=headers)).json() == {"ok": True, "members": []}
