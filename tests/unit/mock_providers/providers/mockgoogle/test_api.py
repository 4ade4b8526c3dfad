"""mock_providers/providers/mockgoogle/api.py: Drive's files.list as MockGoogle stands in for it,
over ASGI: pages by pageToken, Google's scope check and error objects, MockGoogle's token check."""

from __future__ import annotations

from typing import Any

import httpx

from mock_providers import MockGoogle
from tests.support.mock_provider_setup import bearer, google_tokens

DRIVE = "https://www.googleapis.com/auth/drive.readonly"


async def all_pages(client: httpx.AsyncClient, headers: dict[str, str], size: int) -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = []
    params: dict[str, Any] = {"pageSize": size}
    while True:
        response = await client.get("/mockgoogle/drive/v3/files", params=params, headers=headers)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        if "nextPageToken" not in pages[-1]:
            return pages
        params["pageToken"] = pages[-1]["nextPageToken"]


async def test_files_list_pages_by_page_token(client: httpx.AsyncClient, google: MockGoogle) -> None:
    google.api.set_file_count("alice@example.com", 250)
    issued = await google_tokens(client, scope=f"openid email {DRIVE}")
    pages = await all_pages(client, bearer(issued["access_token"]), 100)
    assert [len(p["files"]) for p in pages] == [100, 100, 50]
    assert {p["kind"] for p in pages} == {"drive#fileList"} and pages[0]["incompleteSearch"] is False
    ids = [f["id"] for p in pages for f in p["files"]]
    assert len(set(ids)) == 250
    assert set(pages[0]["files"][0]) == {"kind", "mimeType", "id", "name"}
    others = await google_tokens(client, login="bob", scope=DRIVE)
    assert len((await all_pages(client, bearer(others["access_token"]), 100))[0]["files"]) == 5  # the default


async def test_google_refuses_as_google_does(client: httpx.AsyncClient, google: MockGoogle) -> None:
    no_drive = await google_tokens(client)
    refused = await client.get("/mockgoogle/drive/v3/files", headers=bearer(no_drive["access_token"]))
    assert refused.status_code == 403 and refused.json()["error"]["status"] == "PERMISSION_DENIED"
    assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]
    issued = await google_tokens(client, scope=DRIVE)
    headers = bearer(issued["access_token"])
    bad = await client.get("/mockgoogle/drive/v3/files?pageToken=bogus", headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["errors"][0]["location"] == "pageToken"
    google.expire_access_tokens()
    expired = await client.get("/mockgoogle/drive/v3/files", headers=headers)
    assert expired.status_code == 401 and expired.json()["error"]["status"] == "UNAUTHENTICATED"
    assert 'error="invalid_token"' in expired.headers["www-authenticate"]


async def test_throttle_and_routes_of_the_test(client: httpx.AsyncClient, google: MockGoogle) -> None:
    issued = await google_tokens(client, scope=DRIVE)
    headers = bearer(issued["access_token"])
    google.api.throttle(retry_after=7)
    limited = await client.get("/mockgoogle/drive/v3/files", headers=headers)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"
    assert limited.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    route = google.api.route("GET", "/calendar/v3/users/me/calendarList", json={"items": []})
    assert (await client.get("/mockgoogle/calendar/v3/users/me/calendarList", headers=headers)).json() == {
        "items": []
    }
    assert route.calls[0].owner.login == "alice@example.com"
    unknown = await client.get("/mockgoogle/gmail/v1/users/me/messages", headers=headers)
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
