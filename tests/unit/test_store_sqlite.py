"""SQLite-only store checks: file modes, purge on write, raw rows under reencrypt_all.

The backend-independent contract (shared with Redis) is in test_store_contract.py; the helpers
and the SQLite harness are in test_store_contract_support.py.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_store_contract_support import (
    ALICE,
    FakeClock,
    SQLiteHarness,
    flip_ciphertext_byte,
    make_connection,
    make_elicitation,
    make_state,
)
from token_store import KeyRing
from token_store.sqlite import SQLiteStore


@pytest.fixture
def keyring() -> KeyRing:
    return KeyRing([("k1", KeyRing.generate_key())])


@pytest.fixture
def loose_umask() -> Iterator[None]:
    # With umask 0 only explicit modes keep the files private; SQLite alone would make them 0644.
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("loose_umask")
async def test_sqlite_file_modes(tmp_path: Path, keyring: KeyRing) -> None:
    path = tmp_path / "new-dir" / "store.sqlite3"
    store = await SQLiteStore.open(path, keyring)
    try:
        await store.put_connection(make_connection())
        assert mode(path.parent) == 0o700
        assert mode(path) == 0o600
        for suffix in ("-wal", "-shm"):
            assert mode(Path(f"{path}{suffix}")) == 0o600
    finally:
        await store.close()


async def test_sqlite_tightens_an_existing_loose_file(tmp_path: Path, keyring: KeyRing) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    path = shared / "store.sqlite3"
    path.touch()
    path.chmod(0o644)
    store = await SQLiteStore.open(path, keyring)
    await store.close()
    assert mode(path) == 0o600
    assert mode(shared) == 0o755  # an existing parent dir is not ours to change


async def test_sqlite_purges_expired_rows_on_write(tmp_path: Path, keyring: KeyRing) -> None:
    clock = FakeClock()
    path = tmp_path / "store.sqlite3"
    store = await SQLiteStore.open(path, keyring, clock=clock)
    try:
        await store.create_elicitation(make_elicitation(ttl=10), max_live_per_user=5)
        await store.put_oauth_state(make_state(ttl=10))
        await store.put_nonce("n", ttl_seconds=10)
        clock.advance(10)
        await store.put_nonce("fresh", ttl_seconds=60)
        raw = sqlite3.connect(path)
        try:
            counts = [
                raw.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608
                for t in ("elicitations", "oauth_states")
            ]
            nonces = raw.execute("SELECT count(*) FROM nonces").fetchone()[0]
        finally:
            raw.close()
        assert counts == [0, 0]
        assert nonces == 1
    finally:
        await store.close()


async def test_sqlite_reencrypt_all_pages_through_many_rows(tmp_path: Path) -> None:
    # More rows than one page (256), plus an undecryptable one that must not stall the paging.
    harness = SQLiteHarness(tmp_path / "store.sqlite3")
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    conns = [make_connection(account=f"acct-{i:03d}") for i in range(300)]
    for conn in conns:
        await store.put_connection(conn)
    await store.close()
    broken = conns[10].key
    harness.write_blob(broken, flip_ciphertext_byte(harness.read_blob(broken)))

    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))
    try:
        assert await store.reencrypt_all() == len(conns) - 1
        kids = harness.sql("SELECT substr(blob, 1, 7), count(*) FROM connections GROUP BY 1 ORDER BY 1")
        assert kids == [(b"v1.new.", 299), (b"v1.old.", 1)]
        assert await store.get_connection(ALICE, "github", "acct-299") == conns[-1]
        assert await store.reencrypt_all() == 0
    finally:
        await store.close()


async def test_sqlite_reencrypt_all_keeps_state_expiry_and_skips_expired(tmp_path: Path) -> None:
    harness = SQLiteHarness(tmp_path / "store.sqlite3")
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    live, expired = make_state(ttl=600), make_state(ttl=10)
    await store.put_oauth_state(live)
    await store.put_oauth_state(expired)
    await store.close()

    harness.clock.advance(10)
    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))  # open purges `expired`
    try:
        assert await store.reencrypt_all() == 1
        rows = harness.sql("SELECT expires_at FROM oauth_states")
        assert rows == [(live.expires_at,)]
        assert await store.take_oauth_state(live.state) == live
    finally:
        await store.close()
