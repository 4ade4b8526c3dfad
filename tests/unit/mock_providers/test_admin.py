"""The admin endpoint of every mock provider (`GET`/`POST /_admin/<provider>`, mock_providers/admin.py)
and the `mock-providers` command's knob options: knobs set all-or-nothing, actions, counters without
token strings; only a direct loopback client (peer, Host, no proxy headers) gets an answer."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from mock_providers import ClientSpec, create_mock_providers_app
from mock_providers.admin import admin_path
from service.ops import cli
from service.ops.cli import serving
from tests.support.mock_provider_setup import BASE, HUB_CLIENT_ID, HUB_SECRET, make_config

GOOGLE = ClientSpec("admin.apps.mockgoogle.test", "google-secret-0123456789", ("http://127.0.0.1:8000/cb/g",))
SLACK = ClientSpec("1.2", "slack-secret-0123456789", ("http://127.0.0.1:8000/cb/s",))


def full_app(tmp_path: Path, **overrides: Any) -> Starlette:
    config = make_config(tmp_path / "data", mockgoogle_client=GOOGLE, mockslack_client=SLACK, **overrides)
    return create_mock_providers_app(config)


@contextlib.asynccontextmanager
async def admin(
    app: Starlette, peer: str = "127.0.0.1", base_url: str = BASE
) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as http:
        yield http


async def test_each_provider_reports_its_knobs_and_counters(tmp_path: Path) -> None:
    app = full_app(tmp_path)
    async with admin(app) as http:
        for name in ("mockhub", "mockgoogle", "mockslack", "mockkeys"):
            answer = await http.get(admin_path(name))
            assert answer.status_code == 200, name
            assert answer.headers["cache-control"] == "no-store"
            body = answer.json()
            assert body["knobs"]["api_mode"] == "ok" and set(body) == {"knobs", "counters"}
            assert all(isinstance(value, int) for value in body["counters"].values()), name
        hub = (await http.get(admin_path("mockhub"))).json()["knobs"]
        assert hub["access_token_ttl"] == 28800 and hub["rotate_refresh_tokens"] is True
        assert (await http.get(admin_path("mockslack"))).json()["knobs"]["team_id"] == "T0MOCKTEAM"
        assert (await http.get(admin_path("dev_as"))).status_code == 404
        assert (await http.get(admin_path("nothing"))).status_code == 404


async def test_knobs_are_set_all_or_nothing(tmp_path: Path) -> None:
    app = full_app(tmp_path)
    hub, google, slack = app.state.mockhub, app.state.mockgoogle, app.state.mockslack
    async with admin(app) as http:
        knobs = {
            "token_endpoint_mode": "500",
            "iss_mode": "omit",
            "access_token_ttl": 60,
            "rotate_refresh_tokens": False,
            "revoke_grant_on_reuse": False,
            "refresh_token_lifetime": 600,
            "hang_seconds": 1.5,
        }
        answer = await http.post(admin_path("mockhub"), json=knobs)
        assert answer.status_code == 200, answer.text
        assert {name: answer.json()["knobs"][name] for name in knobs} == knobs
        assert (hub.token_endpoint_mode, hub.iss_mode, hub.access_token_ttl) == ("500", "omit", 60)
        assert (hub.rotate_refresh_tokens, hub.revoke_grant_on_reuse, hub.refresh_token_lifetime) == (
            False,
            False,
            600,
        )
        # The faults really apply: /mockhub/token answers 500.
        token = await http.post("/mockhub/token", data={"grant_type": "refresh_token", "refresh_token": "x"})
        assert token.status_code == 500

        for bad in (
            {"api_mode": "500", "iss_mode": "sideways"},  # one bad value: nothing is set
            {"api_mode": "500", "no_such_knob": 1},
            {"access_token_ttl": 0},
            {"access_token_ttl": True},
            {"rotate_refresh_tokens": "yes"},
            {"hang_seconds": -1},
        ):
            refused = await http.post(admin_path("mockhub"), json=bad)
            assert refused.status_code == 400 and refused.json()["error"] == "invalid_request", bad
        assert hub.api_mode == "ok" and hub.iss_mode == "omit"

        assert (await http.post(admin_path("mockgoogle"), json={"iss_mode": "wrong"})).status_code == 200
        assert google.iss_mode == "wrong"
        assert (
            await http.post(admin_path("mockgoogle"), json={"rotate_refresh_tokens": False})
        ).status_code == 400
        assert (await http.post(admin_path("mockslack"), json={"team_name": "Acme"})).status_code == 200
        assert slack.team_name == "Acme"
        assert (await http.post(admin_path("mockslack"), json={"iss_mode": "omit"})).status_code == 400
        assert (await http.post(admin_path("mockkeys"), json={"api_mode": "junk"})).status_code == 200
        assert app.state.mockkeys.api_mode == "junk"
        assert (await http.post(admin_path("mockhub"), json=["not", "an", "object"])).status_code == 400
        json_type = {"Content-Type": "application/json; charset=utf-8"}
        broken = await http.post(admin_path("mockhub"), content=b"{not json", headers=json_type)
        assert broken.status_code == 400


async def test_actions_expire_and_revoke(tmp_path: Path) -> None:
    app = full_app(tmp_path)
    hub = app.state.mockhub
    issued = {"access_token": "mhat_" + "a" * 40, "refresh_token": "mhrt_" + "r" * 40, "scope": "read:user"}
    hub.store_token(dict(issued), HUB_CLIENT_ID, "octocat")
    bearer = {"Authorization": f"Bearer {issued['access_token']}"}
    refresh = {"grant_type": "refresh_token", "refresh_token": issued["refresh_token"]}
    async with admin(app) as http:
        assert (await http.get("/mockhub/user", headers=bearer)).status_code == 200
        answer = await http.post(admin_path("mockhub"), json={"action": "expire_access_tokens"})
        assert answer.status_code == 200 and "result" not in answer.json()
        assert (await http.get("/mockhub/user", headers=bearer)).status_code == 401
        await http.post(admin_path("mockhub"), json={"action": "expire_refresh_tokens"})
        refused = await http.post("/mockhub/token", data=refresh, auth=(HUB_CLIENT_ID, HUB_SECRET))
        assert refused.json()["error"] == "invalid_grant"

        revoked = await http.post(admin_path("mockhub"), json={"action": "revoke_grant", "login": "OCTOCAT"})
        assert revoked.json()["result"] == {"revoked": 1}
        assert revoked.json()["counters"]["revoked_tokens"] == 2  # the access and the refresh token
        assert issued["access_token"] not in revoked.text  # counters are sizes, never tokens
        missing = await http.post(admin_path("mockhub"), json={"action": "revoke_grant"})
        assert missing.status_code == 400
        stray = await http.post(admin_path("mockhub"), json={"login": "octocat"})
        assert stray.status_code == 400
        unknown = await http.post(admin_path("mockslack"), json={"action": "expire_refresh_tokens"})
        assert unknown.status_code == 400  # MockSlack's tokens never expire
        everyone = await http.post(admin_path("mockgoogle"), json={"action": "revoke_all_tokens"})
        assert everyone.json()["result"] == {"revoked": 0}
        assert (await http.get(admin_path("mockhub"))).json()["counters"]["user_requests"] == 2
        reset = await http.post(admin_path("mockhub"), json={"action": "reset_counters"})
        assert reset.json()["counters"]["user_requests"] == 0


async def test_mockkeys_issue_and_revoke_through_the_endpoint(tmp_path: Path) -> None:
    app = full_app(tmp_path)
    async with admin(app) as http:
        issued = await http.post(admin_path("mockkeys"), json={"action": "issue", "login": "octocat"})
        key = issued.json()["result"]["key"]
        assert issued.json()["counters"]["keys"] == 1 and issued.json()["counters"]["issued_keys"] == 1
        assert key not in (await http.get(admin_path("mockkeys"))).text  # counters are sizes only
        assert (await http.get("/mockkeys/me", headers={"X-API-Key": key})).json()["login"] == "octocat"
        revoked = await http.post(admin_path("mockkeys"), json={"action": "revoke", "key": key})
        assert revoked.json()["result"] == {"revoked": True}
        assert (await http.get("/mockkeys/me", headers={"X-API-Key": key})).status_code == 401


@pytest.mark.parametrize(
    ("peer", "base_url", "headers"),
    [
        ("192.0.2.10", BASE, {}),  # another machine
        ("testclient", BASE, {}),  # not an address at all
        ("127.0.0.1", "http://rebound.example:8001", {}),  # DNS rebinding: a page names its own host
        ("127.0.0.1", BASE, {"X-Forwarded-For": "198.51.100.7"}),  # through a local reverse proxy
        ("127.0.0.1", BASE, {"Forwarded": "for=198.51.100.7"}),
        ("127.0.0.1", BASE, {"X-Forwarded-Proto": "https"}),
        ("127.0.0.1", BASE, {"Via": "1.1 proxy"}),
    ],
)
async def test_anyone_but_a_direct_local_client_gets_404(
    tmp_path: Path, peer: str, base_url: str, headers: dict[str, str]
) -> None:
    app = full_app(tmp_path)
    async with admin(app, peer, base_url) as http:
        for name in ("mockhub", "mockkeys"):
            assert (await http.get(admin_path(name), headers=headers)).status_code == 404
            posted = await http.post(admin_path(name), json={"api_mode": "500"}, headers=headers)
            assert posted.status_code == 404
            issue = await http.post(admin_path(name), json={"action": "issue", "login": "x"}, headers=headers)
            assert issue.status_code == 404
    assert app.state.mockhub.api_mode == "ok" and app.state.mockkeys.api_mode == "ok"
    assert len(app.state.mockkeys.keys) == 0


async def test_localhost_by_name_and_ipv6_loopback_are_local(tmp_path: Path) -> None:
    app = full_app(tmp_path)
    async with admin(app, "::1", "http://localhost:8001") as http:
        assert (await http.get(admin_path("mockhub"))).status_code == 200
    async with admin(app, "127.0.0.1", "http://[::1]:8001") as http:
        assert (await http.get(admin_path("mockhub"))).status_code == 200


async def test_a_post_must_be_json(tmp_path: Path) -> None:
    """A cross-site form (text/plain, no preflight) from the developer's browser changes nothing."""
    app = full_app(tmp_path)
    async with admin(app) as http:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", ""):
            answer = await http.post(
                admin_path("mockhub"), content=b'{"api_mode": "500"}', headers={"Content-Type": content_type}
            )
            assert answer.status_code == 415
        assert (await http.options(admin_path("mockhub"))).status_code == 405  # no CORS preflight
    assert app.state.mockhub.api_mode == "ok"


@pytest.mark.parametrize("peer", ["192.0.2.10", "2001:db8::10", "10.1.2.3"])
async def test_a_peer_on_another_machine_gets_404_while_the_provider_answers_it(
    tmp_path: Path, peer: str
) -> None:
    """A request from another machine, as uvicorn hands it over (`client` = the TCP peer, `Host` =
    the address it was sent to): the provider serves it, the admin endpoint answers 404. In process,
    so no server binds a LAN address and no test sends beyond loopback."""
    app = full_app(tmp_path)
    async with admin(app, peer, "http://192.0.2.1:8001") as http:
        assert (await http.get("/.well-known/oauth-authorization-server/mockhub")).status_code == 200
        assert (await http.get(admin_path("mockhub"))).status_code == 404
        assert (await http.post(admin_path("mockhub"), json={"api_mode": "500"})).status_code == 404
    assert app.state.mockhub.api_mode == "ok"


# -- the command's options -----------------------------------------------------------------------


def run_mock_providers(monkeypatch: pytest.MonkeyPatch, data_dir: Path, *options: str) -> Starlette:
    """`main(["mock-providers", ...])` up to serving; the app it would serve."""
    served: dict[str, Any] = {}

    async def capture(servers: dict[str, Any]) -> int:
        served.update(servers)
        return 0

    monkeypatch.setattr(serving, "serve_until_stopped", capture)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["mock-providers", "--port", str(port), "--mcp-public-url", "http://127.0.0.1:8000"]
    assert cli.main([*argv, "--data-dir", str(data_dir), *options]) == 0
    app: Starlette = served["providers"].config.app
    return app


def test_the_command_sets_mockhub_knobs_from_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    options = [
        *("--token-endpoint-mode", "hang", "--hang-seconds", "2", "--api-mode", "junk"),
        *("--iss-mode", "wrong", "--access-token-ttl", "90", "--refresh-token-lifetime", "300"),
        *("--no-rotate-refresh-tokens", "--no-revoke-grant-on-reuse"),
    ]
    hub = run_mock_providers(monkeypatch, tmp_path / "data", *options).state.mockhub
    assert (hub.token_endpoint_mode, hub.hang_seconds, hub.api_mode) == ("hang", 2.0, "junk")
    assert (hub.iss_mode, hub.access_token_ttl, hub.refresh_token_lifetime) == ("wrong", 90, 300)
    assert (hub.rotate_refresh_tokens, hub.revoke_grant_on_reuse) == (False, False)
    out = capsys.readouterr().out
    assert "mock-providers.sqlite3" in out and "mockhub iss_mode = 'wrong'" in out

    defaults = run_mock_providers(monkeypatch, tmp_path / "other").state.mockhub
    assert (defaults.token_endpoint_mode, defaults.rotate_refresh_tokens, defaults.access_token_ttl) == (
        "ok",
        True,
        28800,
    )


def test_a_bad_knob_value_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(serving, "serve_until_stopped", lambda servers: pytest.fail("must not serve"))
    argv = ["mock-providers", "--port", "0", "--mcp-public-url", "http://127.0.0.1:8000"]
    assert cli.main([*argv, "--data-dir", str(tmp_path), "--access-token-ttl", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: configuration error: ") and "lifetime" in err


def test_the_command_keeps_state_unless_told_to_reset_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    key = run_mock_providers(monkeypatch, data_dir).state.mockkeys.issue("octocat")
    assert run_mock_providers(monkeypatch, data_dir).state.mockkeys.account(key) is not None
    assert run_mock_providers(monkeypatch, data_dir, "--reset-state").state.mockkeys.account(key) is None
