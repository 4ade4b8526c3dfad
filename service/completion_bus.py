"""How a completed flow reaches the replica that holds the MCP session.

The browser's `/callback` may land on any replica, but a 2025-11-25 session lives in exactly one.
The replica that completes a flow publishes the elicitation record; every replica hands it to
its own CompletionHub, and only the hub that registered that elicitation delivers (and forgets
it), so the notification is sent once, to that session only. Redis pub/sub carries it between
replicas; a single process uses the in-memory bus. Pub/sub is fire-and-forget: a replica that is
disconnected at that moment misses the message, which the spec allows (completion
notifications are not guaranteed; clients retry).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import anyio
import redis.asyncio as redis

from service.completion import CompletionHub
from token_store import PendingElicitation, StoreUnavailable

logger = logging.getLogger(__name__)
RECONNECT_DELAY = 1.0


class CompletionBus(Protocol):
    async def publish(self, elicitation: PendingElicitation) -> None: ...

    def running(self) -> AbstractAsyncContextManager[None]: ...


class LocalBus:
    """One process: publishing is delivering."""

    def __init__(self, hub: CompletionHub) -> None:
        self._hub = hub

    async def publish(self, elicitation: PendingElicitation) -> None:
        await self._hub.completed(elicitation)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        yield


class RedisBus:
    """Several replicas: PUBLISH on one channel, every replica subscribed."""

    def __init__(self, url: str, prefix: str, hub: CompletionHub) -> None:
        self._client = redis.from_url(url, socket_timeout=None, socket_connect_timeout=2.0)
        self._channel = f"{prefix}completions"
        self._hub = hub
        self.subscribed = anyio.Event()  # for tests and readiness

    async def publish(self, elicitation: PendingElicitation) -> None:
        try:
            await self._client.publish(self._channel, elicitation.to_json())
        except redis.RedisError as exc:
            # The token is stored already; the client's retry will find it.
            raise StoreUnavailable("publish completion") from exc

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._listen_forever)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
        await self._client.aclose()

    async def _listen_forever(self) -> None:
        while True:
            try:
                await self._listen()
            except (redis.RedisError, OSError) as exc:
                logger.warning("completion bus: %s; resubscribing", type(exc).__name__)
                self.subscribed = anyio.Event()
                await anyio.sleep(RECONNECT_DELAY)

    async def _listen(self) -> None:
        async with self._client.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self._channel)
            self.subscribed.set()
            async for message in pubsub.listen():
                try:
                    elicitation = PendingElicitation.from_json(message["data"])
                except (ValueError, KeyError, TypeError):
                    logger.warning("completion bus: ignoring a malformed message")
                    continue
                await self._hub.completed(elicitation)
