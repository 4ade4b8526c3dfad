"""SQLite-only store checks: file modes, purge on write, raw rows under reencrypt_all, schema
migration from version 1, and locks on the store's clock.

The backend-independent contract (shared with Redis) is in test_store_contract.py; the helpers
and the SQLite harness are in tests/support/store_contract.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.store_contract import (
    ALICE,
    T0,
    FakeClock,
    SQLiteHarness,
    flip_ciphertext_byte,
    make_connection,
    make_elicitation,
    make_state,
    make_tokens,
)
from token_store import Connection, ConnectionStatus, KeyRing, StoreUnavailable
from token_store.backends.sqlite import _SCHEMA_VERSION, _UPSERT_CONNECTION, SQLiteStore

# The schema as version 1 of the store created it (user_version 1), verbatim.
V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS connections (
    iss TEXT NOT NULL,
    sub TEXT NOT NULL,
    provider TEXT NOT NULL,
    account TEXT NOT NULL,
    account_label TEXT NOT NULL,
    blob BLOB NOT NULL,
    connected_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (iss, sub, provider, account)
);
CREATE TABLE IF NOT EXISTS elicitations (
    id TEXT PRIMARY KEY,
    iss TEXT NOT NULL,
    sub TEXT NOT NULL,
    provider TEXT NOT NULL,
    status TEXT NOT NULL,
    expires_at REAL NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS elicitations_user ON elicitations (iss, sub, status, expires_at);
CREATE INDEX IF NOT EXISTS elicitations_expiry ON elicitations (expires_at);
CREATE TABLE IF NOT EXISTS oauth_states (
    key TEXT PRIMARY KEY,
    blob BLOB NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS oauth_states_expiry ON oauth_states (expires_at);
CREATE TABLE IF NOT EXISTS nonces (
    key TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS nonces_expiry ON nonces (expires_at);
PRAGMA user_version = 1;
"""


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


def make_v1_database(path: Path, keyring: KeyRing, connections: list[Connection]) -> None:
    """A database as version 1 left it: its schema, rows inserted in its 8-column layout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("PRAGMA journal_mode = WAL")
        raw.executescript(V1_SCHEMA)
        for conn in connections:
            key = conn.key
            blob = keyring.seal(conn.tokens.to_json(), key.associated_data())
            row = (key.user.iss, key.user.sub, key.provider, key.account, conn.account_label, blob)
            raw.execute(
                "INSERT INTO connections VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*row, conn.connected_at, conn.updated_at),
            )
    finally:
        raw.close()


def schema_of(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every table's columns (name, type, notnull, default, pk), and the user_version."""
    raw = sqlite3.connect(path)
    try:
        tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        schema: dict[str, list[tuple[object, ...]]] = {
            t: [tuple(r[1:]) for r in raw.execute(f"PRAGMA table_info({t})")] for t in sorted(tables)
        }
        schema["user_version"] = [raw.execute("PRAGMA user_version").fetchone()]
        indexes = raw.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        schema["indexes"] = sorted(tuple(r) for r in indexes)
        return schema
    finally:
        raw.close()


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


# --- schema migration -------------------------------------------------------------------------


async def test_version_1_database_is_migrated_and_reads_with_status_ok(
    tmp_path: Path, keyring: KeyRing
) -> None:
    path = tmp_path / "old.sqlite3"
    old = [
        make_connection(account="1"),
        make_connection(provider="google", account="g", updated_at=T0 + 1 / 3),
    ]
    make_v1_database(path, keyring, old)
    assert "status" not in [c[0] for c in schema_of(path)["connections"]]

    store = await SQLiteStore.open(path, keyring)
    try:
        # Old rows read as status ok, never refreshed (the defaults of the new fields).
        assert all((c.status, c.refreshed_at) == (ConnectionStatus.OK, None) for c in old)
        assert await store.list_connections(ALICE) == old
        assert await store.get_connection(ALICE, "google") == old[1]
        # Everything new works on the migrated file.
        assert await store.set_connection_status(old[0].key, ConnectionStatus.REVOKED) is True
        refreshed = replace(old[1], tokens=make_tokens(), updated_at=T0 + 5, refreshed_at=T0 + 5)
        assert await store.replace_connection(refreshed, expected_updated_at=old[1].updated_at) is True
        owner = await store.acquire_lock("refresh:x", ttl_seconds=60)
        assert owner is not None
    finally:
        await store.close()

    fresh = tmp_path / "fresh.sqlite3"
    await (await SQLiteStore.open(fresh, keyring)).close()
    assert schema_of(path) == schema_of(fresh)  # same columns, defaults, indexes and version (7)
    assert schema_of(path)["user_version"] == [(8,)]

    store = await SQLiteStore.open(path, keyring)  # a second open finds nothing to migrate
    try:
        assert await store.list_connections(ALICE) == [
            replace(old[0], status=ConnectionStatus.REVOKED),
            refreshed,
        ]
        assert await store.release_lock("refresh:x", owner) is True
    finally:
        await store.close()


async def test_concurrent_opens_of_a_version_1_database_migrate_once(
    tmp_path: Path, keyring: KeyRing
) -> None:
    path = tmp_path / "old.sqlite3"
    conn = make_connection()
    make_v1_database(path, keyring, [conn])
    stores = await asyncio.gather(*(SQLiteStore.open(path, keyring) for _ in range(4)))
    try:
        for store in stores:
            assert await store.get_connection(ALICE, "github", "1") == conn
    finally:
        for store in stores:
            await store.close()
    assert [c[0] for c in schema_of(path)["connections"]][-2:] == ["status", "refreshed_at"]


async def test_newer_schema_is_refused_and_left_alone(tmp_path: Path, keyring: KeyRing) -> None:
    path = tmp_path / "new.sqlite3"
    make_v1_database(path, keyring, [make_connection()])
    newer = _SCHEMA_VERSION + 1
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute(f"PRAGMA user_version = {newer}")
    finally:
        raw.close()
    before = schema_of(path)
    with pytest.raises(StoreUnavailable, match=f"schema version {newer} is newer"):
        await SQLiteStore.open(path, keyring)
    assert schema_of(path) == before  # no column added, version not lowered


async def test_unknown_status_reads_as_absent_with_a_warning(
    tmp_path: Path, keyring: KeyRing, caplog: pytest.LogCaptureFixture
) -> None:
    harness = SQLiteHarness(tmp_path / "store.sqlite3")
    store = await harness.open(keyring)
    try:
        odd, kept = make_connection(account="odd", updated_at=T0 + 1), make_connection(account="kept")
        await store.put_connection(odd)
        await store.put_connection(kept)
        harness.sql("UPDATE connections SET status = 'paused' WHERE account = 'odd'")
        with caplog.at_level(logging.WARNING):
            assert await store.get_connection(ALICE, "github", "odd") is None
            assert await store.get_connection(ALICE, "github") == kept
            assert await store.list_connections(ALICE) == [kept]
        assert "unknown status" in caplog.text and "odd" in caplog.text
    finally:
        await store.close()


# --- locks on the store's clock ---------------------------------------------------------------


async def test_sqlite_lock_expires_exactly_at_its_ttl_by_the_store_clock(
    tmp_path: Path, keyring: KeyRing
) -> None:
    harness = SQLiteHarness(tmp_path / "store.sqlite3")
    store = await harness.open(keyring)
    try:
        owner = await store.acquire_lock("refresh:x", ttl_seconds=30)
        assert owner is not None
        harness.clock.advance(29.999)
        assert await store.acquire_lock("refresh:x", ttl_seconds=30) is None
        harness.clock.advance(0.001)  # expires_at is exclusive, like every other TTL here
        taker = await store.acquire_lock("refresh:x", ttl_seconds=30)
        assert taker is not None and taker != owner
        assert await store.release_lock("refresh:x", owner) is False
        rows = harness.sql("SELECT owner, expires_at FROM locks")
        assert rows == [(taker, T0 + 60)]  # the stale release left the new owner's row alone
    finally:
        await store.close()


async def test_sqlite_locks_are_stored_by_hash_and_purged_when_expired(
    tmp_path: Path, keyring: KeyRing
) -> None:
    harness = SQLiteHarness(tmp_path / "store.sqlite3")
    store = await harness.open(keyring)
    try:
        assert await store.acquire_lock("refresh:secret-name", ttl_seconds=10) is not None
        assert await store.acquire_lock("refresh:kept", ttl_seconds=60) is not None
        (name_hash,) = harness.sql("SELECT name_hash FROM locks WHERE expires_at = ?", (T0 + 10,))[0]
        assert len(name_hash) == 64 and "secret-name" not in name_hash
        harness.clock.advance(10)
        await store.put_nonce("n", ttl_seconds=60)  # every TTL write purges expired rows
        assert harness.sql("SELECT count(*) FROM locks") == [(1,)]
    finally:
        await store.close()


class FailingReader:
    """Stands in for the store's read connection: every statement fails with `error_code`."""

    def __init__(self, error_code: int) -> None:
        self.error_code = error_code
        self.statements = 0

    def execute(self, sql: str, params: object = ()) -> sqlite3.Cursor:
        self.statements += 1
        error = sqlite3.OperationalError("injected")
        error.sqlite_errorcode = self.error_code
        raise error


@contextmanager
def read_connection_failing(store: SQLiteStore, error_code: int) -> Iterator[FailingReader]:
    real, failing = store._reader, FailingReader(error_code)
    store._reader = failing  # type: ignore[assignment]
    try:
        yield failing
    finally:
        store._reader = real


async def test_sqlite_read_that_finds_the_file_busy_is_retried_on_the_worker_thread(
    tmp_path: Path, keyring: KeyRing
) -> None:
    """Reads run on the event loop with no busy timeout; "busy" must send them to the worker
    thread (which may wait) rather than fail the tool call or stall the loop."""
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", keyring)
    try:
        stored = make_connection()
        await store.put_connection(stored)
        with read_connection_failing(store, sqlite3.SQLITE_BUSY) as reader:
            assert await store.get_connection(ALICE, stored.key.provider) == stored
        assert reader.statements == 1  # tried on the read connection first, then on the writer's
    finally:
        await store.close()


async def test_sqlite_read_failing_otherwise_is_store_unavailable(tmp_path: Path, keyring: KeyRing) -> None:
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", keyring)
    try:
        with (
            read_connection_failing(store, sqlite3.SQLITE_IOERR) as reader,
            pytest.raises(StoreUnavailable, match=r"get_connection failed"),
        ):
            await store.get_connection(ALICE, "github")
        assert reader.statements == 1
    finally:
        await store.close()


async def test_sqlite_reads_see_what_was_just_committed(tmp_path: Path, keyring: KeyRing) -> None:
    """The read connection answers from the last committed snapshot: a write awaited before a
    read is what the read returns (the flow relies on it, e.g. the retry after the callback)."""
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", keyring)
    try:
        first = make_connection()
        await store.put_connection(first)
        assert await store.get_connection(ALICE, first.key.provider) == first
        await store.delete_connection(first.key)
        assert await store.get_connection(ALICE, first.key.provider) is None
    finally:
        await store.close()


async def test_the_completing_upsert_updates_every_column_but_the_key_and_connected_at(
    tmp_path: Path, keyring: KeyRing
) -> None:
    """`complete_elicitation`'s UPSERT lists its columns apart from `_put_connection`'s: a column a
    later schema adds must be updated on reconnect too (only connected_at is kept)."""
    path = tmp_path / "store.sqlite3"
    await (await SQLiteStore.open(path, keyring)).close()
    raw = sqlite3.connect(path)
    try:
        info = list(raw.execute("PRAGMA table_info(connections)"))
    finally:
        raw.close()
    key = {row[1] for row in info if row[5]}  # pk position > 0
    assert key == {"iss", "sub", "provider", "account"}
    updated = set(re.findall(r"(\w+) = excluded\.\1", _UPSERT_CONNECTION))
    assert updated == {row[1] for row in info} - key - {"connected_at"}
    assert f"ON CONFLICT ({', '.join(row[1] for row in info if row[5])})" in _UPSERT_CONNECTION
