"""The HTTP under a pooled session: the user's token to the downstream's origin only."""

from __future__ import annotations

import httpx2
import pytest

from service.mcp.gateway.transport import (
    DownstreamOriginRefused,
    DownstreamTransport,
    UserToken,
    require_downstream_origin,
)

URL = "https://mcp.example/mcp"


def test_only_the_downstream_origin_is_allowed() -> None:
    require_downstream_origin("https://mcp.example/mcp?x=1", URL)
    for other in ("https://evil.example/mcp", "http://mcp.example/mcp", "https://mcp.example:444/mcp"):
        with pytest.raises(DownstreamOriginRefused):
            require_downstream_origin(other, URL)


async def test_a_request_elsewhere_never_leaves_with_the_token() -> None:
    sent: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})

    token = UserToken("user-token")
    async with httpx2.AsyncClient(
        transport=DownstreamTransport(httpx2.MockTransport(handler), URL), auth=token
    ) as http:
        answered = await http.post(URL, json={})
        assert answered.status_code == 401
        assert sent[0].headers["Authorization"] == "Bearer user-token"
        challenge = token.take_challenge()
        assert challenge is not None and challenge.status == 401 and challenge.error == "invalid_token"
        assert token.take_challenge() is None
        with pytest.raises(DownstreamOriginRefused):
            await http.post("https://evil.example/collect", json={})
        # No standing GET stream: answered here, nothing sent.
        assert (await http.get(URL)).status_code == 405
    assert len(sent) == 1
