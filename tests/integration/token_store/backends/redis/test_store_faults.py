"""Redis faults, each against a redis-server of the test's own (free port, temp dir, stopped at the end):
the server down or hung (every method fails fast with StoreUnavailable), restarted (the same store
object works again), killed with AOF on (no acknowledged connection lost), and a least-privilege
ACL user (the command set docs/redis.md documents is enough).

Skipped when /usr/bin/redis-server is missing, failed instead when the CI variable is set.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from tests.support.store_contract import (
    ACL_RULES,
    ALICE,
    FakeClock,
    RedisServer,
    make_connection,
    make_elicitation,
    make_state,
    redis_server,
)
from token_store import ElicitationStatus, KeyRing, RedisStore, StoreUnavailable, WebhookMessage

SOCKET_TIMEOUT = 0.5
SLACK = 0.3  # scheduling noise on a busy test machine


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always") as running:
        yield running


def every_method(store: RedisStore) -> dict[str, Callable[[], Awaitable[object]]]:
    conn, e, state = make_connection(), make_elicitation(), make_state()
    claimed = WebhookMessage("w1", "t", "{}", 1.0, 32.0)  # as `claim_webhooks` below returns it
    return {
        "put_connection": lambda: store.put_connection(conn),
        "get_connection": lambda: store.get_connection(ALICE, "github"),
        "get_connection(account)": lambda: store.get_connection(ALICE, "github", "1"),
        "list_connections": lambda: store.list_connections(ALICE),
        "delete_connection": lambda: store.delete_connection(conn.key),
        "delete_connections": lambda: store.delete_connections(ALICE, "github"),
        "create_elicitation": lambda: store.create_elicitation(e, max_live_per_user=5),
        "get_elicitation": lambda: store.get_elicitation(e.id),
        "transition_elicitation": lambda: store.transition_elicitation(
            e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED
        ),
        "open_elicitation": lambda: store.open_elicitation(replace(make_state(), elicitation=e)),
        "get_elicitation_with_connection": lambda: store.get_elicitation_with_connection(e.id),
        "live_elicitations": lambda: store.live_elicitations(ALICE),
        "complete_elicitation": lambda: store.complete_elicitation(conn, e.id),
        "put_oauth_state": lambda: store.put_oauth_state(state),
        "take_oauth_state": lambda: store.take_oauth_state(state.state),
        "put_nonce": lambda: store.put_nonce("n", ttl_seconds=60),
        "take_nonce": lambda: store.take_nonce("n"),
        "put_nonce in a slot": lambda: store.put_nonce("n2", ttl_seconds=60, slot="s"),
        "put_nonce replacing the slot's": lambda: store.put_nonce("n3", ttl_seconds=60, slot="s"),
        "reencrypt_all": store.reencrypt_all,
        "ping": store.ping,
        "find_connections": store.find_connections,
        "find_connections(sub)": lambda: store.find_connections(sub="alice"),
        "count_sealed_under": lambda: store.count_sealed_under("old"),
        "enqueue_webhook": lambda: store.enqueue_webhook(WebhookMessage("w1", "t", "{}", 1.0, 1.0)),
        "claim_webhooks": lambda: store.claim_webhooks(2.0, 30, 10),
        "settle_webhook": lambda: store.settle_webhook(claimed, 100.0),
        "settle_webhook(remove)": lambda: store.settle_webhook(claimed, None),
    }


async def assert_every_method_fails_fast(store: RedisStore) -> None:
    slow = {}
    for name, call in every_method(store).items():
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:
            await call()
        elapsed = time.monotonic() - started
        assert str(info.value).startswith(f"redis store: {name.split('(')[0].split(' ')[0]} failed"), name
        if elapsed > SOCKET_TIMEOUT + SLACK:
            slow[name] = round(elapsed, 2)
    assert slow == {}, f"slower than the socket timeout ({SOCKET_TIMEOUT}s)"


async def assert_store_works(store: RedisStore) -> None:
    conn, e, state = make_connection(account="after"), make_elicitation(), make_state()
    await store.ping()
    await store.put_connection(conn)
    assert await store.get_connection(ALICE, "github", "after") == conn
    await store.create_elicitation(e, max_live_per_user=50)  # scripts: reloaded after a restart
    assert await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    await store.put_oauth_state(state)
    assert await store.take_oauth_state(state.state) == state


async def test_server_down_fails_fast_and_the_same_store_recovers_after_restart(
    server: RedisServer, keyring: KeyRing
) -> None:
    store = await RedisStore.open(server.url, keyring, socket_timeout=SOCKET_TIMEOUT, clock=FakeClock())
    try:
        kept = make_connection(account="kept")
        await store.put_connection(kept)
        await assert_store_works(store)

        await asyncio.to_thread(server.stop)
        await assert_every_method_fails_fast(store)
        with pytest.raises(StoreUnavailable):
            await RedisStore.open(server.url, keyring, socket_timeout=SOCKET_TIMEOUT, clock=FakeClock())

        await asyncio.to_thread(server.start)  # same port, same data dir; script cache empty
        assert await store.get_connection(ALICE, "github", "kept") == kept
        await assert_store_works(store)
    finally:
        await store.close()


async def test_restart_while_idle_needs_no_reopen(server: RedisServer, keyring: KeyRing) -> None:
    # The pooled connection dies with the old server; the pool notices the closed socket when it
    # hands the connection out and reconnects. (The event loop keeps running meanwhile, as in a
    # real service: that is how the close is seen.)
    store = await RedisStore.open(server.url, keyring, socket_timeout=SOCKET_TIMEOUT, clock=FakeClock())
    try:
        await assert_store_works(store)
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)
        await assert_store_works(store)  # no StoreUnavailable even for the first call
    finally:
        await store.close()


async def test_hung_server_fails_within_the_socket_timeout(server: RedisServer, keyring: KeyRing) -> None:
    store = await RedisStore.open(server.url, keyring, socket_timeout=SOCKET_TIMEOUT, clock=FakeClock())
    try:
        await assert_store_works(store)
        server.pause()  # accepts TCP connections (kernel backlog) but never answers
        try:
            await assert_every_method_fails_fast(store)
        finally:
            server.resume()
        await assert_store_works(store)
    finally:
        await store.close()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["shutdown", "crash"])
async def test_aof_always_loses_no_connection(tmp_path: Path, keyring: KeyRing, how: signal.Signals) -> None:
    with redis_server(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always") as server:
        store = await RedisStore.open(server.url, keyring, socket_timeout=SOCKET_TIMEOUT, clock=FakeClock())
        try:
            conns = [make_connection(account=f"{i:02d}") for i in range(20)]
            for conn in conns:
                await store.put_connection(conn)  # acknowledged == fsynced under appendfsync always
            await asyncio.to_thread(server.stop, how)
            await asyncio.to_thread(server.start)
            assert await store.list_connections(ALICE) == conns  # same store object, nothing lost
        finally:
            await store.close()

    # And a fresh process on the same data dir reads them too.
    with redis_server(tmp_path / "redis", "--appendonly", "yes") as server:
        store = await RedisStore.open(server.url, keyring, clock=FakeClock())
        try:
            assert await store.list_connections(ALICE) == conns
        finally:
            await store.close()


# Records are made at T0 (see the support module), so every store here runs on a FakeClock at T0.
async def test_minimal_acl_user_can_do_everything(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as server:
        admin = server.client()
        try:
            admin.execute_command("ACL", "SETUSER", "mcp", *ACL_RULES.split())
            admin.execute_command("ACL", "SETUSER", "default", "off")  # no anonymous access
        finally:
            admin.close()
        url = f"redis://mcp:store-password@127.0.0.1:{server.port}/0"
        old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()

        store = await RedisStore.open(url, KeyRing([("old", old_key)]), clock=FakeClock())
        try:
            await store.put_connection(make_connection(account="1"))
            await store.put_oauth_state(make_state())
        finally:
            await store.close()

        store = await RedisStore.open(url, KeyRing([("new", new_key), ("old", old_key)]), clock=FakeClock())
        try:
            assert await store.reencrypt_all() == 2
            await assert_store_works(store)
            for name, call in every_method(store).items():
                await call()  # none is refused (NOPERM would surface as StoreUnavailable)
                assert name
        finally:
            await store.close()

        user = redis.Redis(host="127.0.0.1", port=server.port, username="mcp", password="store-password")
        try:
            with pytest.raises(redis.exceptions.NoPermissionError):
                user.flushall()  # the ACL is really in force
            with pytest.raises(redis.exceptions.NoPermissionError):
                user.set("not-our-prefix:x", "1")
        finally:
            user.close()
