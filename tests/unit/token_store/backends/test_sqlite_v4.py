"""SQLite schema version 4: `nonces.slot` (and its unique index) is added to a version 3 database."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from token_store import KeyRing, SQLiteStore, codec


async def test_version_3_database_gains_nonce_slots(tmp_path: Path) -> None:
    keyring = KeyRing([("k1", KeyRing.generate_key())])
    path = tmp_path / "v3.sqlite3"
    await (await SQLiteStore.open(path, keyring)).close()
    raw = sqlite3.connect(path, isolation_level=None)
    try:  # what version 3 left behind: nonces without a slot, one of them live
        raw.execute("DROP TABLE nonces")
        raw.execute("CREATE TABLE nonces (key TEXT PRIMARY KEY, expires_at REAL NOT NULL)")
        raw.execute("INSERT INTO nonces VALUES (?, ?)", (codec.lookup_key("old"), time.time() + 60))
        raw.execute("PRAGMA user_version = 3")
    finally:
        raw.close()
    store = await SQLiteStore.open(path, keyring)
    try:
        await store.put_nonce("a", ttl_seconds=60, slot="s")
        await store.put_nonce("b", ttl_seconds=60, slot="s")
        assert [await store.take_nonce(n) for n in ("old", "a", "b")] == [True, False, True]
    finally:
        await store.close()
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (8,)  # and on to the current one
        assert "slot" in [row[1] for row in raw.execute("PRAGMA table_info(nonces)")]
    finally:
        raw.close()
