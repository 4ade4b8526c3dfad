"""Long-lived objects one server process shares: the store, the outbound HTTP client, the hub.

Built by the app factory and opened in the app lifespan; no module-level state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from service.completion import CompletionHub
from service.settings import Settings
from token_store import KeyRing, Store, open_store


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keyring = KeyRing.parse(settings.encryption_keys)
        self.hub = CompletionHub()
        # No redirects: a provider or issuer must not bounce our requests (and tokens) elsewhere.
        self.http = httpx.AsyncClient(timeout=settings.http_timeout, follow_redirects=False)
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the store is opened by the application lifespan")
        return self._store

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        self._store = await open_store(self.settings.effective_store_url, self.keyring)
        try:
            yield self
        finally:
            await self._store.close()
            await self.http.aclose()
