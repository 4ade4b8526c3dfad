"""SQLite schema version 3: the `default_accounts` table is added to a version 2 database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.store_contract import ALICE, make_connection
from token_store import KeyRing, SQLiteStore


async def test_version_2_database_gains_default_accounts(tmp_path: Path) -> None:
    keyring = KeyRing([("k1", KeyRing.generate_key())])
    path = tmp_path / "v2.sqlite3"
    store = await SQLiteStore.open(path, keyring)
    conn = make_connection()
    await store.put_connection(conn)
    await store.close()
    raw = sqlite3.connect(path, isolation_level=None)
    try:  # what version 2 left behind: no default_accounts table
        raw.execute("DROP TABLE default_accounts")
        raw.execute("PRAGMA user_version = 2")
    finally:
        raw.close()

    store = await SQLiteStore.open(path, keyring)
    try:
        assert await store.list_connections(ALICE) == [conn]
        assert await store.get_default_account(ALICE, "github") is None
        await store.set_default_account(ALICE, "github", conn.key.account)
        assert await store.get_default_account(ALICE, "github") == conn.key.account
    finally:
        await store.close()
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (8,)  # and on to the current one
    finally:
        raw.close()
