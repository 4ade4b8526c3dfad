"""The mock providers' durable state (mock_providers/store.py): an app built again on the same
data dir (a restart of `demo` / `mock-providers`) keeps every code, token, consent, key and
registered client, with its state (used, retired, revoked); the file holds digests, not secrets,
and is private to its owner. In-process ASGI: two apps, one file."""

from __future__ import annotations

import stat
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jwt
from starlette.applications import Starlette

from mock_providers import ClientSpec, MockHub, create_mock_providers_app
from mock_providers.store import (
    STATE_FILENAME,
    DurableMap,
    MockStore,
    RecordCodec,
    SecretDigest,
    delete_state,
    sha256_hex,
)
from tests.support.mock_provider_setup import (
    BASE,
    DCR_CALLBACK,
    GOOGLE_CALLBACK,
    GOOGLE_CLIENT_ID,
    GOOGLE_SECRET,
    HUB_CALLBACK,
    HUB_CLIENT_ID,
    HUB_SECRET,
    SLACK_CALLBACK,
    SLACK_CLIENT_ID,
    SLACK_SECRET,
    dev_as_login,
    full_config,
    hub_params,
    pkce_pair,
    query_of,
)


@asynccontextmanager
async def serving(data_dir: Path, **overrides: Any) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    """A freshly built app (as after a process start) and an HTTP client for it."""
    app = create_mock_providers_app(full_config(data_dir, **overrides))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        yield app, http


async def approve(http: httpx.AsyncClient, path: str, params: dict[str, str], login: str) -> str:
    """POST the consent form as the user would; the code from the callback."""
    answer = await http.post(path, data={**params, "login": login, "decision": "approve"})
    assert answer.status_code == 302, answer.text
    return query_of(answer.headers["location"])["code"]


async def hub_code(http: httpx.AsyncClient, login: str = "octocat") -> tuple[str, str]:
    verifier, challenge = pkce_pair()
    return await approve(http, "/mockhub/authorize", hub_params(challenge), login), verifier


async def hub_exchange(http: httpx.AsyncClient, code: str, verifier: str) -> httpx.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": HUB_CALLBACK,
        "code_verifier": verifier,
    }
    return await http.post("/mockhub/token", data=form, auth=(HUB_CLIENT_ID, HUB_SECRET))


async def hub_refresh(http: httpx.AsyncClient, refresh_token: str) -> httpx.Response:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    return await http.post("/mockhub/token", data=form, auth=(HUB_CLIENT_ID, HUB_SECRET))


async def hub_user(http: httpx.AsyncClient, access_token: str) -> httpx.Response:
    return await http.get("/mockhub/user", headers={"Authorization": f"Bearer {access_token}"})


def state_files(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob(STATE_FILENAME + "*"))


def stored_bytes(data_dir: Path) -> bytes:
    return b"".join(path.read_bytes() for path in state_files(data_dir))


async def test_mockhub_tokens_codes_and_grant_families_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with serving(data_dir) as (app, http):
        used_code, verifier = await hub_code(http, "alice-hub")
        first = (await hub_exchange(http, used_code, verifier)).json()
        pending_code, pending_verifier = await hub_code(http, "bob-hub")
        revoked = (await hub_exchange(http, *(await hub_code(http, "carol-hub")))).json()
        answer = await http.post(
            "/mockhub/revoke", data={"token": revoked["access_token"]}, auth=(HUB_CLIENT_ID, HUB_SECRET)
        )
        assert answer.status_code == 200
        assert (await hub_user(http, revoked["access_token"])).status_code == 401

    async with serving(data_dir) as (app, http):
        hub = app.state.mockhub
        user = await hub_user(http, first["access_token"])
        assert user.status_code == 200 and user.json()["login"] == "alice-hub"
        # Revoked stays revoked (both tokens of the pair), a used code stays used.
        assert (await hub_user(http, revoked["access_token"])).status_code == 401
        assert (await hub_refresh(http, revoked["refresh_token"])).json()["error"] == "invalid_grant"
        reused = await hub_exchange(http, used_code, verifier)
        assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
        # A code approved before the restart is exchanged after it.
        assert (await hub_exchange(http, pending_code, pending_verifier)).status_code == 200
        # Refresh rotates across the restart ...
        refreshed = await hub_refresh(http, first["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        second = refreshed.json()
        assert (await hub_user(http, second["access_token"])).status_code == 200

    async with serving(data_dir) as (app, http):
        hub = app.state.mockhub
        # ... and the retired refresh token is still known as retired: reuse revokes the family,
        # the tokens issued before the first restart included.
        again = await hub_refresh(http, first["refresh_token"])
        assert again.json()["error"] == "invalid_grant" and hub.reuse_detections == 1
        assert (await hub_user(http, second["access_token"])).status_code == 401
        assert (await hub_user(http, first["access_token"])).status_code == 401
        assert (await hub_refresh(http, second["refresh_token"])).json()["error"] == "invalid_grant"
        # Tokens this run never saw are listed (for leak scans) as their digest, not the token.
        assert SecretDigest.of(sha256_hex(first["access_token"])) in hub.revoked_tokens
        assert first["refresh_token"] in hub.revoked_tokens  # presented this run: known


async def test_revoking_a_refresh_token_after_a_restart_revokes_its_whole_grant(tmp_path: Path) -> None:
    # RFC 7009 §2.1 as MockHub implements it: a refresh token revokes every access token of its
    # grant, also when the tokens were issued by an earlier run (the store holds only digests).
    data_dir = tmp_path / "data"
    async with serving(data_dir) as (_app, http):
        first = (await hub_exchange(http, *(await hub_code(http, "dana-hub")))).json()
        second = (await hub_refresh(http, first["refresh_token"])).json()
    async with serving(data_dir) as (_app, http):
        answer = await http.post(
            "/mockhub/revoke", data={"token": second["refresh_token"]}, auth=(HUB_CLIENT_ID, HUB_SECRET)
        )
        assert answer.status_code == 200
        for access_token in (first["access_token"], second["access_token"]):
            assert (await hub_user(http, access_token)).status_code == 401


async def test_knob_helpers_reach_tokens_stored_by_an_earlier_run(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with serving(data_dir) as (app, http):
        tokens = (await hub_exchange(http, *(await hub_code(http, "dave-hub")))).json()
        other = (await hub_exchange(http, *(await hub_code(http, "erin-hub")))).json()
    async with serving(data_dir) as (app, http):
        hub = app.state.mockhub
        hub.expire_access_tokens()
        assert (await hub_user(http, tokens["access_token"])).status_code == 401
        assert hub.revoke_grant("DAVE-hub") == 1  # case-insensitive, like GitHub logins
        assert (await hub_refresh(http, tokens["refresh_token"])).json()["error"] == "invalid_grant"
        assert (await hub_refresh(http, other["refresh_token"])).status_code == 200


async def test_mockgoogle_consent_key_and_refresh_token_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def tokens(http: httpx.AsyncClient) -> dict[str, Any]:
        verifier, challenge = pkce_pair()
        params = {
            "response_type": "code",
            "client_id": GOOGLE_CLIENT_ID,
            "redirect_uri": GOOGLE_CALLBACK,
            "scope": "openid email",
            "state": "g",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "access_type": "offline",
        }
        code = await approve(http, "/mockgoogle/authorize", params, "alice")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": GOOGLE_CALLBACK,
            "code_verifier": verifier,
        }
        answer = await http.post("/mockgoogle/token", data=form, auth=(GOOGLE_CLIENT_ID, GOOGLE_SECRET))
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    async with serving(data_dir) as (_app, http):
        first = await tokens(http)
        assert "refresh_token" in first  # the first offline consent
        jwks_before = (await http.get("/mockgoogle/jwks.json")).json()

    async with serving(data_dir) as (_app, http):
        assert (await http.get("/mockgoogle/jwks.json")).json() == jwks_before
        key = jwt.PyJWKSet.from_dict(jwks_before)[jwt.get_unverified_header(first["id_token"])["kid"]]
        jwt.decode(first["id_token"], key=key, algorithms=["RS256"], audience=GOOGLE_CLIENT_ID)
        userinfo = await http.get(
            "/mockgoogle/userinfo", headers={"Authorization": f"Bearer {first['access_token']}"}
        )
        assert userinfo.status_code == 200 and userinfo.json()["email"] == "alice@mockgoogle.test"
        assert "refresh_token" not in await tokens(http)  # the consent is remembered
        refresh = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]}
        refreshed = await http.post("/mockgoogle/token", data=refresh, auth=(GOOGLE_CLIENT_ID, GOOGLE_SECRET))
        assert refreshed.status_code == 200, refreshed.text
        assert (
            await http.post("/mockgoogle/revoke", data={"token": first["refresh_token"]})
        ).status_code == 200

    async with serving(data_dir) as (_app, http):
        refreshed = await http.post("/mockgoogle/token", data=refresh, auth=(GOOGLE_CLIENT_ID, GOOGLE_SECRET))
        assert refreshed.json()["error"] == "invalid_grant"
        assert "refresh_token" in await tokens(http)  # revocation forgot the consent, durably


async def test_mockslack_and_mockkeys_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with serving(data_dir) as (app, http):
        verifier, challenge = pkce_pair()
        params = {
            "client_id": SLACK_CLIENT_ID,
            "redirect_uri": SLACK_CALLBACK,
            "scope": "commands",
            "user_scope": "search:read",
            "state": "s",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        code = await approve(http, "/mockslack/authorize", params, "grace")
        form = {"code": code, "redirect_uri": SLACK_CALLBACK, "code_verifier": verifier}
        install = (
            await http.post("/mockslack/oauth.v2.access", data=form, auth=(SLACK_CLIENT_ID, SLACK_SECRET))
        ).json()
        bot, user = install["access_token"], install["authed_user"]["access_token"]
        assert (await http.post("/mockslack/auth.revoke", data={"token": bot})).json()["ok"] is True
        keys = app.state.mockkeys
        live, dead = keys.issue("octocat"), keys.issue("octocat")
        assert keys.revoke(dead)

    async with serving(data_dir) as (app, http):
        assert (await http.post("/mockslack/auth.test", data={"token": user})).json()["user"] == "grace"
        assert (await http.post("/mockslack/auth.test", data={"token": bot})).json()[
            "error"
        ] == "token_revoked"
        assert app.state.mockslack.revoke_grant("grace") == 1  # the user token; the bot's already was
        assert (await http.get("/mockkeys/me", headers={"X-API-Key": live})).json()["login"] == "octocat"
        assert (await http.get("/mockkeys/me", headers={"X-API-Key": dead})).status_code == 401
        assert len(app.state.mockkeys.keys) == 1


async def test_dev_as_registered_client_and_refresh_token_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with serving(data_dir) as (_app, http):
        registration = {"redirect_uris": [DCR_CALLBACK], "token_endpoint_auth_method": "client_secret_basic"}
        registered = (await http.post("/register", json=registration)).json()
        client = (registered["client_id"], registered["client_secret"])
        await dev_as_login(http, "alice", "")
        cookies = dict(http.cookies)
        verifier, challenge = pkce_pair()
        authorize = {
            "response_type": "code",
            "client_id": client[0],
            "redirect_uri": DCR_CALLBACK,
            "state": "x",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        code = query_of((await http.get("/authorize", params=authorize)).headers["location"])["code"]

    async with serving(data_dir) as (_app, http):
        http.cookies.update(cookies)  # the browser's session cookie is still signed with the same key
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": DCR_CALLBACK,
            "code_verifier": verifier,
        }
        wrong = await http.post("/token", data=form, auth=(client[0], "not-the-secret"))
        assert wrong.status_code == 401
        tokens = (await http.post("/token", data=form, auth=client)).json()
        assert "refresh_token" in tokens
        _, challenge = pkce_pair()
        again = await http.get("/authorize", params={**authorize, "code_challenge": challenge})
        assert "code" in query_of(again.headers["location"])  # still signed in

    async with serving(data_dir) as (_app, http):
        refresh = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
        assert (await http.post("/token", data=refresh, auth=client)).status_code == 200
        assert (await http.post("/token", data=refresh, auth=client)).json()["error"] == "invalid_grant"


async def test_the_file_is_private_and_holds_no_secret(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with serving(data_dir) as (app, http):
        code, verifier = await hub_code(http)
        tokens = (await hub_exchange(http, code, verifier)).json()
        pending, _ = await hub_code(http)
        registered = (await http.post("/register", json={"redirect_uris": [DCR_CALLBACK]})).json()
        key = app.state.mockkeys.issue("octocat")
        files = state_files(data_dir)
        assert data_dir / STATE_FILENAME in files
        for path in files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        stored = stored_bytes(data_dir)
        assert sha256_hex(tokens["access_token"]).encode() in stored  # it is there, as a digest
        secrets = (
            tokens["access_token"],
            tokens["refresh_token"],
            code,
            pending,
            registered["client_secret"],
            key,
        )
        for secret in secrets:
            assert secret.encode() not in stored


async def test_a_digest_is_never_taken_for_the_token(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as (_app, http):
        tokens = (await hub_exchange(http, *(await hub_code(http)))).json()
        digest = str(SecretDigest.of(sha256_hex(tokens["access_token"])))
        assert (await hub_user(http, digest)).status_code == 401
        assert (await hub_user(http, sha256_hex(tokens["access_token"]))).status_code == 401
        assert (await hub_refresh(http, "sha256:" + sha256_hex(tokens["refresh_token"]))).status_code == 400
        assert (await hub_user(http, tokens["access_token"])).status_code == 200


async def test_without_persistence_nothing_is_written_and_a_restart_forgets(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with serving(data_dir, persist_state=False) as (app, http):
        tokens = (await hub_exchange(http, *(await hub_code(http)))).json()
        assert app.state.mock_store.path is None
    assert state_files(data_dir) == []
    async with serving(data_dir, persist_state=False) as (app, http):
        assert (await hub_user(http, tokens["access_token"])).status_code == 401


async def test_delete_state_resets_the_providers(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with serving(data_dir) as (app, http):
        tokens = (await hub_exchange(http, *(await hub_code(http)))).json()
        app.state.mock_store.close()
    delete_state(data_dir)
    assert state_files(data_dir) == []
    async with serving(data_dir) as (app, http):
        assert (await hub_user(http, tokens["access_token"])).status_code == 401


def test_providers_built_without_a_store_keep_to_themselves(tmp_path: Path) -> None:
    """A MockHub built in code (no app) gets a store in memory of its own."""
    spec = ClientSpec(HUB_CLIENT_ID, HUB_SECRET, (HUB_CALLBACK,))
    one, two = MockHub(BASE + "/mockhub", spec), MockHub(BASE + "/mockhub", spec)
    assert one.mock_store is not two.mock_store and one.mock_store.path is None
    one.mock_store.put("mockhub/codes", "x", {})
    assert two.mock_store.get("mockhub/codes", "x") is None
    assert list(tmp_path.iterdir()) == []


def test_a_missing_record_never_names_its_secret() -> None:
    store = MockStore.in_memory()
    codes: DurableMap[Any] = DurableMap(store, "t/codes", RecordCodec(dict, key_field=None))
    try:
        codes["the-secret-code"]
    except KeyError as missing:
        assert "the-secret-code" not in repr(missing)
    else:
        raise AssertionError("a missing code was found")
    assert "the-secret-code" not in repr(codes)


def test_a_digest_matches_only_its_secret() -> None:
    digest = SecretDigest.of(sha256_hex("mhat_right"))
    assert digest.matches("mhat_right") and not digest.matches("mhat_wrong")
    assert not digest.matches(str(digest))  # the digest is not the secret


def test_threads_share_one_store(tmp_path: Path) -> None:
    """The kit turns knobs from the test's thread while the server's thread serves."""
    store = MockStore.open(tmp_path)

    def write(prefix: str) -> None:
        for i in range(200):
            store.put("t/rows", f"{prefix}{i}", {"i": i})

    threads = [threading.Thread(target=write, args=(name,)) for name in "abcd"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.count("t/rows") == 800
