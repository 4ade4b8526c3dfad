"""Contract tests for `Store` backends, run here against the embedded SQLite backend.

The contract tests only talk to the store through the `Store` interface plus a small `Harness`
that does what an attacker or an operator would do underneath it (edit a stored blob, reopen the
store, read the raw bytes at rest). A Redis backend joins by adding a harness and a fixture param.
SQLite-only checks (file modes, WAL) are at the end.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterator
from dataclasses import astuple, replace
from pathlib import Path
from typing import Protocol

import pytest

from token_store import (
    Connection,
    ConnectionKey,
    ElicitationStatus,
    KeyRing,
    OAuthState,
    PendingElicitation,
    Store,
    StoreUnavailable,
    TokenSet,
    TooManyPending,
    UserRef,
)
from token_store.sqlite import SQLiteStore

ALICE = UserRef("https://as.example", "alice")
BOB = UserRef("https://as.example", "bob")
T0 = 1_700_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness(Protocol):
    clock: FakeClock

    async def open(self, keyring: KeyRing) -> Store: ...
    def read_blob(self, key: ConnectionKey) -> bytes: ...
    def write_blob(self, key: ConnectionKey, blob: bytes) -> None: ...
    def copy_connection(self, src: ConnectionKey, dst: ConnectionKey) -> None: ...
    def break_backend(self) -> None: ...
    def raw_bytes(self) -> bytes: ...


class SQLiteHarness:
    """Reaches under the store with a second, independent sqlite3 connection to the same file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = FakeClock()

    async def open(self, keyring: KeyRing) -> Store:
        return await SQLiteStore.open(self.path, keyring, clock=self.clock)

    def _sql(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def read_blob(self, key: ConnectionKey) -> bytes:
        rows = self._sql(
            "SELECT blob FROM connections WHERE iss = ? AND sub = ? AND provider = ? AND account = ?",
            (key.user.iss, key.user.sub, key.provider, key.account),
        )
        blob = rows[0][0]
        assert isinstance(blob, bytes)
        return blob

    def write_blob(self, key: ConnectionKey, blob: bytes) -> None:
        self._sql(
            "UPDATE connections SET blob = ? WHERE iss = ? AND sub = ? AND provider = ? AND account = ?",
            (blob, key.user.iss, key.user.sub, key.provider, key.account),
        )

    def copy_connection(self, src: ConnectionKey, dst: ConnectionKey) -> None:
        self._sql(
            "INSERT OR REPLACE INTO connections "
            "SELECT ?, ?, ?, ?, account_label, blob, connected_at, updated_at FROM connections "
            "WHERE iss = ? AND sub = ? AND provider = ? AND account = ?",
            (*astuple(dst.user), dst.provider, dst.account, *astuple(src.user), src.provider, src.account),
        )

    def break_backend(self) -> None:
        self._sql("DROP TABLE connections")

    def raw_bytes(self) -> bytes:
        files = [self.path, Path(f"{self.path}-wal")]
        return b"".join(p.read_bytes() for p in files if p.exists())


@pytest.fixture
def keyring() -> KeyRing:
    return KeyRing([("k1", KeyRing.generate_key())])


@pytest.fixture(params=["sqlite"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    assert request.param == "sqlite"
    return SQLiteHarness(tmp_path / "data" / "store.sqlite3")


@pytest.fixture
async def store(harness: Harness, keyring: KeyRing) -> AsyncIterator[Store]:
    opened = await harness.open(keyring)
    yield opened
    await opened.close()


def make_connection(
    user: UserRef = ALICE, provider: str = "github", account: str = "1", *, updated_at: float = T0
) -> Connection:
    tokens = TokenSet(
        access_token=f"at-{secrets.token_hex(16)}",
        refresh_token=f"rt-{secrets.token_hex(16)}",
        expires_at=T0 + 3600,
        scopes=("repo", "read:user"),
    )
    key = ConnectionKey(user, provider, account)
    return Connection(key, tokens, f"{user.sub}@{provider}", connected_at=T0, updated_at=updated_at)


def make_elicitation(
    user: UserRef = ALICE, *, ttl: float = 600, provider: str = "github"
) -> PendingElicitation:
    return PendingElicitation(
        id=secrets.token_urlsafe(16),
        user=user,
        client_id="client-1",
        mcp_session_id="session-1",
        provider=provider,
        scopes=("repo",),
        created_at=T0,
        expires_at=T0 + ttl,
    )


def make_state(*, ttl: float = 600) -> OAuthState:
    return OAuthState(
        state=secrets.token_urlsafe(24),
        elicitation=make_elicitation(),
        browser_binding="b" * 64,
        code_verifier=f"cv-{secrets.token_urlsafe(48)}",
        redirect_uri="https://mcp.example/callback",
        token_endpoint="https://github.example/login/oauth/access_token",
        expected_issuer=None,
        created_at=T0,
        expires_at=T0 + ttl,
    )


def flip_ciphertext_byte(blob: bytes) -> bytes:
    header, _, body = blob.rpartition(b".")
    raw = bytearray(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
    raw[len(raw) // 2] ^= 0x01
    return header + b"." + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=")


# --- connections ------------------------------------------------------------------------------


async def test_connection_round_trip(store: Store) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    assert await store.get_connection(ALICE, "github", "1") == conn
    assert await store.get_connection(ALICE, "github") == conn
    assert await store.get_connection(BOB, "github") is None
    assert await store.get_connection(ALICE, "google") is None


async def test_put_replaces(store: Store) -> None:
    first = make_connection()
    second = replace(make_connection(), updated_at=T0 + 10)
    await store.put_connection(first)
    await store.put_connection(second)
    assert await store.get_connection(ALICE, "github", "1") == second
    assert await store.list_connections(ALICE) == [second]


async def test_without_account_the_most_recently_updated_answers(store: Store) -> None:
    older = make_connection(account="1", updated_at=T0 + 100)
    newer = make_connection(account="2", updated_at=T0 + 200)
    await store.put_connection(newer)
    await store.put_connection(older)
    assert await store.get_connection(ALICE, "github") == newer
    refreshed = replace(older, updated_at=T0 + 300)
    await store.put_connection(refreshed)
    assert await store.get_connection(ALICE, "github") == refreshed


async def test_list_is_per_user_and_ordered(store: Store) -> None:
    expected = [
        make_connection(provider="github", account="2"),
        make_connection(provider="github", account="10"),
        make_connection(provider="google", account="a"),
    ]
    for conn in reversed(expected):
        await store.put_connection(conn)
    await store.put_connection(make_connection(BOB, "github", "3"))
    assert await store.list_connections(ALICE) == sorted(
        expected, key=lambda c: (c.key.provider, c.key.account)
    )
    assert [c.key.user for c in await store.list_connections(BOB)] == [BOB]


async def test_delete_connection(store: Store) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    assert await store.delete_connection(conn.key) is True
    assert await store.get_connection(ALICE, "github", "1") is None
    assert await store.delete_connection(conn.key) is False


async def test_delete_connections_of_one_provider(store: Store) -> None:
    gh = [make_connection(account="b"), make_connection(account="a")]
    kept = [make_connection(provider="google"), make_connection(BOB, "github", "a")]
    for conn in gh + kept:
        await store.put_connection(conn)
    deleted = await store.delete_connections(ALICE, "github")
    assert deleted == sorted(gh, key=lambda c: c.key.account)
    assert await store.list_connections(ALICE) == [kept[0]]
    assert await store.list_connections(BOB) == [kept[1]]
    assert await store.delete_connections(ALICE, "github") == []


async def test_flipped_byte_reads_as_absent(store: Store, harness: Harness) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    harness.write_blob(conn.key, flip_ciphertext_byte(harness.read_blob(conn.key)))
    assert await store.get_connection(ALICE, "github", "1") is None
    assert await store.get_connection(ALICE, "github") is None
    assert await store.list_connections(ALICE) == []


async def test_tampered_most_recent_falls_back_to_the_next(store: Store, harness: Harness) -> None:
    older = make_connection(account="1", updated_at=T0 + 1)
    newer = make_connection(account="2", updated_at=T0 + 2)
    await store.put_connection(older)
    await store.put_connection(newer)
    harness.write_blob(newer.key, flip_ciphertext_byte(harness.read_blob(newer.key)))
    assert await store.get_connection(ALICE, "github") == older


@pytest.mark.parametrize(
    "dst",
    [
        ConnectionKey(BOB, "github", "1"),  # another user
        ConnectionKey(UserRef("https://evil.example", "alice"), "github", "1"),  # same sub, other issuer
        ConnectionKey(ALICE, "google", "1"),  # another provider
        ConnectionKey(ALICE, "github", "2"),  # another account
    ],
    ids=["user", "issuer", "provider", "account"],
)
async def test_record_moved_under_another_key_reads_as_absent(
    store: Store, harness: Harness, dst: ConnectionKey
) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    harness.copy_connection(conn.key, dst)
    assert harness.read_blob(dst) == harness.read_blob(conn.key)  # the move really happened
    assert await store.get_connection(dst.user, dst.provider, dst.account) is None
    latest = await store.get_connection(dst.user, dst.provider)
    assert latest is None or latest.key != dst
    assert dst not in [c.key for c in await store.list_connections(dst.user)]
    assert await store.get_connection(ALICE, "github", "1") == conn  # the original is intact


async def test_undecryptable_record_logs_warning_without_secrets(
    store: Store, harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    conn = make_connection(account="acct-42")
    await store.put_connection(conn)
    tampered = flip_ciphertext_byte(harness.read_blob(conn.key))
    harness.write_blob(conn.key, tampered)
    with caplog.at_level(logging.WARNING):
        assert await store.get_connection(ALICE, "github", "acct-42") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings, "a record that fails to decrypt must be logged"
    text = " ".join(r.getMessage() for r in warnings)
    assert "github" in text and "acct-42" in text
    for secret in (conn.tokens.access_token, str(conn.tokens.refresh_token), tampered.decode()):
        assert secret not in text


async def test_unknown_kid_reads_as_absent(harness: Harness, keyring: KeyRing) -> None:
    store = await harness.open(keyring)
    conn = make_connection()
    await store.put_connection(conn)
    await store.close()
    store = await harness.open(KeyRing([("other", KeyRing.generate_key())]))
    try:
        assert await store.get_connection(ALICE, "github", "1") is None
        assert await store.list_connections(ALICE) == []
    finally:
        await store.close()


async def test_key_rotation(harness: Harness) -> None:
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    before = make_connection(account="before")
    await store.put_connection(before)
    await store.close()

    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))
    assert await store.get_connection(ALICE, "github", "before") == before  # old key still decrypts
    after = make_connection(account="after")
    await store.put_connection(after)
    assert KeyRing.kid_of(harness.read_blob(after.key)) == "new"  # new key encrypts
    assert KeyRing.kid_of(harness.read_blob(before.key)) == "old"
    await store.close()

    store = await harness.open(KeyRing([("new", new_key)]))  # old key retired
    try:
        assert await store.get_connection(ALICE, "github", "after") == after
        assert await store.get_connection(ALICE, "github", "before") is None
    finally:
        await store.close()


# --- pending elicitations -------------------------------------------------------------------


async def test_elicitation_round_trip_and_expiry(store: Store, harness: Harness) -> None:
    e = make_elicitation(ttl=60)
    await store.create_elicitation(e, max_live_per_user=5)
    assert await store.get_elicitation(e.id) == e
    assert await store.get_elicitation("unknown") is None
    harness.clock.advance(59)
    assert await store.get_elicitation(e.id) == e
    harness.clock.advance(1)  # expires_at is exclusive
    assert await store.get_elicitation(e.id) is None
    assert (
        await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED) is None
    )


async def test_too_many_pending_at_the_limit(store: Store) -> None:
    for _ in range(3):
        await store.create_elicitation(make_elicitation(), max_live_per_user=3)
    extra = make_elicitation()
    with pytest.raises(TooManyPending):
        await store.create_elicitation(extra, max_live_per_user=3)
    assert await store.get_elicitation(extra.id) is None  # nothing inserted
    await store.create_elicitation(make_elicitation(BOB), max_live_per_user=3)  # per user


async def test_opened_counts_expired_and_finished_do_not(store: Store, harness: Harness) -> None:
    short = make_elicitation(ttl=10)
    opened, done, failed = make_elicitation(), make_elicitation(), make_elicitation()
    for e in (short, opened, done, failed):
        await store.create_elicitation(e, max_live_per_user=4)
    await store.transition_elicitation(opened.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    with pytest.raises(TooManyPending):
        await store.create_elicitation(make_elicitation(), max_live_per_user=4)

    await store.transition_elicitation(done.id, ElicitationStatus.PENDING, ElicitationStatus.COMPLETE)
    await store.create_elicitation(make_elicitation(), max_live_per_user=4)  # complete frees a slot
    with pytest.raises(TooManyPending):
        await store.create_elicitation(make_elicitation(), max_live_per_user=4)

    await store.transition_elicitation(failed.id, ElicitationStatus.PENDING, ElicitationStatus.FAILED)
    await store.create_elicitation(make_elicitation(), max_live_per_user=4)  # failed frees a slot
    with pytest.raises(TooManyPending):
        await store.create_elicitation(make_elicitation(), max_live_per_user=4)

    harness.clock.advance(10)  # `short` expires
    await store.create_elicitation(make_elicitation(), max_live_per_user=4)
    with pytest.raises(TooManyPending):
        await store.create_elicitation(make_elicitation(), max_live_per_user=4)


async def test_concurrent_creates_respect_the_limit(store: Store) -> None:
    results = await asyncio.gather(
        *(store.create_elicitation(make_elicitation(), max_live_per_user=3) for _ in range(8)),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 3
    assert all(isinstance(r, TooManyPending) for r in results if r is not None)


async def test_transition_updates_the_stored_record(store: Store) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    updated = await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    assert updated == replace(e, status=ElicitationStatus.OPENED)
    assert await store.get_elicitation(e.id) == updated
    # Wrong expected status, or unknown id: no change.
    assert (
        await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.FAILED) is None
    )
    assert (
        await store.transition_elicitation("nope", ElicitationStatus.OPENED, ElicitationStatus.FAILED) is None
    )
    assert await store.get_elicitation(e.id) == updated
    final = await store.transition_elicitation(e.id, ElicitationStatus.OPENED, ElicitationStatus.COMPLETE)
    assert final is not None and final.status is ElicitationStatus.COMPLETE


async def test_concurrent_transitions_exactly_one_wins(store: Store) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    results = await asyncio.gather(
        *(
            store.transition_elicitation(e.id, ElicitationStatus.PENDING, new)
            for new in [ElicitationStatus.OPENED, ElicitationStatus.FAILED] * 4
        )
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert await store.get_elicitation(e.id) == winners[0]


# --- one-time records -----------------------------------------------------------------------


async def test_oauth_state_single_use(store: Store) -> None:
    state = make_state()
    await store.put_oauth_state(state)
    assert await store.take_oauth_state(state.state) == state
    assert await store.take_oauth_state(state.state) is None
    assert await store.take_oauth_state("never-stored") is None


async def test_concurrent_takes_exactly_one_gets_the_state(store: Store) -> None:
    state = make_state()
    await store.put_oauth_state(state)
    results = await asyncio.gather(*(store.take_oauth_state(state.state) for _ in range(8)))
    assert [r for r in results if r is not None] == [state]


async def test_expired_oauth_state_reads_as_absent(store: Store, harness: Harness) -> None:
    state, live = make_state(ttl=30), make_state(ttl=300)
    await store.put_oauth_state(state)
    await store.put_oauth_state(live)
    harness.clock.advance(30)
    assert await store.take_oauth_state(state.state) is None
    assert await store.take_oauth_state(live.state) == live


async def test_nonce_single_use_and_expiry(store: Store, harness: Harness) -> None:
    await store.put_nonce("n1", ttl_seconds=30)
    await store.put_nonce("n2", ttl_seconds=30)
    assert await store.take_nonce("n1") is True
    assert await store.take_nonce("n1") is False
    assert await store.take_nonce("unknown") is False
    harness.clock.advance(30)
    assert await store.take_nonce("n2") is False


async def test_concurrent_nonce_takes_exactly_one_wins(store: Store) -> None:
    await store.put_nonce("n", ttl_seconds=30)
    results = await asyncio.gather(*(store.take_nonce("n") for _ in range(8)))
    assert results.count(True) == 1


# --- lifecycle ------------------------------------------------------------------------------


async def test_durable_across_close_and_reopen(harness: Harness, keyring: KeyRing) -> None:
    store = await harness.open(keyring)
    conn, e, state = make_connection(), make_elicitation(), make_state()
    await store.put_connection(conn)
    await store.create_elicitation(e, max_live_per_user=5)
    opened = await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    await store.put_oauth_state(state)
    await store.put_nonce("n", ttl_seconds=60)
    await store.close()

    store = await harness.open(keyring)
    try:
        assert await store.get_connection(ALICE, "github", "1") == conn
        assert await store.get_elicitation(e.id) == opened
        assert await store.take_oauth_state(state.state) == state
        assert await store.take_nonce("n") is True
    finally:
        await store.close()


async def test_ping_and_closed_store(harness: Harness, keyring: KeyRing) -> None:
    store = await harness.open(keyring)
    await store.ping()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.ping()
    with pytest.raises(StoreUnavailable):
        await store.get_connection(ALICE, "github")
    await store.close()  # idempotent


async def test_backend_failure_is_store_unavailable_without_record_data(
    store: Store, harness: Harness
) -> None:
    conn = make_connection(provider="secret-provider", account="secret-account")
    harness.break_backend()
    with pytest.raises(StoreUnavailable) as info:
        await store.put_connection(conn)
    message = str(info.value)
    for value in ("secret-provider", "secret-account", "alice", conn.tokens.access_token):
        assert value not in message
    with pytest.raises(StoreUnavailable):
        await store.list_connections(ALICE)


def encoded_forms(secret: bytes) -> Iterator[bytes]:
    """`secret` as it would appear plain or inside any base64 / base64url text, at any alignment."""
    yield secret
    for offset in range(3):
        start = -(-offset * 8 // 6)  # first character not touched by the prefix
        end = (offset + len(secret)) * 8 // 6  # last character not touched by padding
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            yield encode(b"\0" * offset + secret)[start:end]


def test_encoded_forms_find_a_secret_at_any_alignment() -> None:
    secret = b"canary-" + secrets.token_hex(8).encode()
    for prefix in (b"", b"x", b"xy", b'{"access_token":"'):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            haystack = encode(prefix + secret + b'"}')
            assert any(form in haystack for form in encoded_forms(secret))
    assert not any(form in b"unrelated bytes" * 20 for form in encoded_forms(secret))


async def test_no_secret_at_rest(store: Store, harness: Harness) -> None:
    conn = make_connection()
    state = make_state()
    await store.put_connection(conn)
    await store.put_oauth_state(state)
    await store.put_nonce("nonce-" + secrets.token_hex(16), ttl_seconds=60)
    canaries = [conn.tokens.access_token, str(conn.tokens.refresh_token), state.code_verifier, state.state]

    def leaked(raw: bytes) -> list[str]:
        return [c for c in canaries if any(form in raw for form in encoded_forms(c.encode()))]

    raw = harness.raw_bytes()
    assert len(raw) > 0
    assert leaked(raw) == []
    await store.close()  # checkpoints the WAL into the main file
    assert leaked(harness.raw_bytes()) == []


# --- SQLite only ----------------------------------------------------------------------------


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
