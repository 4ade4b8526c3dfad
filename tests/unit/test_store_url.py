"""open_store: backend selection by URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from token_store import KeyRing, SQLiteStore, open_store


@pytest.fixture
def keyring() -> KeyRing:
    return KeyRing([("k1", KeyRing.generate_key())])


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
