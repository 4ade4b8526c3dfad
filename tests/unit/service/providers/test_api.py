"""One rule reads a provider's JSON answer (`read_json`), for the profile fetch and a tool's calls
alike, and one says what a failed answer was (`answer_error`): its status, when to retry, and the
provider's own short message with no token in it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from service.errors import ProviderApiError
from service.providers.api import (
    MAX_PROFILE_BYTES,
    MAX_PROVIDER_MESSAGE_CHARS,
    answer_error,
    fetch_userinfo,
    read_json,
)
from service.providers.catalogue import build_provider

GITHUB = build_provider(
    "github", {"preset": "github", "client_id": "c"}, {"MCPUC_PROVIDER_GITHUB_CLIENT_SECRET": "s"}
)
TOKEN = "gho_16C7e42F292c6912E7710c838347Ae178B4a"
REFUSED = [
    (httpx.Response(401, json={}), "rejected the token", 401),
    (httpx.Response(302, headers={"location": "https://api.github.com/elsewhere"}), "answered HTTP 302", 302),
    (httpx.Response(500, json={}), "answered HTTP 500", 500),
    (
        httpx.Response(200, content=b'"' + b"x" * MAX_PROFILE_BYTES + b'"'),
        f"larger than {MAX_PROFILE_BYTES} bytes",
        200,
    ),
    (httpx.Response(200, content=b"<html>"), "not JSON", 200),
]


def answering(response: httpx.Response) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(lambda request: response))


@pytest.mark.parametrize(("response", "said", "status"), REFUSED)
async def test_the_profile_refuses_these_answers_naming_the_status(
    response: httpx.Response, said: str, status: int
) -> None:
    with pytest.raises(ProviderApiError, match=said) as raised:
        await fetch_userinfo(answering(response), GITHUB, "t")
    assert (raised.value.provider, raised.value.status) == ("github", status)


@pytest.mark.parametrize("body", [{"login": "octocat"}, [1, 2], "text"])
async def test_any_json_reads_but_a_profile_is_an_object(body: Any) -> None:
    response = httpx.Response(200, json=body)
    assert read_json(GITHUB, response) == body
    if isinstance(body, dict):
        assert await fetch_userinfo(answering(response), GITHUB, "t") == body
    else:
        with pytest.raises(ProviderApiError, match="not a JSON object"):
            await fetch_userinfo(answering(response), GITHUB, "t")


def test_an_empty_answer_reads_as_none() -> None:
    assert read_json(GITHUB, httpx.Response(204)) is None


def test_an_api_answer_is_read_up_to_the_callers_limit() -> None:
    page = httpx.Response(200, content=json.dumps([{"name": "x" * 1000}] * 600).encode())  # ~600 kB
    assert len(read_json(GITHUB, page, limit=GITHUB.api_max_answer_bytes)) == 600
    with pytest.raises(ProviderApiError, match=f"larger than {MAX_PROFILE_BYTES} bytes"):
        read_json(GITHUB, page)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"message": "Validation Failed", "errors": [{"field": "title"}]}, "Validation Failed"),  # GitHub
        ({"error": {"code": 404, "message": "File not found: 1x2y."}}, "File not found: 1x2y."),  # Google
        ({"ok": False, "error": "channel_not_found"}, "channel_not_found"),  # Slack
        ({"error": "invalid_request", "error_description": "bad cursor"}, "invalid_request"),
    ],
)
def test_the_providers_own_message_is_kept(body: dict[str, Any], said: str) -> None:
    error = answer_error(GITHUB, httpx.Response(422, json=body), (TOKEN,), now=0)
    assert str(error) == f"GitHub answered HTTP 422: {said}"
    assert (error.status, error.retry_after, error.reconnect) == (422, None, False)


def test_the_providers_message_never_carries_the_token_and_stays_short() -> None:
    echoed = f"Bad credentials for\x00 Authorization: Bearer {TOKEN}\n" + "y" * 5000
    error = answer_error(GITHUB, httpx.Response(403, json={"message": echoed}), (TOKEN, "refresh-1"), now=0)
    text = str(error)
    assert TOKEN not in text and TOKEN[:20] not in text
    assert "Bearer [redacted]" in text
    assert "\x00" not in text and "\n" not in text
    assert len(text) <= len("GitHub answered HTTP 403: ") + MAX_PROVIDER_MESSAGE_CHARS


def test_a_body_that_is_not_json_is_never_quoted() -> None:
    error = answer_error(GITHUB, httpx.Response(500, text=f"<html>stack trace {TOKEN}</html>"), (), now=0)
    assert str(error) == "GitHub answered HTTP 500"


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"),
    [
        (429, {"Retry-After": "30"}, 30.0),
        (429, {"Retry-After": "Thu, 01 Jan 1970 00:02:00 GMT"}, 120.0 - 100),
        (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "400"}, 300.0),
        (403, {"Retry-After": "60"}, 60.0),  # GitHub's secondary rate limit
        (503, {"Retry-After": "5"}, 5.0),
        (429, {}, None),
        (403, {"X-RateLimit-Remaining": "12", "X-RateLimit-Reset": "400"}, None),
        (500, {"Retry-After": "5"}, None),
        (429, {"Retry-After": "99999999999999999999"}, None),
        (429, {"Retry-After": "soon"}, None),
    ],
)
def test_when_to_retry_is_read_from_the_answer(
    status: int, headers: dict[str, str], retry_after: float | None
) -> None:
    error = answer_error(GITHUB, httpx.Response(status, headers=headers), (), now=100)
    assert error.retry_after == retry_after
    assert error.status == status
