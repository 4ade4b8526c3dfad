"""Long-lived objects one server process shares: the store, the outbound HTTP client, the hub.

Built by the app factory and opened in the app lifespan; no module-level state.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from service.completion import CompletionHub
from service.completion_bus import CompletionBus, LocalBus, RedisBus
from service.connect_flow import ConnectFlow
from service.lifecycle import TokenLifecycle
from service.outbound_http import OutboundHttp
from service.settings import Settings
from token_store import KeyRing, Store, open_store


class Runtime:
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        # Every TTL, expiry and timestamp in the process reads this clock, so tests can move
        # time instead of sleeping.
        self.clock = clock
        self.keyring = KeyRing.parse(settings.encryption_keys)
        self.hub = CompletionHub()
        self.completions: CompletionBus = (
            RedisBus(settings.effective_store_url, settings.redis_prefix, self.hub)
            if settings.uses_redis
            else LocalBus(self.hub)
        )
        # One TLS context and one connection pool for every outbound call.
        self.outbound = OutboundHttp(settings.http_timeout)
        self.http = self.outbound.client
        self._store: Store | None = None
        self.lifecycle = TokenLifecycle(
            lambda: self.store, self.outbound, timeout_seconds=settings.http_timeout, clock=clock
        )
        # The one owner of every elicitation's status (service/connect_flow.py), shared by the
        # broker (tool calls) and the browser routes.
        self.flow = ConnectFlow(
            settings, lambda: self.store, self.outbound, clock=clock, publish=self.completions.publish
        )

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the store is opened by the application lifespan")
        return self._store

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        self._store = await open_store(
            self.settings.effective_store_url,
            self.keyring,
            prefix=self.settings.redis_prefix,
            clock=self.clock,
        )
        try:
            async with self.completions.running():
                yield self
        finally:
            await self._store.close()
            await self.outbound.aclose()
