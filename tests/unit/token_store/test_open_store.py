"""open_store: backend selection by URL; the URL checked at start (one line, the schemes named)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from service.ops.cli import main
from token_store import KeyRing, SQLiteStore, check_store_url, open_store


@pytest.mark.parametrize("slashes", ["///", "////"])
async def test_absolute_sqlite_url(tmp_path: Path, keyring: KeyRing, slashes: str) -> None:
    path = tmp_path / "a" / "store.db"
    store = await open_store(f"sqlite:{slashes}{str(path).lstrip('/')}", keyring)
    try:
        assert isinstance(store, SQLiteStore)
        await store.ping()
    finally:
        await store.close()
    assert path.is_file()


async def test_relative_sqlite_url(tmp_path: Path, keyring: KeyRing, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = await open_store("sqlite:///./sub/store.db", keyring)
    await store.close()
    assert (tmp_path / "sub" / "store.db").is_file()


async def test_unsupported_scheme_is_named_without_the_rest_of_the_url(keyring: KeyRing) -> None:
    with pytest.raises(ValueError, match="'memcached'") as info:
        await open_store("memcached://:hunter2@cache.internal:11211/0", keyring)
    assert "hunter2" not in str(info.value)
    assert "cache.internal" not in str(info.value)


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///", "sqlite:///./", "sqlite://host/x.db", "sqlite:///x.db?mode=ro"]
)
async def test_malformed_sqlite_urls(keyring: KeyRing, url: str) -> None:
    with pytest.raises(ValueError, match="sqlite"):
        await open_store(url, keyring)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("memcached://:hunter2@cache.internal:11211/0", "unsupported store URL scheme 'memcached'"),
        ("redis://:hunter2@cache.internal:port/0", "malformed URL"),
        ("postgresql://u:hunter2@[::1/db", "malformed URL"),
        ("sqlite://host/x.db", "sqlite URL must look like"),
        ("postgresql://u:hunter2@cache.internal/db?sslmode=verify", "sslmode must be one of disable"),
    ],
)
def test_check_store_url_is_one_line_naming_the_supported_schemes(url: str, expected: str) -> None:
    with pytest.raises(ValueError, match=re.escape(expected)) as info:
        check_store_url(url)
    message = str(info.value)
    assert "\n" not in message and "hunter2" not in message and "cache.internal" not in message
    if "sqlite URL" not in message and "sslmode" not in message:
        assert "sqlite, redis, rediss, redis+sentinel, redis+cluster, postgresql, postgres" in message


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///x.db",
        "redis://h:6379/0",
        "rediss://:p@h/1",
        "postgresql://u:p@h:5432/db",
        "postgres://h/db",
    ],
)
def test_check_store_url_accepts_every_supported_scheme(url: str) -> None:
    assert check_store_url(url) == url.split(":", 1)[0]


@pytest.mark.parametrize("url", ["memcached://:hunter2@cache.internal:11211/0", "redis://h:port/0"])
def test_serve_with_an_unusable_store_url_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        "MCPUC_ENCRYPTION_KEYS": f"k1:{b64(KeyRing.generate_key())}",
        "MCPUC_REQUEST_STATE_KEYS": b64(KeyRing.generate_key()),
        "MCPUC_STORE_URL": url,
    }
    monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mcp-url-connect: configuration error: MCPUC_STORE_URL: ") and err.count("\n") == 1
    assert "postgresql" in err and "hunter2" not in err


def b64(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=")
