"""The `Store` contract, run against every backend: embedded SQLite, Redis and PostgreSQL.

Tests talk to the store through the `Store` interface plus a `Harness` (tests/support/store_contract.py)
that reaches underneath it. Backend-specific checks live in test_store_sqlite.py,
test_store_redis.py, test_store_redis_faults.py and test_store_postgres.py. Redis cases skip
when Redis at 127.0.0.1:6379 is unreachable, PostgreSQL cases when no `initdb` is installed
(tests/support/postgres.py starts a private server); both fail instead when CI is set.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests import needs
from tests.support.store_contract import (
    ALICE,
    BOB,
    REDIS_URL,
    SLOT_TAGS,
    T0,
    ClusterHarness,
    Harness,
    PostgresHarness,
    PostgresSchema,
    RedisHarness,
    SentinelHarness,
    SQLiteHarness,
    encoded_forms,
    flip_ciphertext_byte,
    make_connection,
    make_elicitation,
    make_state,
    make_tokens,
    reach,
    redis_prefix,
)
from token_store import (
    CallbackOutcome,
    ClientRegistration,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    Deletion,
    ElicitationStatus,
    KeyRing,
    Store,
    StoreUnavailable,
    TooManyPending,
    Transition,
    UserRef,
    WebhookMessage,
    codec,
    copy_endpoints,
    slot_tag,
)
from token_store.models import DELETIONS_KEPT
from token_store.store_copy import Outcome, carry_deletion, copy_unless_deleted


@pytest.fixture(params=["sqlite", "redis", "sentinel", "cluster", "postgres"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    if request.param == "sqlite":
        yield SQLiteHarness(tmp_path / "data" / "store.sqlite3")
        return
    if request.param == "postgres":
        with PostgresSchema(request.getfixturevalue("postgres_server")) as schema:
            pg_harness = PostgresHarness(schema)
            try:
                yield pg_harness
            finally:
                for opened in pg_harness.stores:
                    await opened.close()
        return
    with redis_prefix() as prefix:
        redis_harness: RedisHarness = (
            SentinelHarness(request.getfixturevalue("sentinel_group"), prefix)
            if request.param == "sentinel"
            else ClusterHarness(request.getfixturevalue("cluster_group"), prefix)
            if request.param == "cluster"
            else RedisHarness(REDIS_URL, prefix)
        )
        try:
            yield redis_harness
        finally:
            for opened in redis_harness.stores:
                await opened.close()  # idempotent; covers stores a failed test left open
            redis_harness.cleanup()


@pytest.fixture
async def store(harness: Harness, keyring: KeyRing) -> AsyncIterator[Store]:
    opened = await harness.open(keyring)
    yield opened
    await opened.close()


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


async def test_list_at_one_provider_is_that_provider_only(store: Store) -> None:
    github = [make_connection(provider="github", account=a) for a in ("2", "10")]
    for conn in [
        *github,
        make_connection(provider="google", account="a"),
        make_connection(BOB, "github", "3"),
    ]:
        await store.put_connection(conn)
    assert await store.list_connections(ALICE, "github") == sorted(github, key=lambda c: c.key.account)
    assert await store.list_connections(ALICE, "slack") == []


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


# --- moving to another store (token_store/store_copy.py) ------------------------------------


async def remembered(store: Store) -> set[Deletion]:
    source, _ = copy_endpoints(store, store)
    return {deletion async for deletion in source.deletions()}


async def test_every_deletion_is_remembered_until_it_is_forgotten(store: Store, harness: Harness) -> None:
    one, three, kept = (
        make_connection(),
        make_connection(BOB, "slack", "9"),
        make_connection(BOB, "github", "5"),
    )
    for conn in (one, three, kept):
        await store.put_connection(conn)
    assert await store.delete_connection(one.key)
    assert not await store.delete_connection(make_connection(account="never").key)  # nothing deleted
    harness.clock.advance(10)
    assert await store.delete_connections(BOB, "slack") == [three]
    assert await remembered(store) == {Deletion(one.key, T0), Deletion(three.key, T0 + 10)}
    # Deleted again: the later deletion is the one remembered.
    await store.put_connection(one)
    harness.clock.advance(5)
    assert await store.delete_connection(one.key)
    assert await remembered(store) == {Deletion(one.key, T0 + 15), Deletion(three.key, T0 + 10)}
    assert await store.list_connections(BOB) == [kept]
    # Each is forgotten DELETIONS_KEPT after it was made (and purged by later writes).
    harness.clock.advance(DELETIONS_KEPT - 3)
    assert await remembered(store) == {Deletion(one.key, T0 + 15)}
    await store.delete_connection(kept.key)
    harness.clock.advance(10)
    assert await remembered(store) == {Deletion(kept.key, T0 + 12 + DELETIONS_KEPT)}


async def test_a_copy_step_writes_what_the_copy_rules_decide(
    store: Store, harness: Harness, keyring: KeyRing
) -> None:
    _, target = copy_endpoints(store, store)
    conn = make_connection()
    key, other = conn.key, make_connection(BOB)
    await store.put_connection(other)

    async def copy(c: Connection) -> Outcome:
        change = await target.change_connection(c.key, copy_unless_deleted(codec.seal_connection(keyring, c)))
        return change.outcome

    async def carry(deletion: Deletion) -> Outcome:
        return (await target.change_connection(deletion.key, carry_deletion(deletion))).outcome

    assert await copy(conn) is Outcome.COPIED
    assert await store.list_connections(ALICE) == [conn]  # opens, and is indexed like put_connection
    assert await copy(conn) is Outcome.KEPT  # as new as the target's
    assert await copy(replace(conn, updated_at=T0 - 1)) is Outcome.KEPT
    newer = replace(conn, tokens=make_tokens(), updated_at=T0 + 1)
    assert await copy(newer) is Outcome.COPIED
    assert await store.get_connection(ALICE, "github", "1") == newer
    # Deleted on the target: that grant, however refreshed since, is not brought back; a grant
    # made after the deletion is a new one and is.
    harness.clock.advance(100)
    assert await store.delete_connection(key)
    assert await copy(replace(newer, updated_at=T0 + 500)) is Outcome.DELETED
    assert await store.get_connection(ALICE, "github") is None
    regranted = replace(conn, tokens=make_tokens(), connected_at=T0 + 101, updated_at=T0 + 101)
    assert await copy(regranted) is Outcome.COPIED
    # A deletion carried over removes a grant made before it, remembers it, and leaves a later one.
    assert await carry(Deletion(key, T0 + 150)) is Outcome.REMOVED
    assert await store.get_connection(ALICE, "github") is None
    assert await carry(Deletion(key, T0 + 120)) is Outcome.NOTHING
    assert await remembered(store) == {Deletion(key, T0 + 150)}
    later = replace(regranted, connected_at=T0 + 160, updated_at=T0 + 160)
    assert await copy(later) is Outcome.COPIED
    assert await carry(Deletion(key, T0 + 155)) is Outcome.NOTHING
    assert await store.get_connection(ALICE, "github") == later
    # A deletion past DELETIONS_KEPT no longer counts.
    await store.delete_connection(key)
    harness.clock.advance(DELETIONS_KEPT)
    assert await copy(conn) is Outcome.COPIED
    assert await store.list_connections(BOB) == [other]


async def test_what_a_copy_reads_and_the_copy_window(store: Store, keyring: KeyRing) -> None:
    source, target = copy_endpoints(store, store)
    conns = [
        make_connection(),
        make_connection(account="2", updated_at=T0 + 3),
        make_connection(BOB, "slack", "x"),
    ]
    for conn in conns:
        await store.put_connection(conn)
    await store.set_connection_status(conns[1].key, ConnectionStatus.NEEDS_REAUTHORIZATION)
    await store.set_default_account(ALICE, "github", "2")
    sealed = {s.key: s async for s in source.sealed_connections()}
    assert set(sealed) == {c.key for c in conns}
    for conn in conns:
        got = sealed[conn.key]
        expected = await store.get_connection(conn.key.user, conn.key.provider, conn.key.account)
        assert expected is not None
        # Sealed as stored (the copy never opens it), and it opens to the token set put.
        assert replace(got, blob=b"") == replace(codec.seal_connection(keyring, expected), blob=b"")
        assert codec.open_tokens(keyring, conn.key, got.blob) == conn.tokens
    assert [d async for d in source.default_accounts()] == [(ALICE, "github", "2")]
    await target.copy_default_account(ALICE, "github", "1")  # a choice made on the target stays
    await target.copy_default_account(BOB, "slack", "x")
    assert await store.get_default_account(ALICE, "github") == "2"
    assert await store.get_default_account(BOB, "slack") == "x"
    assert await target.open_copy_window(T0, new=False) == T0
    assert await target.open_copy_window(T0 + 5, new=False) == T0
    assert await target.open_copy_window(T0 + 9, new=True) == T0 + 9


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


# --- connection status and compare-and-set replacement ---------------------------------------


def odd_times(conn: Connection) -> Connection:
    """`conn` with times whose shortest repr needs 17 significant digits: a backend that rounds a
    stored number anywhere (Redis's cjson encodes with 14 digits) breaks equality and the version check."""
    return replace(conn, connected_at=T0 + 0.1, updated_at=T0 + 1 / 3, refreshed_at=T0 + 2 / 3)


async def test_status_and_refreshed_at_round_trip(store: Store) -> None:
    plain = make_connection(account="plain")
    assert (plain.status, plain.refreshed_at) == (ConnectionStatus.OK, None)
    flagged = replace(
        make_connection(account="flagged"),
        status=ConnectionStatus.NEEDS_REAUTHORIZATION,
        refreshed_at=T0 + 5,
    )
    odd = odd_times(make_connection(account="odd"))
    for conn in (plain, flagged, odd):
        await store.put_connection(conn)
    assert await store.get_connection(ALICE, "github", "plain") == plain
    assert await store.get_connection(ALICE, "github", "flagged") == flagged
    assert await store.get_connection(ALICE, "github", "odd") == odd
    assert await store.list_connections(ALICE) == [flagged, odd, plain]
    assert await store.delete_connections(ALICE, "github") == [flagged, odd, plain]


async def test_replace_connection_is_a_compare_and_set_on_updated_at(store: Store, harness: Harness) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    refreshed = replace(conn, tokens=make_tokens(), updated_at=T0 + 10, refreshed_at=T0 + 10)
    assert await store.replace_connection(refreshed, expected_updated_at=T0) is True
    assert await store.get_connection(ALICE, "github", "1") == refreshed
    assert KeyRing.kid_of(harness.read_blob(conn.key)) == "k1"  # sealed, like put_connection

    # A second refresher that read the old version is refused, and changes nothing.
    late = replace(conn, tokens=make_tokens(), updated_at=T0 + 20, status=ConnectionStatus.REVOKED)
    blob = harness.read_blob(conn.key)
    assert await store.replace_connection(late, expected_updated_at=T0) is False
    assert await store.get_connection(ALICE, "github", "1") == refreshed
    assert await store.list_connections(ALICE) == [refreshed]
    assert harness.read_blob(conn.key) == blob

    assert await store.replace_connection(late, expected_updated_at=T0 + 10) is True
    assert await store.get_connection(ALICE, "github") == late


async def test_replace_connection_of_an_absent_record_is_refused(store: Store) -> None:
    conn = make_connection()
    assert await store.replace_connection(conn, expected_updated_at=T0) is False
    assert await store.get_connection(ALICE, "github") is None
    assert await store.list_connections(ALICE) == []
    # Deleted after it was read: replacing must not bring it back.
    await store.put_connection(conn)
    await store.delete_connection(conn.key)
    assert await store.replace_connection(replace(conn, updated_at=T0 + 1), expected_updated_at=T0) is False
    assert await store.get_connection(ALICE, "github") is None
    # Other accounts and users are not the same record.
    await store.put_connection(make_connection(account="2"))
    await store.put_connection(make_connection(BOB))
    assert await store.replace_connection(conn, expected_updated_at=T0) is False
    assert await store.get_connection(ALICE, "github", "1") is None


async def test_replace_connection_compares_exact_float_versions(store: Store) -> None:
    conn = odd_times(make_connection())
    await store.put_connection(conn)
    near = math.nextafter(conn.updated_at, math.inf)  # one ulp away is another version
    assert await store.replace_connection(replace(conn, updated_at=T0 + 50), near) is False
    newer = replace(conn, tokens=make_tokens(), updated_at=T0 + 2 / 3)
    assert await store.replace_connection(newer, conn.updated_at) is True
    assert await store.get_connection(ALICE, "github", "1") == newer


async def test_concurrent_replacements_exactly_one_wins(store: Store) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    candidates = [replace(conn, tokens=make_tokens(), updated_at=T0 + i) for i in range(1, 9)]
    results = await asyncio.gather(*(store.replace_connection(c, expected_updated_at=T0) for c in candidates))
    assert results.count(True) == 1
    winner = candidates[results.index(True)]
    assert await store.get_connection(ALICE, "github", "1") == winner


async def test_set_connection_status_leaves_tokens_and_version_alone(store: Store, harness: Harness) -> None:
    conn = odd_times(make_connection())
    other = make_connection(account="2")
    await store.put_connection(conn)
    await store.put_connection(other)
    blob = harness.read_blob(conn.key)
    for status in (ConnectionStatus.REFRESHING, ConnectionStatus.NEEDS_REAUTHORIZATION):
        assert await store.set_connection_status(conn.key, status) is True
        assert await store.get_connection(ALICE, "github", "1") == replace(conn, status=status)
        assert harness.read_blob(conn.key) == blob
    assert await store.set_connection_status(conn.key, ConnectionStatus.NEEDS_REAUTHORIZATION) is True
    flagged = replace(conn, status=ConnectionStatus.NEEDS_REAUTHORIZATION)
    assert await store.list_connections(ALICE) == [flagged, other]  # the other account is untouched

    # A status change is not a new version: a refresh that read `conn` may still replace it.
    refreshed = replace(conn, tokens=make_tokens(), updated_at=T0 + 10, refreshed_at=T0 + 10)
    assert await store.replace_connection(refreshed, expected_updated_at=conn.updated_at) is True
    assert await store.get_connection(ALICE, "github", "1") == refreshed


async def test_set_connection_status_of_an_absent_record_is_refused(store: Store) -> None:
    key = make_connection().key
    assert await store.set_connection_status(key, ConnectionStatus.REVOKED) is False
    assert await store.get_connection(ALICE, "github") is None
    assert await store.list_connections(ALICE) == []
    bob = make_connection(BOB)
    await store.put_connection(bob)
    assert await store.set_connection_status(key, ConnectionStatus.REVOKED) is False
    assert await store.get_connection(BOB, "github", "1") == bob  # another user's record is another key


# --- locks ----------------------------------------------------------------------------------


# --- remembered default account ---------------------------------------------------------------


async def test_default_account_round_trip_per_user_and_provider(store: Store) -> None:
    assert await store.get_default_account(ALICE, "github") is None
    await store.set_default_account(ALICE, "github", "2")
    await store.set_default_account(BOB, "github", "7")
    await store.set_default_account(ALICE, "google", "g")
    assert await store.get_default_account(ALICE, "github") == "2"
    assert await store.get_default_account(BOB, "github") == "7"
    assert await store.get_default_account(ALICE, "google") == "g"
    await store.set_default_account(ALICE, "github", "10")  # a new choice replaces the old one
    assert await store.get_default_account(ALICE, "github") == "10"


async def test_default_account_is_forgotten_with_none(store: Store) -> None:
    await store.set_default_account(ALICE, "github", "2")
    await store.set_default_account(ALICE, "github", None)
    assert await store.get_default_account(ALICE, "github") is None
    await store.set_default_account(ALICE, "github", None)  # forgetting nothing is fine
    assert await store.get_default_account(ALICE, "github") is None


async def test_default_account_outlives_a_reopen_and_leaves_connections_alone(
    harness: Harness, keyring: KeyRing
) -> None:
    store = await harness.open(keyring)
    conn = make_connection(account="2")
    await store.put_connection(conn)
    await store.set_default_account(ALICE, "github", "2")
    await store.close()
    reopened = await harness.open(keyring)
    try:
        assert await reopened.get_default_account(ALICE, "github") == "2"
        assert await reopened.list_connections(ALICE) == [conn]
    finally:
        await reopened.close()


async def test_lock_acquire_and_release(store: Store) -> None:
    owner = await store.acquire_lock("refresh:alice:github:1", ttl_seconds=30)
    assert isinstance(owner, str) and len(owner) >= 16
    assert await store.acquire_lock("refresh:alice:github:1", ttl_seconds=30) is None
    other = await store.acquire_lock("refresh:alice:github:2", ttl_seconds=30)  # another name
    assert other is not None and other != owner

    assert await store.release_lock("refresh:alice:github:1", "not-the-owner") is False
    assert await store.release_lock("refresh:alice:github:1", other) is False  # owner of another lock
    assert await store.acquire_lock("refresh:alice:github:1", ttl_seconds=30) is None  # still held
    assert await store.release_lock("refresh:alice:github:1", owner) is True
    assert await store.release_lock("refresh:alice:github:1", owner) is False  # released once
    assert await store.release_lock("never-taken", owner) is False

    again = await store.acquire_lock("refresh:alice:github:1", ttl_seconds=30)
    assert again is not None and again != owner  # a fresh random owner token each time
    assert await store.release_lock("refresh:alice:github:2", other) is True


async def test_lock_held_reads_without_taking(store: Store, harness: Harness) -> None:
    assert await store.lock_held("refresh:x:failed") is False
    owner = await store.acquire_lock("refresh:x:failed", harness.short_lock_ttl)
    assert owner is not None
    # Many concurrent readers all see it, and none of them takes or frees it.
    assert all(await asyncio.gather(*(store.lock_held("refresh:x:failed") for _ in range(10))))
    assert await store.acquire_lock("refresh:x:failed", ttl_seconds=60) is None
    await harness.outlive_lock(harness.short_lock_ttl)
    assert await store.lock_held("refresh:x:failed") is False


async def test_concurrent_acquires_exactly_one_owner(store: Store) -> None:
    results = await asyncio.gather(*(store.acquire_lock("refresh:x", ttl_seconds=30) for _ in range(10)))
    owners = [r for r in results if r is not None]
    assert len(owners) == 1
    assert await store.release_lock("refresh:x", owners[0]) is True


async def test_expired_lock_is_taken_over_and_the_stale_owner_cannot_release_it(
    store: Store, harness: Harness
) -> None:
    ttl = harness.short_lock_ttl
    stale = await store.acquire_lock("refresh:x", ttl)
    assert stale is not None
    assert await store.acquire_lock("refresh:x", ttl) is None
    await harness.outlive_lock(ttl)

    results = await asyncio.gather(*(store.acquire_lock("refresh:x", ttl_seconds=60) for _ in range(10)))
    owners = [r for r in results if r is not None]
    assert len(owners) == 1 and owners[0] != stale
    current = owners[0]
    # The old owner's release (its work overran the TTL) must not free the new owner's lock.
    assert await store.release_lock("refresh:x", stale) is False
    assert await store.acquire_lock("refresh:x", ttl_seconds=60) is None
    assert await store.release_lock("refresh:x", current) is True
    assert await store.acquire_lock("refresh:x", ttl_seconds=60) is not None


async def test_expired_lock_released_by_its_owner_counts_as_not_held(store: Store, harness: Harness) -> None:
    ttl = harness.short_lock_ttl
    owner = await store.acquire_lock("refresh:x", ttl)
    assert owner is not None
    await harness.outlive_lock(ttl)
    assert await store.release_lock("refresh:x", owner) is False
    assert await store.acquire_lock("refresh:x", ttl_seconds=60) is not None


@pytest.mark.parametrize(
    "name",
    ["", "a:b*c?[x]\\", "ünïcödé ✓", "x" * 10_000, "refresh\0nul"],
    ids=["empty", "glob", "unicode", "long", "nul"],
)
async def test_lock_names_are_arbitrary_strings(store: Store, name: str) -> None:
    owner = await store.acquire_lock(name, ttl_seconds=30)
    assert owner is not None
    assert await store.acquire_lock(name, ttl_seconds=30) is None
    assert await store.acquire_lock(name + " ", ttl_seconds=30) is not None  # a different name
    assert await store.release_lock(name, owner) is True


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf])
async def test_lock_ttl_must_be_positive_and_finite(store: Store, ttl: float) -> None:
    with pytest.raises(ValueError, match="TTL"):
        await store.acquire_lock("refresh:x", ttl_seconds=ttl)
    assert await store.acquire_lock("refresh:x", ttl_seconds=30) is not None  # nothing was taken


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


async def test_live_elicitations_are_the_users_pending_and_opened_ones(
    store: Store, harness: Harness
) -> None:
    short, opened, done, failed = (make_elicitation(ttl=ttl) for ttl in (10, 700, 600, 600))
    for e in (short, opened, done, failed):
        await store.create_elicitation(e, max_live_per_user=5)
    await store.create_elicitation(make_elicitation(BOB), max_live_per_user=5)
    await store.transition_elicitation(opened.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    await reach(store, done, ElicitationStatus.COMPLETE)
    await store.transition_elicitation(failed.id, ElicitationStatus.PENDING, ElicitationStatus.FAILED)
    live = await store.live_elicitations(ALICE)
    assert [(e.id, e.status) for e in live] == [
        (opened.id, ElicitationStatus.OPENED),
        (short.id, ElicitationStatus.PENDING),
    ]
    assert live[1] == short
    harness.clock.advance(10)  # expires_at is exclusive
    assert [e.id for e in await store.live_elicitations(ALICE)] == [opened.id]
    assert await store.live_elicitations(UserRef("https://other.example", ALICE.sub)) == []


async def test_opened_counts_expired_and_finished_do_not(store: Store, harness: Harness) -> None:
    short = make_elicitation(ttl=10)
    opened, done, failed = make_elicitation(), make_elicitation(), make_elicitation()
    for e in (short, opened, done, failed):
        await store.create_elicitation(e, max_live_per_user=4)
    await store.transition_elicitation(opened.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    with pytest.raises(TooManyPending):
        await store.create_elicitation(make_elicitation(), max_live_per_user=4)

    await reach(store, done, ElicitationStatus.COMPLETE)
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


async def test_the_store_makes_exactly_the_transitions_of_the_status_machine(store: Store) -> None:
    """Every (from, to) pair through `transition_elicitation`, and `open_elicitation` and
    `complete_elicitation` from every status: each backend's SQL or Lua changes a status exactly
    when `Transition` has the change, and refuses every other pair before writing anything."""
    allowed = {transition.value for transition in Transition}
    for old in ElicitationStatus:
        for new in ElicitationStatus:
            e = make_elicitation()
            await store.create_elicitation(e, max_live_per_user=100)
            await reach(store, e, old)
            if (old, new) in allowed:
                changed = await store.transition_elicitation(e.id, old, new)
                assert changed == replace(e, status=new), (old, new)
            else:
                with pytest.raises(ValueError, match="not a transition"):
                    await store.transition_elicitation(e.id, old, new)
            stored = await store.get_elicitation(e.id)
            assert stored == replace(e, status=new if (old, new) in allowed else old), (old, new)
        # The batched steps are `Transition.OPEN` and `Transition.COMPLETE`, from `old` only.
        opening, completing = make_elicitation(), make_elicitation()
        for e in (opening, completing):
            await store.create_elicitation(e, max_live_per_user=100)
            await reach(store, e, old)
        opened = await store.open_elicitation(replace(make_state(), elicitation=opening))
        assert (opened is not None) == (old is Transition.OPEN.old), old
        completed = await store.complete_elicitation(make_connection(), completing.id)
        assert (completed is not None) == (old is Transition.COMPLETE.old), old
        assert await store.get_elicitation(opening.id) == replace(
            opening, status=Transition.OPEN.new if opened else old
        )
        assert await store.get_elicitation(completing.id) == replace(
            completing, status=Transition.COMPLETE.new if completed else old
        )


# --- batched flow steps ---------------------------------------------------------------------


async def test_open_elicitation_stores_the_state_and_opens_once(store: Store) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    state, late = replace(make_state(), elicitation=e), replace(make_state(), elicitation=e)
    opened = await store.open_elicitation(state)
    assert opened == replace(e, status=ElicitationStatus.OPENED)
    assert await store.get_elicitation(e.id) == opened
    # Single use: a second visit opens nothing and leaves no usable state behind.
    assert await store.open_elicitation(late) is None
    assert await store.take_oauth_state(late.state) is None
    assert await store.take_oauth_state(state.state) == state
    assert await store.get_elicitation(e.id) == opened


async def test_open_elicitation_of_an_unknown_expired_or_finished_one_stores_nothing(
    store: Store, harness: Harness
) -> None:
    unknown = replace(make_state(), elicitation=make_elicitation())
    assert await store.open_elicitation(unknown) is None
    assert await store.take_oauth_state(unknown.state) is None

    failed, short = make_elicitation(), make_elicitation(ttl=10)
    for e in (failed, short):
        await store.create_elicitation(e, max_live_per_user=5)
    await store.transition_elicitation(failed.id, ElicitationStatus.PENDING, ElicitationStatus.FAILED)
    harness.clock.advance(10)
    for e in (failed, short):
        state = replace(make_state(), elicitation=e)
        assert await store.open_elicitation(state) is None
        assert await store.take_oauth_state(state.state) is None
    assert await store.get_elicitation(failed.id) == replace(failed, status=ElicitationStatus.FAILED)


async def test_open_elicitation_with_a_state_that_exists_changes_nothing(store: Store) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    state = replace(make_state(), elicitation=e)
    await store.put_oauth_state(state)
    with pytest.raises(StoreUnavailable, match="open_elicitation"):
        await store.open_elicitation(state)
    assert await store.get_elicitation(e.id) == e  # still pending
    assert await store.take_oauth_state(state.state) == state


async def test_concurrent_opens_exactly_one_wins_and_only_its_state_is_stored(store: Store) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    states = [replace(make_state(), elicitation=e) for _ in range(8)]
    results = await asyncio.gather(*(store.open_elicitation(s) for s in states))
    assert [r for r in results if r is not None] == [replace(e, status=ElicitationStatus.OPENED)]
    taken = [await store.take_oauth_state(s.state) for s in states]
    winner = next(s for s, r in zip(states, results, strict=True) if r is not None)
    assert [t for t in taken if t is not None] == [winner]


async def test_complete_elicitation_stores_the_connection_and_completes_once(store: Store) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=1)
    await store.open_elicitation(replace(make_state(), elicitation=e))
    conn = make_connection()
    completed = await store.complete_elicitation(conn, e.id)
    assert completed == replace(e, status=ElicitationStatus.COMPLETE)
    assert await store.get_elicitation(e.id) == completed
    assert await store.get_connection(ALICE, "github", "1") == conn
    assert await store.list_connections(ALICE) == [conn]  # indexed like put_connection
    await store.create_elicitation(make_elicitation(), max_live_per_user=1)  # complete frees the slot
    # Once: a second completion stores the newer token set but completes nothing.
    newer = replace(conn, tokens=make_tokens(), updated_at=T0 + 1)
    assert await store.complete_elicitation(newer, e.id) is None
    assert await store.get_connection(ALICE, "github", "1") == newer


async def test_complete_elicitation_stores_the_connection_even_when_not_opened(store: Store) -> None:
    pending = make_elicitation()
    await store.create_elicitation(pending, max_live_per_user=5)
    conn = make_connection(provider="slack")
    assert await store.complete_elicitation(conn, pending.id) is None
    assert await store.get_elicitation(pending.id) == pending
    other = make_connection()
    assert await store.complete_elicitation(other, "unknown-id") is None
    assert await store.list_connections(ALICE) == [other, conn]


async def opened_elicitation(store: Store) -> str:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    return e.id


async def test_complete_elicitation_over_a_stored_connection_keeps_its_connected_at(store: Store) -> None:
    # A label holding the member's name in text: the Redis script edits the stored JSON as text.
    first = replace(odd_times(make_connection()), account_label='a"connected_at":1,')
    assert await store.complete_elicitation(first, await opened_elicitation(store)) is not None
    stored = await store.get_connection(ALICE, "github", "1")
    assert stored == first  # a new connection: its own connected_at
    assert await store.set_connection_status(first.key, ConnectionStatus.NEEDS_REAUTHORIZATION)
    reconnect = Connection(
        first.key, make_tokens(), 'b"connected_at":2,', connected_at=T0 + 100, updated_at=T0 + 100 + 1 / 3
    )
    assert await store.complete_elicitation(reconnect, await opened_elicitation(store)) is not None
    stored = await store.get_connection(ALICE, "github", "1")
    # The stored connected_at to the bit (17 significant digits); everything else is the new one's.
    assert stored is not None and stored.connected_at == first.connected_at
    assert stored == replace(reconnect, connected_at=first.connected_at)
    assert stored.status is ConnectionStatus.OK and stored.refreshed_at is None
    # Another account at the same provider is a new connection.
    other = replace(make_connection(account="2"), connected_at=T0 + 7)
    assert await store.complete_elicitation(other, await opened_elicitation(store)) is not None
    assert await store.get_connection(ALICE, "github", "2") == other
    # put_connection is unchanged: it replaces connected_at too.
    await store.put_connection(reconnect)
    assert await store.get_connection(ALICE, "github", "1") == reconnect


async def test_concurrent_completions_exactly_one_wins(store: Store) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    conns = [make_connection(account=str(i)) for i in range(6)]
    results = await asyncio.gather(*(store.complete_elicitation(c, e.id) for c in conns))
    assert [r for r in results if r is not None] == [replace(e, status=ElicitationStatus.COMPLETE)]
    assert len(await store.list_connections(ALICE)) == len(conns)


async def test_get_elicitation_with_connection_reads_both(store: Store, harness: Harness) -> None:
    e = make_elicitation(ttl=60)
    await store.create_elicitation(e, max_live_per_user=5)
    assert await store.get_elicitation_with_connection(e.id) == (e, None)
    # Only the elicitation's user at its provider counts.
    await store.put_connection(make_connection(BOB))
    await store.put_connection(make_connection(provider="slack"))
    assert await store.get_elicitation_with_connection(e.id) == (e, None)
    older, newer = make_connection(account="1"), make_connection(account="2", updated_at=T0 + 5)
    for conn in (older, newer):
        await store.put_connection(conn)
    opened = await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    assert await store.get_elicitation_with_connection(e.id) == (opened, newer)
    # As get_connection: the newest that fails to decrypt reads as absent; the next one answers.
    harness.write_blob(newer.key, flip_ciphertext_byte(harness.read_blob(newer.key)))
    assert await store.get_elicitation_with_connection(e.id) == (opened, older)
    assert await store.get_connection(ALICE, "github") == older
    assert await store.get_elicitation_with_connection("unknown") is None
    harness.clock.advance(60)
    assert await store.get_elicitation_with_connection(e.id) is None


# --- one-time records -----------------------------------------------------------------------


async def test_ids_minted_before_slot_tags_were_masked_still_resolve(store: Store) -> None:
    """An id, state and nonce minted before (the user's slot tag in clear, then the random bits),
    during a rolling upgrade or in flight at it, still find their records, on Cluster too (the
    slot named in clear is the user's); another user's flow, minted now, works beside them."""
    legacy = replace(make_elicitation(ALICE), id=slot_tag(ALICE) + secrets.token_urlsafe(32))
    state = replace(make_state(), elicitation=legacy, state=slot_tag(ALICE) + secrets.token_urlsafe(32))
    bob = make_elicitation(BOB)
    for elicitation in (legacy, bob):
        await store.create_elicitation(elicitation, max_live_per_user=5)
    assert (await store.get_elicitation(legacy.id)) is not None
    opened = await store.open_elicitation(state)
    assert opened is not None and opened.id == legacy.id
    assert (await store.take_oauth_state(state.state)) is not None
    completed = await store.complete_elicitation(make_connection(ALICE), legacy.id)
    assert completed is not None and completed.status is ElicitationStatus.COMPLETE
    assert await store.get_connection(ALICE, "github") is not None
    nonce = slot_tag(ALICE) + secrets.token_urlsafe(32)
    await store.put_nonce(nonce, ttl_seconds=30, slot="alice-question")
    assert await store.take_nonce(nonce) is True
    await store.transition_elicitation(bob.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    assert await store.complete_elicitation(make_connection(BOB), bob.id) is not None


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


async def test_a_callback_outcome_is_read_again_until_it_expires_and_the_first_one_stays(
    store: Store, harness: Harness
) -> None:
    """The outcome a callback leaves under its state's hash: read (not taken) by each repeat, the
    first one put kept (a second put changes nothing), gone at `expires_at`, one per state."""
    first = CallbackOutcome(
        request="digest-1",
        outcome="completed",
        provider="mockhub",
        account_label="octocat",
        expires_at=T0 + 60,
    )
    await store.put_callback_outcome("state-1", first)
    await store.put_callback_outcome("state-1", replace(first, request="digest-2", account_label="mallory"))
    assert await store.get_callback_outcome("state-1") == first
    assert await store.get_callback_outcome("state-1") == first
    assert await store.get_callback_outcome("state-2") is None
    harness.clock.advance(60)
    assert await store.get_callback_outcome("state-1") is None


async def test_nonce_single_use_and_expiry(store: Store, harness: Harness) -> None:
    await store.put_nonce("n1", ttl_seconds=30)
    await store.put_nonce("n2", ttl_seconds=30)
    assert await store.take_nonce("n1") is True
    assert await store.take_nonce("n1") is False
    assert await store.take_nonce("unknown") is False
    harness.clock.advance(30)
    assert await store.take_nonce("n2") is False


async def test_a_nonce_slot_holds_one_live_nonce(store: Store, harness: Harness) -> None:
    """Putting a nonce under a slot replaces the slot's last one; other slots and unslotted nonces
    are untouched, and however many puts, the slot holds one record."""
    await store.put_nonce("free", ttl_seconds=30)
    await store.put_nonce("other", ttl_seconds=30, slot="bob")
    before = harness.count_nonces()
    for n in range(50):
        await store.put_nonce(f"alice-{n}", ttl_seconds=30, slot="alice")
    assert harness.count_nonces() == before + 1
    assert await store.take_nonce("alice-0") is False  # replaced
    assert await store.take_nonce("alice-48") is False
    assert await store.take_nonce("alice-49") is True
    assert await store.take_nonce("alice-49") is False  # still single use
    assert await store.take_nonce("other") is True
    assert await store.take_nonce("free") is True
    # A taken slot's next nonce works, and the same nonce put twice under its slot stays valid.
    await store.put_nonce("alice-again", ttl_seconds=30, slot="alice")
    await store.put_nonce("alice-again", ttl_seconds=30, slot="alice")
    assert await store.take_nonce("alice-again") is True


async def test_concurrent_puts_in_one_slot_leave_one_live_nonce(store: Store, harness: Harness) -> None:
    # One slot's nonces carry the same slot tag, as the service mints them (`mint_opaque_id(owner)`).
    nonces = [SLOT_TAGS.mint(ALICE) for _ in range(8)]
    before = harness.count_nonces()
    await asyncio.gather(*(store.put_nonce(nonce, ttl_seconds=30, slot="s") for nonce in nonces))
    assert harness.count_nonces() == before + 1
    taken = await asyncio.gather(*(store.take_nonce(nonce) for nonce in nonces))
    assert taken.count(True) == 1


async def test_concurrent_nonce_takes_exactly_one_wins(store: Store) -> None:
    await store.put_nonce("n", ttl_seconds=30)
    results = await asyncio.gather(*(store.take_nonce("n") for _ in range(8)))
    assert results.count(True) == 1


# --- lifecycle ------------------------------------------------------------------------------


async def test_durable_across_close_and_reopen(harness: Harness, keyring: KeyRing) -> None:
    store = await harness.open(keyring)
    conn, e, state = make_connection(), make_elicitation(), make_state()
    await store.put_connection(conn)
    refreshed = replace(make_connection(account="2"), refreshed_at=T0 + 1, updated_at=T0 + 1)
    await store.put_connection(make_connection(account="2"))
    assert await store.replace_connection(refreshed, expected_updated_at=T0)
    assert await store.set_connection_status(refreshed.key, ConnectionStatus.NEEDS_REAUTHORIZATION)
    await store.create_elicitation(e, max_live_per_user=5)
    opened = await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    await store.put_oauth_state(state)
    await store.put_nonce("n", ttl_seconds=60)
    owner = await store.acquire_lock("refresh:x", ttl_seconds=60)
    assert owner is not None
    await store.close()

    store = await harness.open(keyring)
    try:
        assert await store.get_connection(ALICE, "github", "1") == conn
        assert await store.get_connection(ALICE, "github", "2") == replace(
            refreshed, status=ConnectionStatus.NEEDS_REAUTHORIZATION
        )
        assert await store.get_elicitation(e.id) == opened
        assert await store.take_oauth_state(state.state) == state
        assert await store.take_nonce("n") is True
        assert await store.acquire_lock("refresh:x", ttl_seconds=60) is None  # still held
        assert await store.release_lock("refresh:x", owner) is True
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
    conn = make_connection()
    for call in (
        lambda: store.replace_connection(conn, expected_updated_at=T0),
        lambda: store.set_connection_status(conn.key, ConnectionStatus.REVOKED),
        lambda: store.acquire_lock("refresh:x", ttl_seconds=30),
        lambda: store.release_lock("refresh:x", "owner"),
    ):
        with pytest.raises(StoreUnavailable):
            await call()
    await store.close()  # idempotent


async def test_backend_failure_is_store_unavailable_without_record_data(
    store: Store, harness: Harness
) -> None:
    conn = make_connection(provider="secret-provider", account="secret-account")
    await harness.break_backend()
    with pytest.raises(StoreUnavailable) as info:
        await store.put_connection(conn)
    message = str(info.value)
    for value in ("secret-provider", "secret-account", "alice", conn.tokens.access_token):
        assert value not in message
    with pytest.raises(StoreUnavailable):
        await store.list_connections(ALICE)
    for call in (
        lambda: store.replace_connection(conn, expected_updated_at=T0),
        lambda: store.set_connection_status(conn.key, ConnectionStatus.REVOKED),
        lambda: store.acquire_lock("secret-lock-name", ttl_seconds=30),
        lambda: store.release_lock("secret-lock-name", "secret-owner"),
    ):
        with pytest.raises(StoreUnavailable) as info:
            await call()
        for value in ("secret-provider", "secret-account", "secret-lock-name", "secret-owner"):
            assert value not in str(info.value)


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
    old = make_connection(account="replaced")
    new = replace(old, tokens=make_tokens(), updated_at=T0 + 1)
    await store.put_connection(old)
    assert await store.replace_connection(new, expected_updated_at=T0)  # sealed like put_connection
    await store.put_oauth_state(state)
    await store.put_nonce("nonce-" + secrets.token_hex(16), ttl_seconds=60)
    canaries = [conn.tokens.access_token, str(conn.tokens.refresh_token), state.code_verifier, state.state]
    canaries += [new.tokens.access_token, str(new.tokens.refresh_token)]

    def leaked(raw: bytes) -> list[str]:
        return [c for c in canaries if any(form in raw for form in encoded_forms(c.encode()))]

    raw = harness.raw_bytes()
    assert len(raw) > 0
    assert leaked(raw) == []
    await store.close()  # checkpoints the WAL into the main file
    assert leaked(harness.raw_bytes()) == []


# --- key rotation: reencrypt_all ------------------------------------------------------------


async def test_reencrypt_all_rewrites_old_kid_records(harness: Harness) -> None:
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    old_records = [
        make_connection(account="a"),
        make_connection(provider="google", account="b"),
        make_connection(BOB, "github", "c"),
    ]
    tampered = make_connection(account="tampered")
    for conn in [*old_records, tampered]:
        await store.put_connection(conn)
    state = make_state()
    await store.put_oauth_state(state)
    await store.close()
    bad_blob = flip_ciphertext_byte(harness.read_blob(tampered.key))
    harness.write_blob(tampered.key, bad_blob)

    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))
    try:
        current = make_connection(account="current")  # already under the primary key
        await store.put_connection(current)
        assert await store.reencrypt_all() == len(old_records) + 1  # + the OAuth state
        for conn in [*old_records, current]:
            assert KeyRing.kid_of(harness.read_blob(conn.key)) == "new"
        assert harness.read_blob(tampered.key) == bad_blob  # left alone, not counted
        state_blob = harness.read_state_blob(state.state)
        assert state_blob is not None and KeyRing.kid_of(state_blob) == "new"
        assert await store.reencrypt_all() == 0  # nothing left to do
    finally:
        await store.close()

    store = await harness.open(KeyRing([("new", new_key)]))  # old key retired: all still readable
    try:
        for conn in [*old_records, current]:
            assert await store.get_connection(conn.key.user, conn.key.provider, conn.key.account) == conn
        assert await store.take_oauth_state(state.state) == state
    finally:
        await store.close()


async def test_reencrypt_all_does_not_overwrite_a_concurrent_write(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    raced, other = make_connection(account="raced"), make_connection(account="other")
    await store.put_connection(raced)
    await store.put_connection(other)
    await store.close()

    ring = KeyRing([("new", new_key), ("old", old_key)])
    store = await harness.open(ring)
    fresh_tokens = make_tokens()
    fresh_blob = ring.seal(fresh_tokens.to_json(), raced.key.associated_data())
    real_seal = KeyRing.seal
    raced_once = False

    def seal_with_a_race(self: KeyRing, plaintext: bytes, associated_data: bytes) -> bytes:
        # Between reencrypt_all's read and its write-back, another replica stores new tokens.
        nonlocal raced_once
        if not raced_once:
            raced_once = True
            harness.write_blob(raced.key, fresh_blob)
        return real_seal(self, plaintext, associated_data)

    monkeypatch.setattr(KeyRing, "seal", seal_with_a_race)
    try:
        assert await store.reencrypt_all() == 1  # only `other`
        assert raced_once
        assert harness.read_blob(raced.key) == fresh_blob  # the concurrent write survived
        assert await store.get_connection(ALICE, "github", "raced") == replace(raced, tokens=fresh_tokens)
        assert KeyRing.kid_of(harness.read_blob(other.key)) == "new"
        assert await store.get_connection(ALICE, "github", "other") == other
        assert await store.reencrypt_all() == 0
    finally:
        await store.close()


# --- operators: find_connections, count_sealed_under ------------------------------------------

CAROL_OTHER_AS = UserRef("https://other-as.example", "alice")  # same sub, another issuer


async def test_find_connections_filters_across_users(store: Store) -> None:
    records = [
        make_connection(ALICE, "github", "1"),
        make_connection(ALICE, "google", "a"),
        make_connection(BOB, "github", "2"),
        make_connection(CAROL_OTHER_AS, "github", "3"),
    ]
    for conn in reversed(records):
        await store.put_connection(conn)
    everyone = sorted(records, key=lambda c: (c.key.user, c.key.provider, c.key.account))
    assert await store.find_connections() == everyone
    assert await store.find_connections(provider="github") == [
        c for c in everyone if c.key.provider == "github"
    ]
    assert await store.find_connections(sub="alice") == [c for c in everyone if c.key.user.sub == "alice"]
    assert await store.find_connections(sub="alice", iss=ALICE.iss) == records[:2]
    assert await store.find_connections(sub="alice", iss=ALICE.iss, provider="google") == [records[1]]
    assert await store.find_connections(iss=CAROL_OTHER_AS.iss) == [records[3]]
    assert await store.find_connections(provider="slack") == []


async def test_find_connections_skips_a_record_that_does_not_open(store: Store, harness: Harness) -> None:
    good, bad = make_connection(account="good"), make_connection(BOB, account="bad")
    await store.put_connection(good)
    await store.put_connection(bad)
    harness.write_blob(bad.key, flip_ciphertext_byte(harness.read_blob(bad.key)))
    assert await store.find_connections() == [good]


async def test_count_sealed_under_counts_token_sets_and_live_states(harness: Harness) -> None:
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    try:
        await store.put_connection(make_connection(account="a"))
        await store.put_connection(make_connection(BOB, account="b"))
        await store.put_oauth_state(make_state())
    finally:
        await store.close()
    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))
    try:
        await store.put_connection(make_connection(account="c"))
        assert await store.count_sealed_under("old") == 3
        assert await store.count_sealed_under("new") == 1
        assert await store.count_sealed_under("gone") == 0
        await store.reencrypt_all()
        assert await store.count_sealed_under("old") == 0
        assert await store.count_sealed_under("new") == 4
    finally:
        await store.close()


# --- webhook outbox -----------------------------------------------------------------------------


def make_webhook(message_id: str, *, due: float = T0, created_at: float = T0) -> WebhookMessage:
    body = json.dumps({"type": "connection.created", "data": {"sub": "alice"}})
    return WebhookMessage(message_id, "connection.created", body, created_at, due)


async def test_webhook_outbox_claims_due_messages_once_per_lease(store: Store) -> None:
    first, second = make_webhook("msg_1"), make_webhook("msg_2", created_at=T0 + 1)
    later = make_webhook("msg_later", due=T0 + 100)
    for message in (second, later, first):
        await store.enqueue_webhook(message)
    await store.enqueue_webhook(replace(first, body="{}"))  # the same id again: kept as it was
    claimed = await store.claim_webhooks(T0, lease_seconds=30, limit=10)
    assert [(m.id, m.body, m.attempts) for m in claimed] == [
        ("msg_1", first.body, 0),
        ("msg_2", second.body, 0),
    ]
    assert await store.claim_webhooks(T0 + 29, lease_seconds=30, limit=10) == []  # leased
    again = await store.claim_webhooks(T0 + 30, lease_seconds=30, limit=1)  # the lease ended
    assert [m.id for m in again] == ["msg_1"]


async def test_webhook_outbox_settles_by_retrying_or_removing(store: Store) -> None:
    await store.enqueue_webhook(make_webhook("msg_retry"))
    await store.enqueue_webhook(make_webhook("msg_done"))
    done, retry = await store.claim_webhooks(T0, lease_seconds=30, limit=10)  # oldest first, then by id
    assert await store.settle_webhook(retry, retry_at=T0 + 5)
    assert await store.settle_webhook(done, retry_at=None)
    assert not await store.settle_webhook(make_webhook("msg_unknown"), retry_at=T0)  # nothing to settle
    assert await store.claim_webhooks(T0 + 4, lease_seconds=30, limit=10) == []
    [retried] = await store.claim_webhooks(T0 + 5, lease_seconds=30, limit=10)
    assert (retried.id, retried.attempts) == ("msg_retry", 1)
    assert await store.settle_webhook(retried, retry_at=None)
    assert await store.claim_webhooks(T0 + 10_000, lease_seconds=30, limit=10) == []


async def test_a_claimer_whose_lease_ended_cannot_settle_over_the_next_claimers_lease(store: Store) -> None:
    """Replica A's lease ends mid-attempt and replica B claims the message: A's late settle
    (a retry or a removal) changes nothing, so B's lease holds, nobody else claims the message
    while B sends it, and each attempt is counted once. Another message is unaffected."""
    await store.enqueue_webhook(make_webhook("msg_slow"))
    await store.enqueue_webhook(make_webhook("msg_other", due=T0 + 80, created_at=T0 + 1))
    [held_by_a] = await store.claim_webhooks(T0, lease_seconds=30, limit=10)
    [held_by_b] = await store.claim_webhooks(T0 + 30, lease_seconds=30, limit=10)  # A's lease ended
    assert held_by_b.id == held_by_a.id == "msg_slow" and held_by_b.next_attempt_at == T0 + 60
    assert not await store.settle_webhook(held_by_a, retry_at=T0 + 35)
    assert not await store.settle_webhook(held_by_a, retry_at=None)
    assert await store.claim_webhooks(T0 + 59, lease_seconds=30, limit=10) == []  # B's lease holds
    assert await store.settle_webhook(held_by_b, retry_at=T0 + 100)
    slow, other = await store.claim_webhooks(T0 + 100, lease_seconds=30, limit=10)
    assert (slow.id, slow.attempts) == ("msg_slow", 1)  # B's attempt only
    assert (other.id, other.attempts) == ("msg_other", 0)
    assert await store.settle_webhook(other, retry_at=None)  # the other message: settled as usual


async def test_concurrent_claims_take_each_due_message_once(store: Store) -> None:
    for n in range(4):
        await store.enqueue_webhook(make_webhook(f"msg_{n}", created_at=T0 + n))
    claims = await asyncio.gather(*(store.claim_webhooks(T0, lease_seconds=30, limit=1) for _ in range(8)))
    assert sorted(m.id for claimed in claims for m in claimed) == [f"msg_{n}" for n in range(4)]


async def test_webhook_outbox_survives_reopening(harness: Harness, keyring: KeyRing) -> None:
    store = await harness.open(keyring)
    await store.enqueue_webhook(make_webhook("msg_durable"))
    await store.close()
    store = await harness.open(keyring)
    try:
        assert [m.id for m in await store.claim_webhooks(T0, 30, 10)] == ["msg_durable"]
    finally:
        await store.close()


# --- the skip rule --------------------------------------------------------------------------


@pytest.mark.parametrize("ci", ["", "true"])
def test_missing_redis_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(needs, "REDIS_PORT", needs.free_port())  # nothing listens there
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected) as info:
        needs.require_redis()
    assert "Redis at 127.0.0.1:" in str(info.value)
    if ci:
        assert str(info.value).startswith("CI requires Redis at 127.0.0.1:")


# --- client registrations -----------------------------------------------------------------------

AS_ISSUER = "https://as.downstream.example"
REDIRECT = "https://mcp.example.com/callback/linear"


def make_registration(client_id: str = "client-1", *, redirect_uri: str = REDIRECT) -> ClientRegistration:
    return ClientRegistration(
        issuer=AS_ISSUER,
        redirect_uri=redirect_uri,
        client_id=client_id,
        client_secret=f"secret-of-{client_id}-{secrets.token_hex(8)}",
        token_endpoint_auth_method="client_secret_basic",
        registered_at=T0,
        secret_expires_at=None,
    )


async def test_client_registration_first_stored_wins_and_is_sealed(
    harness: Harness, keyring: KeyRing
) -> None:
    store = await harness.open(keyring)
    try:
        assert await store.get_client_registration(AS_ISSUER, REDIRECT) is None
        first, second = make_registration("first"), make_registration("second")
        assert await store.add_client_registration(first) == first
        # A second registration for the same (issuer, redirect URI) keeps the first one stored.
        assert await store.add_client_registration(second) == first
        assert await store.get_client_registration(AS_ISSUER, REDIRECT) == first
        other = make_registration("other", redirect_uri=REDIRECT + "2")
        assert await store.add_client_registration(other) == other
        assert await store.get_client_registration(AS_ISSUER, REDIRECT + "2") == other
        assert await store.get_client_registration(AS_ISSUER + "/x", REDIRECT) is None
    finally:
        await store.close()
    assert first.client_secret is not None
    assert first.client_secret.encode() not in harness.raw_bytes()  # sealed at rest
    assert repr(first).find(first.client_secret) == -1


async def test_concurrent_client_registrations_agree_on_one(store: Store) -> None:
    candidates = [make_registration(f"client-{n}") for n in range(8)]
    kept = await asyncio.gather(*(store.add_client_registration(c) for c in candidates))
    assert len({r.client_id for r in kept}) == 1
    assert await store.get_client_registration(AS_ISSUER, REDIRECT) == kept[0]


async def test_client_registration_removed_only_for_its_client(store: Store) -> None:
    registration = make_registration("mine")
    await store.add_client_registration(registration)
    assert not await store.remove_client_registration(AS_ISSUER, REDIRECT, "someone-else")
    assert await store.get_client_registration(AS_ISSUER, REDIRECT) == registration
    assert await store.remove_client_registration(AS_ISSUER, REDIRECT, "mine")
    assert await store.get_client_registration(AS_ISSUER, REDIRECT) is None
    assert not await store.remove_client_registration(AS_ISSUER, REDIRECT, "mine")
    replacement = make_registration("next")
    assert await store.add_client_registration(replacement) == replacement


async def test_client_registrations_rotate_with_the_key_ring(harness: Harness) -> None:
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    registration = make_registration("rotated")
    store = await harness.open(KeyRing([("old", old_key)]))
    try:
        await store.add_client_registration(registration)
    finally:
        await store.close()
    store = await harness.open(KeyRing([("unknown", new_key)]))
    try:  # a record that does not open reads as absent
        assert await store.get_client_registration(AS_ISSUER, REDIRECT) is None
    finally:
        await store.close()
    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))
    try:
        assert await store.count_client_registrations_sealed_under("old") == 1
        assert await store.reencrypt_client_registrations() == 1
        assert await store.reencrypt_client_registrations() == 0
        assert await store.count_client_registrations_sealed_under("old") == 0
        assert await store.count_client_registrations_sealed_under("new") == 1
    finally:
        await store.close()
    store = await harness.open(KeyRing([("new", new_key)]))
    try:
        assert await store.get_client_registration(AS_ISSUER, REDIRECT) == registration
    finally:
        await store.close()
