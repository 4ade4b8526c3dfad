"""The console entry point: dev-token and serve refuse clearly; demo data is generated once and kept."""

from __future__ import annotations

import stat
from pathlib import Path

import jwt
import pytest

from mock_providers import create_mock_providers_app
from mock_providers.demo import build_demo
from service.cli import main


def test_dev_token_refuses_without_dev_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev-token", "alice", "--data-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "dev-as.json" in captured.err


def test_dev_token_prints_only_a_token_for_the_demo_audience(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    create_mock_providers_app(demo.providers)  # creates the dev AS key under the data dir
    assert main(["dev-token", "alice", "--data-dir", str(tmp_path)]) == 0
    token = capsys.readouterr().out.strip()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "alice"
    assert claims["iss"] == demo.settings.auth_issuer
    assert claims["aud"] == demo.settings.resource_url


def test_demo_secrets_are_generated_once_and_private(tmp_path: Path) -> None:
    first = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    second = build_demo("127.0.0.1", 9100, 9101, tmp_path)
    assert first.settings.encryption_keys == second.settings.encryption_keys
    mode = stat.S_IMODE((tmp_path / "demo-secrets.json").stat().st_mode)
    assert mode == 0o600


def test_serve_refuses_an_incomplete_configuration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("MCPUC_AUTH_ISSUER", "MCPUC_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve"]) == 2
    assert "MCPUC_AUTH_ISSUER is required" in capsys.readouterr().err


def test_demo_refuses_a_non_loopback_host_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--host", "192.0.2.10", "--data-dir", str(tmp_path)]) == 2
    assert "loopback" in capsys.readouterr().err


def test_mock_providers_writes_a_private_serve_configuration(tmp_path: Path) -> None:
    from mock_providers.demo import build_dev_setup, write_serve_env
    from service.settings import load_settings

    setup = build_dev_setup("http://127.0.0.1:8080", "http://127.0.0.1:8001", tmp_path)
    env_file = write_serve_env(setup)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    environ = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    loaded = load_settings(environ).validate()
    assert loaded.providers["mockhub"].client_secret == setup.settings.providers["mockhub"].client_secret
    assert loaded.providers["mockhub"].issuer == "http://127.0.0.1:8001/mockhub"
    assert loaded.public_url == "http://127.0.0.1:8080"


def test_keys_rotate_reencrypts_under_the_newest_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio
    import base64
    import os

    from token_store import Connection, ConnectionKey, KeyRing, SQLiteStore, TokenSet, UserRef

    def key() -> str:
        return base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")

    old, new = f"old:{key()}", f"new:{key()}"
    db = tmp_path / "store.sqlite3"
    conn = Connection(
        ConnectionKey(UserRef("https://as", "alice"), "mockhub", "1"), TokenSet("tok"), "a", 1.0, 1.0
    )

    async def put_and_read(keys: str, write: bool) -> tuple[str | None, str | None]:
        store = await SQLiteStore.open(db, KeyRing.parse(keys))
        try:
            if write:
                await store.put_connection(conn)
            found = await store.get_connection(conn.key.user, "mockhub")
            return (found.tokens.access_token if found else None), None
        finally:
            await store.close()

    asyncio.run(put_and_read(old, write=True))
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        "MCPUC_ENCRYPTION_KEYS": f"{new},{old}",
        "MCPUC_REQUEST_STATE_KEYS": key(),
        "MCPUC_STORE_URL": f"sqlite:///{db}",
    }
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["keys", "rotate"]) == 0
    assert "re-encrypted 1 record" in capsys.readouterr().out
    # The old key is no longer needed: the record reads under the new key alone.
    assert asyncio.run(put_and_read(new, write=False))[0] == "tok"
