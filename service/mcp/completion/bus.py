"""How a completed flow reaches the replica that holds the MCP session.

The browser's `/callback` may land on any replica, but a 2025-11-25 session lives in exactly one.
The replica that finishes a flow (completed or failed) publishes the elicitation record; every
replica hands it to its own CompletionHub, and only the hub that registered that elicitation
delivers (and forgets it), so the notification is sent once, to that session only. Redis pub/sub
carries it between replicas; a single process uses the in-memory bus.

Pub/sub is only the wake-up; the store is the source of truth. A message published while a
replica was disconnected is lost to it, so after every (re)subscription the replica calls
`on_resubscribed`, which re-reads the store for the flows its sessions wait for
(`CompletionHub.resync`). A publish that fails on a stale pooled connection (Redis restarted
since) is sent again once, on a fresh connection. On PostgreSQL alone, LISTEN/NOTIFY carries the
elicitation id in its place (`PostgresBus`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import anyio
import asyncpg
import redis.asyncio as redis
from anyio.streams.memory import MemoryObjectReceiveStream
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from service.mcp.completion.hub import CompletionHub
from token_store import PendingElicitation, StoreUnavailable
from token_store.backends.redis.store import redis_client

logger = logging.getLogger(__name__)
RECONNECT_DELAY = 1.0


class CompletionBus(Protocol):
    @property
    def ready(self) -> bool:
        """Subscribed and able to deliver (/readyz)."""
        ...

    async def publish(self, elicitation: PendingElicitation) -> None: ...

    def running(self) -> AbstractAsyncContextManager[None]: ...


class LocalBus:
    """One process: publishing is delivering."""

    ready = True

    def __init__(self, hub: CompletionHub) -> None:
        self._hub = hub

    async def publish(self, elicitation: PendingElicitation) -> None:
        await self._hub.completed(elicitation)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        yield


class _ListeningBus(ABC):
    """What the buses between replicas share: a task that listens while the app runs
    (`running`; it listens again after each failure), and readiness once it is subscribed."""

    subscribed: anyio.Event  # set by the listener once subscribed (tests and readiness)

    @property
    def ready(self) -> bool:
        return self.subscribed.is_set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._listen_forever)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
        await self._close()

    @abstractmethod
    async def _listen_forever(self) -> None:
        """Listen until cancelled, subscribing again after each failure."""

    @abstractmethod
    async def _close(self) -> None:
        """Close the connections publishing opened."""


class RedisBus(_ListeningBus):
    """Several replicas: PUBLISH on one channel, every replica subscribed. Behind Sentinel the
    channel is the current primary's: a failover closes the subscription, and the next one,
    made on the new primary, resyncs from the store. On Cluster the channel is a shard channel
    (SPUBLISH/SSUBSCRIBE, Redis 7): a message goes to the one shard that owns the channel's slot
    rather than to every node of the cluster."""

    def __init__(
        self,
        url: str,
        prefix: str,
        hub: CompletionHub,
        *,
        on_resubscribed: Callable[[], Awaitable[None]] | None = None,
        allow_plaintext: bool = False,
    ) -> None:
        self._client = redis_client(
            url, socket_timeout=None, socket_connect_timeout=2.0, allow_plaintext=allow_plaintext
        )
        self._channel = f"{prefix}completions"
        self._hub = hub
        self._on_resubscribed = on_resubscribed
        self.subscribed = anyio.Event()

    async def publish(self, elicitation: PendingElicitation) -> None:
        message = elicitation.to_json()
        for attempt in (1, 2):
            try:
                if isinstance(self._client, RedisCluster):
                    await self._client.spublish(self._channel, message)
                else:
                    await self._client.publish(self._channel, message)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # The pool dropped the broken connection; the second attempt opens a new one.
                # Publishing twice is harmless: the hub delivers an elicitation once.
                if attempt == 2:
                    raise StoreUnavailable("publish completion") from exc
            except (redis.RedisError, RedisClusterException) as exc:
                # The token is stored already; the client's retry will find it.
                raise StoreUnavailable("publish completion") from exc

    async def _close(self) -> None:
        await self._client.aclose()

    async def _listen_forever(self) -> None:
        while True:
            try:
                await self._listen()
            except (redis.RedisError, RedisClusterException, OSError) as exc:
                logger.warning("completion bus: %s; resubscribing", type(exc).__name__)
                self.subscribed = anyio.Event()
                await anyio.sleep(RECONNECT_DELAY)

    async def _listen(self) -> None:
        if isinstance(self._client, RedisCluster):
            await self._listen_to_shard(self._client)
            return
        async with self._client.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self._channel)
            self.subscribed.set()
            if self._on_resubscribed is not None:
                await self._on_resubscribed()
            async for message in pubsub.listen():
                await self._deliver(message)

    async def _listen_to_shard(self, client: RedisCluster) -> None:
        await client.initialize()  # the slot map: a pubsub does not load it by itself
        pubsub = client.pubsub()
        try:
            await pubsub.ssubscribe(self._channel)
            self.subscribed.set()
            if self._on_resubscribed is not None:
                await self._on_resubscribed()
            while True:
                message = await pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is None:
                    continue
                await self._deliver(message)
        finally:
            await pubsub.aclose()

    async def _deliver(self, message: dict[str, Any]) -> None:
        try:
            elicitation = PendingElicitation.from_json(message["data"])
        except (ValueError, KeyError, TypeError):
            logger.warning("completion bus: ignoring a malformed message")
            return
        await self._hub.completed(elicitation)


def require_finished_in_store(stored: PendingElicitation | None) -> PendingElicitation | None:
    """The record a PostgreSQL bus notice may deliver: the store's own, once the flow has ended.

    MCP 2025-11-25, client elicitation, "Completion Notifications for URL Mode Elicitation": the
    server sends `notifications/elicitation/complete` when the out-of-band interaction "is
    completed". A NOTIFY carries no proof of that: PostgreSQL checks no privilege on channels, so
    any role that can connect to the database can notify any of them. A notice is therefore only
    an elicitation id, and the store decides: None (nothing to deliver) unless it holds the
    elicitation and its status is no longer live.
    """
    # mutant: completion_bus.finished_in_store drop 1
    if stored is None or stored.status.is_live:
        return None
    return stored


class PostgresBus(_ListeningBus):
    """Several replicas on PostgreSQL alone: NOTIFY on one channel, every replica LISTENs.

    The payload is the elicitation id only (`require_finished_in_store` says why); the replica
    reads the record from the store. A listening connection that fails (or stops answering the
    keep-alive query) is replaced after `RECONNECT_DELAY`, then `on_resubscribed` resyncs from the
    store, as with Redis.
    """

    KEEPALIVE_SECONDS = 5.0  # how soon a silently dropped listening connection is noticed
    QUEUE = 1000  # notices waiting for their store read; past it they are dropped, then resynced

    def __init__(
        self,
        url: str,
        hub: CompletionHub,
        read: Callable[[str], Awaitable[PendingElicitation | None]],
        *,
        channel: str = "mcpuc_completions",
        on_resubscribed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._url = url
        self._hub = hub
        self._read = read
        self._channel = channel
        self._on_resubscribed = on_resubscribed
        self._publisher: Any | None = None
        self._publishing = anyio.Lock()  # one connection runs one statement at a time
        self._dropped = False  # a notice did not fit in the queue
        self.subscribed = anyio.Event()

    async def publish(self, elicitation: PendingElicitation) -> None:
        async with self._publishing:
            await self._notify(elicitation.id)

    async def _notify(self, elicitation_id: str) -> None:
        for attempt in (1, 2):
            try:
                if self._publisher is None or self._publisher.is_closed():
                    self._publisher = await asyncpg.connect(self._url, timeout=2.0)
                await self._publisher.execute("SELECT pg_notify($1, $2)", self._channel, elicitation_id)
                return
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                # The next attempt opens a new connection. Publishing twice is harmless: the hub
                # delivers an elicitation once.
                await self._close()
                if attempt == 2:
                    raise StoreUnavailable("publish completion") from exc

    async def _close(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.terminate()

    async def _listen_forever(self) -> None:
        while True:
            try:
                await self._listen()
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                logger.warning("completion bus: %s; listening again", type(exc).__name__)
            self.subscribed = anyio.Event()
            await anyio.sleep(RECONNECT_DELAY)

    async def _listen(self) -> None:
        """Listen until the connection fails (returns) or cannot be opened (raises)."""
        send, receive = anyio.create_memory_object_stream[str](self.QUEUE)

        def on_notice(connection: Any, pid: int, channel: str, payload: str) -> None:
            try:
                send.send_nowait(payload)
            except anyio.WouldBlock:
                self._dropped = True  # a flood: `_deliver_each` resyncs from the store once drained

        conn = await asyncpg.connect(self._url, timeout=2.0)
        try:
            await conn.add_listener(self._channel, on_notice)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._deliver_each, receive)
                self.subscribed.set()
                if self._on_resubscribed is not None:
                    await self._on_resubscribed()
                while True:
                    await anyio.sleep(self.KEEPALIVE_SECONDS)
                    try:
                        await conn.fetchval("SELECT 1", timeout=self.KEEPALIVE_SECONDS)
                    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
                        logger.warning("completion bus: %s; listening again", type(exc).__name__)
                        break
                tasks.cancel_scope.cancel()
        finally:
            conn.terminate()
            send.close()
            receive.close()

    async def _deliver_each(self, notices: MemoryObjectReceiveStream[str]) -> None:
        async for elicitation_id in notices:
            try:
                finished = require_finished_in_store(await self._read(elicitation_id))
            except StoreUnavailable:
                continue  # the store is away; the session's own retry reads it later
            if finished is not None:
                await self._hub.completed(finished)
            if self._dropped and notices.statistics().current_buffer_used == 0:
                self._dropped = False
                if self._on_resubscribed is not None:
                    await self._on_resubscribed()
