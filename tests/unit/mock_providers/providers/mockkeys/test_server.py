"""mock_providers.providers.mockkeys.server: the API-key service under /mockkeys, driven over ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from mock_providers import ClientSpec, MockKeys, MockProvidersConfig, create_mock_providers_app
from mock_providers.providers.mockkeys.server import KEY_PREFIX, MockKeysAccount

BASE = "http://127.0.0.1:8001"


def make_config(data_dir: Path) -> MockProvidersConfig:
    return MockProvidersConfig(
        base_url=BASE,
        data_dir=data_dir,
        mcp_resource="http://127.0.0.1:8000/mcp",
        login_client=ClientSpec(
            "login", "login-secret-0123456789", ("http://127.0.0.1:8000/login/callback",)
        ),
        mockhub_client=ClientSpec(
            "hub", "hub-secret-0123456789", ("http://127.0.0.1:8000/callback/mockhub",)
        ),
    )


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, MockKeys]]:
    app = create_mock_providers_app(make_config(tmp_path / "data"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client, app.state.mockkeys


async def me(client: httpx.AsyncClient, key: str | None) -> httpx.Response:
    return await client.get("/mockkeys/me", headers={} if key is None else {"X-API-Key": key})


def test_served_without_configuration(tmp_path: Path) -> None:
    config = make_config(tmp_path / "data")
    app = create_mock_providers_app(config)
    assert isinstance(app.state.mockkeys, MockKeys)
    assert config.mockkeys_url == BASE + "/mockkeys"


async def test_issued_key_names_its_account(served: tuple[httpx.AsyncClient, MockKeys]) -> None:
    client, keys = served
    key = keys.issue("octocat")
    assert key.startswith(KEY_PREFIX)
    assert len(key) > 40
    assert key in keys.issued_keys
    answer = await me(client, key)
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "no-store"
    body = answer.json()
    assert body == {"id": MockKeysAccount.for_login("octocat").id, "login": "octocat"}
    assert key not in answer.text
    assert (keys.me_requests, keys.rejected_requests) == (1, 0)


async def test_ids_are_stable_per_login_and_distinct_across_logins(
    served: tuple[httpx.AsyncClient, MockKeys],
) -> None:
    client, keys = served
    first, second, other = keys.issue("alice"), keys.issue("Alice"), keys.issue("bob")
    assert len({first, second, other}) == 3  # a new key every time
    ids = [(await me(client, k)).json()["id"] for k in (first, second, other)]
    assert ids[0] == ids[1] != ids[2]
    assert MockKeysAccount.for_login("alice") == MockKeysAccount(ids[0], "alice")


@pytest.mark.parametrize("presented", [None, "", "mk_not-a-key", "Bearer mk_whatever"])
async def test_unknown_or_missing_key_is_401(
    served: tuple[httpx.AsyncClient, MockKeys], presented: str | None
) -> None:
    client, keys = served
    keys.issue("octocat")
    answer = await me(client, presented)
    assert answer.status_code == 401
    assert answer.json() == {"error": "invalid_api_key"}
    assert "X-API-Key" in answer.headers["www-authenticate"]
    assert (keys.me_requests, keys.rejected_requests) == (1, 1)


async def test_key_in_another_header_is_refused(served: tuple[httpx.AsyncClient, MockKeys]) -> None:
    client, keys = served
    key = keys.issue("octocat")
    answer = await client.get("/mockkeys/me", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 401


async def test_revoked_key_is_refused(served: tuple[httpx.AsyncClient, MockKeys]) -> None:
    client, keys = served
    key, kept = keys.issue("octocat"), keys.issue("octocat")
    assert keys.revoke(key) is True
    assert keys.revoke(key) is False
    assert key in keys.revoked_keys
    assert (await me(client, key)).status_code == 401
    assert (await me(client, kept)).status_code == 200


async def test_reset_counters(served: tuple[httpx.AsyncClient, MockKeys]) -> None:
    client, keys = served
    await me(client, "nope-nope")
    keys.reset_counters()
    assert (keys.me_requests, keys.rejected_requests) == (0, 0)


@pytest.mark.parametrize(("mode", "status"), [("500", 500), ("junk", 200)])
async def test_api_mode_faults(served: tuple[httpx.AsyncClient, MockKeys], mode: str, status: int) -> None:
    client, keys = served
    key = keys.issue("octocat")
    keys.api_mode = mode  # type: ignore[assignment]
    answer = await me(client, key)
    assert answer.status_code == status
    assert "login" not in answer.text
    assert keys.me_requests == 1
    keys.api_mode = "ok"
    assert (await me(client, key)).status_code == 200


async def test_hang_ends_after_hang_seconds(served: tuple[httpx.AsyncClient, MockKeys]) -> None:
    client, keys = served
    key = keys.issue("octocat")
    keys.api_mode, keys.hang_seconds = "hang", 0.05
    answer = await me(client, key)
    assert answer.status_code == 504


async def test_unknown_mode_raises(served: tuple[httpx.AsyncClient, MockKeys]) -> None:
    client, keys = served
    keys.api_mode = "slow"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="unknown endpoint mode"):
        await me(client, keys.issue("octocat"))


def test_issue_refuses_empty_or_long_login() -> None:
    keys = MockKeys()
    for login in ("", "x" * 65):
        with pytest.raises(ValueError):
            keys.issue(login)
    assert keys.issued_keys == set()


async def test_a_route_the_test_adds_is_answered_for_a_live_key(
    served: tuple[httpx.AsyncClient, MockKeys],
) -> None:
    client, keys = served
    keys.api.route("GET", "/projects", handler=lambda request: [{"owner": request.owner.login}])
    key = keys.issue("alice")
    answer = await client.get("/mockkeys/projects", headers={"X-API-Key": key})
    assert answer.status_code == 200 and answer.json() == [{"owner": "alice"}]
    keys.revoke(key)
    refused = await client.get("/mockkeys/projects", headers={"X-API-Key": key})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == 'ApiKey header="X-API-Key"'
