"""Redis behind Sentinel, against the session's private group (a primary, a replica, three
sentinels): after the primary dies the same store object follows the promoted replica by itself
(calls in flight fail with StoreUnavailable, the next ones succeed), and `wait_replicas` makes a
stored token set wait for a replica's acknowledgement (`require_replica_acknowledgement`).

The store contract suite also runs on this group (test_store_contract.py, `[sentinel]`).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from tests.needs import SentinelGroup
from tests.support.store_contract import ALICE, BOB, FakeClock, make_connection
from token_store import KeyRing, RedisStore, StoreUnavailable

FIRST_GOOD_CALL_SECONDS = 10  # the goal for the first good call after a failover


@pytest.fixture
async def prefix(sentinel_group: SentinelGroup) -> AsyncIterator[str]:
    name = f"test-{uuid.uuid4().hex}:"
    yield name
    raw = sentinel_group.primary()
    try:
        keys = list(raw.scan_iter(match=name + "*", count=500))
        if keys:
            raw.unlink(*keys)
    finally:
        raw.close()


async def test_a_replica_acknowledges_a_stored_connection(
    sentinel_group: SentinelGroup, keyring: KeyRing, prefix: str
) -> None:
    store = await RedisStore.open(
        sentinel_group.url(), keyring, prefix=prefix, clock=FakeClock(), wait_replicas=1, wait_timeout=1
    )
    try:
        conn = make_connection()
        await store.put_connection(conn)
        assert await store.get_connection(ALICE, "github") == conn
    finally:
        await store.close()


async def test_a_write_no_replica_acknowledges_fails_and_other_users_still_work(
    sentinel_group: SentinelGroup, keyring: KeyRing, prefix: str
) -> None:
    # Two replicas asked for, one exists: never acknowledged, so the write reports failure.
    waiting = await RedisStore.open(
        sentinel_group.url(), keyring, prefix=prefix, clock=FakeClock(), wait_replicas=2, wait_timeout=0.1
    )
    plain = await RedisStore.open(sentinel_group.url(), keyring, prefix=prefix, clock=FakeClock())
    try:
        with pytest.raises(StoreUnavailable, match="not acknowledged by 2 replica"):
            await waiting.put_connection(make_connection())
        with pytest.raises(StoreUnavailable, match="not acknowledged"):
            await waiting.replace_connection(make_connection(), expected_updated_at=0.0)
        bob = make_connection(BOB)
        await plain.put_connection(bob)
        assert await plain.get_connection(BOB, "github") == bob
    finally:
        await waiting.close()
        await plain.close()


@pytest.mark.slow  # the sentinels' failover
async def test_after_the_primary_dies_the_same_store_follows_the_promoted_replica(
    sentinel_group: SentinelGroup, keyring: KeyRing, prefix: str
) -> None:
    store = await RedisStore.open(
        sentinel_group.url(),
        keyring,
        prefix=prefix,
        clock=FakeClock(),
        socket_timeout=2.0,
        wait_replicas=1,
        wait_timeout=1.5,
    )
    try:
        alice = make_connection()
        await store.put_connection(alice)  # acknowledged by the replica: survives the failover
        old = sentinel_group.primary_port()
        dead = next(node for node in sentinel_group.nodes if node.port == old)
        dead.stop(signal.SIGKILL)
        started = time.monotonic()
        failed = 0
        while True:
            try:
                found = await store.get_connection(ALICE, "github")
                break
            except StoreUnavailable as exc:
                # Clean: the method's name and the error class, nothing of the record or URL.
                assert str(exc).startswith("redis store: get_connection failed (")
                failed += 1
                assert time.monotonic() - started < FIRST_GOOD_CALL_SECONDS
                await asyncio.sleep(0.1)  # the test: calls keep failing cleanly until the promotion
        assert found == alice
        assert sentinel_group.primary_port() != old
        bob = make_connection(BOB)
        with pytest.raises(StoreUnavailable, match="not acknowledged"):
            await store.put_connection(bob)  # the new primary has no replica yet
        sentinel_group.restart_stopped_as_replicas()
        await store.put_connection(bob)
        assert await store.get_connection(BOB, "github") == bob
    finally:
        await store.close()
        sentinel_group.restart_stopped_as_replicas()
