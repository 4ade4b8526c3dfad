"""Keep-alive refresh: a sweep each replica runs that refreshes grants before they die unused.

A refresh token that is not used expires at some providers (Microsoft's 90-day window, Google's
unused-token expiry); a user who calls no tool for that long would find the grant dead. For each
provider with `refresh_keepalive` (seconds), the sweep refreshes every healthy grant not refreshed
(or connected) for that long; with `keep_access_fresh`, also every access token about to expire.

Every refresh goes through `TokenLifecycle.fresh(force=True)`, the single-flight refresh: a grant
another replica is refreshing, or has refreshed since this sweep read it, is not refreshed again
(one refresh per grant however many replicas sweep). Starts are paced per provider at
`keepalive_rate` per second. A grant the provider refuses becomes `needs_reauthorization`, and its
webhook is sent (service/observability/webhooks.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio

from service.errors import NeedsReauthorization, ProviderApiError
from service.flow.lifecycle import TokenLifecycle
from service.observability.metrics import Metrics
from service.providers.catalogue import ProviderConfig
from token_store import Connection, ConnectionStatus, Store, StoreUnavailable

logger = logging.getLogger(__name__)

CONCURRENCY = 8  # refreshes in flight at once per provider


@dataclass
class SweepReport:
    """What one sweep did, per provider: grants due, and how each refresh ended."""

    due: dict[str, int] = field(default_factory=dict)
    outcomes: dict[tuple[str, str], int] = field(default_factory=dict)

    def count(self, provider: str, outcome: str) -> None:
        self.outcomes[provider, outcome] = self.outcomes.get((provider, outcome), 0) + 1


class KeepAliveSweep:
    def __init__(
        self,
        store: Store,
        providers: Mapping[str, ProviderConfig],
        lifecycle: TokenLifecycle,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        pace_clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._store = store
        self._providers = {n: p for n, p in providers.items() if p.refresh_keepalive or p.keep_access_fresh}
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._clock = clock  # judges what is due: the store's records are on this clock
        self._pace_clock = pace_clock
        self._sleep = sleep

    @property
    def active(self) -> bool:
        return bool(self._providers)

    async def run(self, interval_seconds: float) -> None:
        while True:
            try:
                await self.sweep_once()
            except StoreUnavailable as exc:
                logger.warning("keep-alive sweep: %s; trying again next time", exc)
            await anyio.sleep(interval_seconds)

    def due(self, connection: Connection, provider: ProviderConfig) -> bool:
        """Healthy, refreshable, and either unrefreshed for `refresh_keepalive` seconds or (with
        `keep_access_fresh`) holding an access token about to expire."""
        if connection.status is not ConnectionStatus.OK or connection.tokens.refresh_token is None:
            return False
        last = connection.refreshed_at or connection.connected_at
        if provider.refresh_keepalive and last + provider.refresh_keepalive <= self._clock():
            return True
        return provider.keep_access_fresh and self._lifecycle.expiring(connection, provider)

    async def sweep_once(self) -> SweepReport:
        report = SweepReport()
        for provider in self._providers.values():
            found = await self._store.find_connections(provider.name)
            due = [c for c in found if self.due(c, provider)]
            report.due[provider.name] = len(due)
            await self._refresh_paced(provider, due, report)
        return report

    async def _refresh_paced(
        self, provider: ProviderConfig, due: list[Connection], report: SweepReport
    ) -> None:
        in_flight = anyio.Semaphore(CONCURRENCY)
        start = self._pace_clock()

        async def refresh(connection: Connection) -> None:
            try:
                outcome = await self._refresh(provider, connection)
            finally:
                in_flight.release()
            report.count(provider.name, outcome)
            self._metrics.keepalive.labels(provider=provider.name, outcome=outcome).inc()

        async with anyio.create_task_group() as tasks:
            for position, connection in enumerate(due):
                wait = start + position / provider.keepalive_rate - self._pace_clock()
                if wait > 0:
                    await self._sleep(wait)
                await in_flight.acquire()
                tasks.start_soon(refresh, connection)

    async def _refresh(self, provider: ProviderConfig, connection: Connection) -> str:
        try:
            await self._lifecycle.fresh(connection, provider, force=True)
        except NeedsReauthorization:
            return "needs_reauthorization"  # marked, and its webhook queued, by the lifecycle
        except (ProviderApiError, StoreUnavailable) as exc:
            logger.info("keep-alive: %s refresh failed: %s", provider.name, type(exc).__name__)
            return "failed"
        return "ok"
