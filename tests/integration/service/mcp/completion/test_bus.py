"""Completion bus: a completed flow reaches the hub of every replica (Redis pub/sub, sharded on
Cluster, PostgreSQL LISTEN/NOTIFY) or of the one process (LocalBus); a malformed message is
skipped, not fatal."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import anyio
import asyncpg
import pytest
import redis.asyncio as redis

from service.mcp.completion.bus import PostgresBus, RedisBus
from service.mcp.completion.hub import CompletionHub
from tests.needs import ClusterGroup
from tests.support.completion import FakeSession, elicitation
from tests.support.postgres import PostgresSchema, PostgresServer, terminate_clients
from token_store import ElicitationStatus, KeyRing, PendingElicitation, PostgresStore, StoreUnavailable

REDIS_URL = "redis://127.0.0.1:6379/0"


class WakingSession(FakeSession):
    def __init__(self) -> None:
        super().__init__()
        self.notified = anyio.Event()

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        await super().send_elicit_complete(elicitation_id)
        self.notified.set()


async def test_redis_bus_delivers_to_the_replica_that_holds_the_session() -> None:
    prefix = f"test-bus-{secrets.token_hex(6)}:"
    holder_hub, session = CompletionHub(clock=lambda: 1.0), WakingSession()
    holder_hub.register(elicitation(), session)
    holder = RedisBus(REDIS_URL, prefix, holder_hub)
    other = RedisBus(REDIS_URL, prefix, CompletionHub(clock=lambda: 1.0))
    async with holder.running(), other.running():
        with anyio.fail_after(5):
            await holder.subscribed.wait()
            await other.subscribed.wait()
        raw = redis.from_url(REDIS_URL)
        await raw.publish(f"{prefix}completions", b"not json")  # skipped, the listener goes on
        await raw.aclose()
        await other.publish(elicitation())  # published by the replica that got the callback
        with anyio.fail_after(5):
            await session.notified.wait()
    assert session.sent == ["e" * 43]


async def test_cluster_bus_delivers_over_a_shard_channel(cluster_group: ClusterGroup) -> None:
    prefix = f"test-bus-{secrets.token_hex(6)}:"
    holder_hub, session = CompletionHub(clock=lambda: 1.0), WakingSession()
    holder_hub.register(elicitation(), session)
    holder = RedisBus(cluster_group.url(), prefix, holder_hub)
    other = RedisBus(cluster_group.url(), prefix, CompletionHub(clock=lambda: 1.0))
    async with holder.running(), other.running():
        with anyio.fail_after(5):
            await holder.subscribed.wait()
            await other.subscribed.wait()
        raw = redis.RedisCluster(host="127.0.0.1", port=cluster_group.nodes[0].port)
        await raw.spublish(f"{prefix}completions", b"not json")  # skipped, the listener goes on
        await raw.aclose()
        await other.publish(elicitation())
        with anyio.fail_after(5):
            await session.notified.wait()
    assert session.sent == ["e" * 43]


async def test_cluster_bus_resubscribes_and_resyncs_after_its_shard_restarts(
    cluster_group: ClusterGroup,
) -> None:
    prefix = f"test-bus-{secrets.token_hex(6)}:"
    resynced = anyio.Event()
    count = 0

    async def on_resubscribed() -> None:
        nonlocal count
        count += 1
        if count == 2:
            resynced.set()

    hub, session = CompletionHub(clock=lambda: 1.0), WakingSession()
    hub.register(elicitation(), session)
    bus = RedisBus(cluster_group.url(), prefix, hub, on_resubscribed=on_resubscribed)
    async with bus.running():
        with anyio.fail_after(5):
            await bus.subscribed.wait()
        owner = cluster_group.node_for(f"{prefix}completions")
        await anyio.to_thread.run_sync(cluster_group.restart, owner)
        with anyio.fail_after(20):
            await resynced.wait()  # subscribed again, and the store read for what it missed
        await bus.publish(elicitation())
        with anyio.fail_after(5):
            await session.notified.wait()
    assert session.sent == ["e" * 43]


# --- PostgreSQL: LISTEN/NOTIFY carries the id, the store the record -------------------------------


@pytest.fixture
async def pg_store(postgres_server: PostgresServer) -> AsyncIterator[tuple[PostgresSchema, PostgresStore]]:
    with PostgresSchema(postgres_server) as schema:
        store = await PostgresStore.open(
            schema.url, KeyRing([("k1", KeyRing.generate_key())]), clock=lambda: 1.0
        )
        try:
            yield schema, store
        finally:
            await store.close()


async def finished_in(store: PostgresStore) -> PendingElicitation:
    """The test elicitation, stored and moved to COMPLETE (as the callback would)."""
    await store.create_elicitation(elicitation(), max_live_per_user=5)
    assert await store.transition_elicitation("e" * 43, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    done = await store.transition_elicitation("e" * 43, ElicitationStatus.OPENED, ElicitationStatus.COMPLETE)
    assert done is not None
    return done


async def test_postgres_bus_delivers_to_the_replica_that_holds_the_session(
    pg_store: tuple[PostgresSchema, PostgresStore],
) -> None:
    schema, store = pg_store
    channel = f"test_{secrets.token_hex(6)}"
    holder_hub, session = CompletionHub(clock=lambda: 1.0), WakingSession()
    holder_hub.register(elicitation(), session)
    holder = PostgresBus(schema.url, holder_hub, store.get_elicitation, channel=channel)
    other = PostgresBus(schema.url, CompletionHub(clock=lambda: 1.0), store.get_elicitation, channel=channel)
    async with holder.running(), other.running():
        with anyio.fail_after(5):
            await holder.subscribed.wait()
            await other.subscribed.wait()
        raw = await asyncpg.connect(schema.url)
        await raw.execute("SELECT pg_notify($1, 'no-such-elicitation')", channel)  # skipped
        await raw.close()
        await other.publish(await finished_in(store))  # by the replica that got the callback
        with anyio.fail_after(5):
            await session.notified.wait()
    assert session.sent == ["e" * 43]


async def test_postgres_bus_resyncs_from_the_store_after_its_connection_is_cut(
    pg_store: tuple[PostgresSchema, PostgresStore], postgres_server: PostgresServer
) -> None:
    schema, store = pg_store
    hub, session = CompletionHub(clock=lambda: 1.0), WakingSession()
    hub.register(elicitation(), session)
    resynced = anyio.Event()

    async def resync() -> None:
        await hub.resync(store.get_elicitation)
        resynced.set()

    bus = PostgresBus(
        schema.url, hub, store.get_elicitation, channel=f"test_{secrets.token_hex(6)}", on_resubscribed=resync
    )
    bus.KEEPALIVE_SECONDS = 0.2
    async with bus.running():
        with anyio.fail_after(5):
            await resynced.wait()
        resynced = anyio.Event()
        terminate_clients(postgres_server)  # the store's pool too: its reads must recover
        # Another replica finishes the flow while this listener is gone: its notice is lost here.
        other = await PostgresStore.open(
            schema.url, KeyRing([("k1", KeyRing.generate_key())]), clock=lambda: 1.0
        )
        try:
            await finished_in(other)
        finally:
            await other.close()
        with anyio.fail_after(10):
            await session.notified.wait()
        assert resynced.is_set()
    assert session.sent == ["e" * 43]


async def test_postgres_bus_resyncs_after_a_flood_overflows_its_queue(
    pg_store: tuple[PostgresSchema, PostgresStore],
) -> None:
    schema, store = pg_store
    channel = f"test_{secrets.token_hex(6)}"
    hub, session = CompletionHub(clock=lambda: 1.0), WakingSession()
    hub.register(elicitation(), session)

    async def resync() -> None:
        await hub.resync(store.get_elicitation)

    bus = PostgresBus(schema.url, hub, store.get_elicitation, channel=channel, on_resubscribed=resync)
    bus.QUEUE = 1
    async with bus.running():
        with anyio.fail_after(5):
            await bus.subscribed.wait()
        await finished_in(store)
        raw = await asyncpg.connect(schema.url)
        # 50 junk notices, then the real one, in one burst: the real one finds the queue full.
        await raw.execute(
            "SELECT pg_notify($1, payload) FROM (SELECT 'junk-' || n AS payload "
            "FROM generate_series(1, 50) n UNION ALL SELECT $2) notices",
            channel,
            "e" * 43,
        )
        await raw.close()
        with anyio.fail_after(5):
            await session.notified.wait()
    assert session.sent == ["e" * 43]


async def test_postgres_bus_publish_failure_is_store_unavailable(postgres_server: PostgresServer) -> None:
    bus = PostgresBus(
        postgres_server.url(password="wrong"), CompletionHub(clock=lambda: 1.0), lambda _: _none()
    )
    with pytest.raises(StoreUnavailable) as info:
        await bus.publish(elicitation())
    assert "wrong" not in str(info.value)


async def _none() -> None:
    return None
