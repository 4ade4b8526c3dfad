"""mock_providers/faults.py: the failure knobs (token endpoint and API modes, hangs) of MockHub,
MockGoogle and MockSlack, over ASGI."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from mock_providers import (
    MockGoogle,
    MockHub,
    MockSlack,
    create_mock_providers_app,
)
from mock_providers.faults import JUNK_BODY, check_mode
from tests.support.mock_provider_setup import (
    HUB_CLIENT_ID,
    HUB_SECRET,
    SLACK_CALLBACK,
    SLACK_CLIENT_ID,
    SLACK_SECRET,
    bearer,
    consent,
    google_refresh,
    google_tokens,
    hub_refresh,
    hub_tokens,
    hub_user_status,
    make_config,
    pkce_pair,
    slack_access,
    slack_params,
)

# -- mockhub ---------------------------------------------------------------------------


def test_unknown_mode_is_refused() -> None:
    assert check_mode("hang") == "hang"
    with pytest.raises(ValueError, match="unknown endpoint mode"):
        check_mode("slow")


@pytest.mark.parametrize("mode", ["junk", "500"])
async def test_hub_token_endpoint_modes(client: httpx.AsyncClient, hub: MockHub, mode: str) -> None:
    body = await hub_tokens(client)
    hub.token_endpoint_mode = mode  # type: ignore[assignment]
    response = await hub_refresh(client, body["refresh_token"])
    if mode == "junk":
        assert response.status_code == 200 and response.text == JUNK_BODY
        with pytest.raises(ValueError):
            response.json()
    else:
        assert response.status_code == 500 and response.json()["error"] == "server_error"
    assert hub.token_requests[-1].error == f"fault:{mode}" and not hub.token_requests[-1].ok
    # The faulty answer came before any processing: the refresh token still works, once.
    hub.token_endpoint_mode = "ok"
    assert (await hub_refresh(client, body["refresh_token"])).status_code == 200
    assert hub.reuse_detections == 0
    assert hub.refresh_requests == 2


async def test_hub_token_endpoint_hang_is_cancellable(client: httpx.AsyncClient, hub: MockHub) -> None:
    body = await hub_tokens(client)
    hub.token_endpoint_mode = "hang"
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hub_refresh(client, body["refresh_token"]), timeout=0.3)
    assert time.monotonic() - started < 5
    assert hub.token_requests[-1].error == "fault:hang"

    hub.hang_seconds = 0.05  # a bounded hang ends with a 504
    response = await hub_refresh(client, body["refresh_token"])
    assert response.status_code == 504

    hub.token_endpoint_mode = "ok"
    assert (await hub_refresh(client, body["refresh_token"])).status_code == 200


@pytest.mark.parametrize("mode", ["junk", "500", "hang"])
async def test_hub_api_modes(client: httpx.AsyncClient, hub: MockHub, mode: str) -> None:
    body = await hub_tokens(client)
    hub.api_mode = mode  # type: ignore[assignment]
    request = client.get("/mockhub/user", headers=bearer(body["access_token"]))
    if mode == "hang":
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(request, timeout=0.2)
    else:
        response = await request
        if mode == "junk":
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/html")
        else:
            assert response.status_code == 500
    assert hub.user_requests == 1
    hub.api_mode = "ok"
    assert await hub_user_status(client, body["access_token"]) == 200
    assert hub.token_requests[-1].ok  # the token endpoint was not affected


async def test_hang_ends_when_the_client_goes_away_under_uvicorn(tmp_path: Path) -> None:
    app = create_mock_providers_app(make_config(tmp_path / "data"))
    hub: MockHub = app.state.mockhub
    hub.api_mode = hub.token_endpoint_mode = "hang"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        async with httpx.AsyncClient(timeout=0.5) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.get(f"http://127.0.0.1:{port}/mockhub/user")
            with pytest.raises(httpx.ReadTimeout):  # a POST whose body was read first
                await http.post(
                    f"http://127.0.0.1:{port}/mockhub/token",
                    data={"grant_type": "refresh_token", "refresh_token": "mhrt_x"},
                    auth=(HUB_CLIENT_ID, HUB_SECRET),
                )
    finally:
        server.should_exit = True
        # Shutdown waits for running requests: the hang must have ended with the connection.
        await asyncio.wait_for(serving, timeout=5)
        listener.close()
    assert hub.user_requests == 1 and hub.refresh_requests == 1


# -- mockgoogle -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["junk", "500", "hang"])
async def test_google_modes(client: httpx.AsyncClient, google: MockGoogle, mode: str) -> None:
    body = await google_tokens(client, access_type="offline")
    google.token_endpoint_mode = google.api_mode = mode  # type: ignore[assignment]
    google.hang_seconds = 0.05
    token = await google_refresh(client, body["refresh_token"])
    info = await client.get("/mockgoogle/userinfo", headers=bearer(body["access_token"]))
    expected = {"junk": 200, "500": 500, "hang": 504}[mode]
    assert token.status_code == info.status_code == expected
    assert google.token_requests[-1].error == f"fault:{mode}"
    google.token_endpoint_mode = google.api_mode = "ok"
    assert (await google_refresh(client, body["refresh_token"])).status_code == 200


# -- mockslack ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["junk", "500", "hang"])
async def test_slack_modes(client: httpx.AsyncClient, slack: MockSlack, mode: str) -> None:
    body = await slack_access(client)
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockslack/authorize", slack_params(challenge), login="grace")
    slack.token_endpoint_mode = slack.api_mode = mode  # type: ignore[assignment]
    slack.hang_seconds = 0.05
    exchange = {
        "code": callback["code"],
        "redirect_uri": SLACK_CALLBACK,
        "code_verifier": verifier,
        "client_id": SLACK_CLIENT_ID,
        "client_secret": SLACK_SECRET,
    }
    token = await client.post("/mockslack/oauth.v2.access", data=exchange)
    api = await client.post("/mockslack/auth.test", headers=bearer(body["access_token"]))
    expected = {"junk": 200, "500": 500, "hang": 504}[mode]
    assert token.status_code == api.status_code == expected
    if mode == "500":
        assert token.json() == {"ok": False, "error": "internal_error"}
    assert slack.token_requests[-1].error == f"fault:{mode}"
    slack.token_endpoint_mode = slack.api_mode = "ok"
    assert (await client.post("/mockslack/oauth.v2.access", data=exchange)).json()["ok"] is True
