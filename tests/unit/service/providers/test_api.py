"""One rule reads a provider's JSON answer (`read_json`): the profile fetch and a tool's
`ProviderSession.get_json` refuse the same answers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.errors import ProviderApiError
from service.mcp.provider_session import ProviderSession
from service.providers.api import MAX_PROFILE_BYTES, fetch_userinfo, read_json
from service.providers.catalogue import ProviderConfig, build_provider
from token_store import Connection, ConnectionKey, TokenSet, UserRef

GITHUB = build_provider(
    "github", {"preset": "github", "client_id": "c"}, {"MCPUC_PROVIDER_GITHUB_CLIENT_SECRET": "s"}
)
REFUSED = [
    (httpx.Response(401, json={}), "rejected the token"),
    (httpx.Response(302, headers={"location": "https://api.github.com/elsewhere"}), "answered HTTP 302"),
    (httpx.Response(500, json={}), "answered HTTP 500"),
    (httpx.Response(200, content=b'"' + b"x" * MAX_PROFILE_BYTES + b'"'), "answered HTTP 200"),
    (httpx.Response(200, content=b"<html>"), "not JSON"),
]


def answering(response: httpx.Response) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(lambda request: response))


class Refreshed:
    """A lifecycle whose refresh hands back the same token (so a 401 is answered twice)."""

    async def fresh(self, connection: Connection, provider: ProviderConfig, *, force: bool) -> Connection:
        return connection


def session_answering(provider: ProviderConfig, response: httpx.Response) -> ProviderSession:
    connection = Connection(
        ConnectionKey(UserRef("https://as", "alice"), "github", "1"), TokenSet("t"), "a", 1, 1
    )

    async def reconnect() -> Connection:
        raise AssertionError("not expected")

    lifecycle: Any = Refreshed()
    return ProviderSession(
        connection, provider, lifecycle, answering(response), tool="test", reconnect=reconnect
    )


@pytest.mark.parametrize(("response", "said"), REFUSED)
async def test_the_profile_and_a_tool_refuse_the_same_answers(response: httpx.Response, said: str) -> None:
    with pytest.raises(ProviderApiError, match=said):
        await fetch_userinfo(answering(response), GITHUB, "t")
    with pytest.raises(ProviderApiError, match=said) as raised:
        await session_answering(GITHUB, response).get_json("/user")
    assert raised.value.unauthorized is (response.status_code == 401)


@pytest.mark.parametrize("body", [{"login": "octocat"}, [1, 2], "text"])
async def test_a_tool_may_read_any_json_a_profile_only_an_object(body: Any) -> None:
    response = httpx.Response(200, json=body)
    assert read_json(GITHUB, response) == body
    assert await session_answering(GITHUB, response).get_json("/user") == body
    if isinstance(body, dict):
        assert await fetch_userinfo(answering(response), GITHUB, "t") == body
    else:
        with pytest.raises(ProviderApiError, match="not a JSON object"):
            await fetch_userinfo(answering(response), GITHUB, "t")
