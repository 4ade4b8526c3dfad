"""Keeping a stored grant usable: proactive and on-demand refresh, single-flight across replicas.

One refresh per (user, provider, account) at a time, everywhere: the refresher holds a lock in
the shared store; everyone else waits for the record to change and reuses the result. Waiters in
the refresher's own process are woken the moment it is done; waiters on other replicas re-read
the record every WAIT_INTERVAL. The new
token set replaces the old one only if nobody changed the record meanwhile (compare-and-set), so
a rotated refresh token is never lost nor sent twice. `invalid_grant` marks the connection as
needing re-authorization; the caller then elicits again, with no retry loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio

from service.errors import NeedsReauthorization, ProviderApiError, TokenExchangeError
from service.observability.audit import audit
from service.observability.metrics import Metrics
from service.observability.webhooks import NEEDS_REAUTHORIZATION as NEEDS_REAUTHORIZATION_EVENT
from service.observability.webhooks import ConnectionEvents
from service.providers.catalogue import ProviderConfig
from service.providers.oauth import refresh, require_grant_of_current_issuer, revoke
from service.providers.outbound_http import OutboundHttp
from token_store import Connection, ConnectionKey, ConnectionStatus, Store, TokenSet

WAIT_INTERVAL = 0.1  # how often a waiter re-reads the record while another replica refreshes
# After a failed refresh, callers fail fast this long instead of calling the provider again: long
# enough for every waiter (polling every WAIT_INTERVAL) to share the failure, short enough that
# the user's next attempt goes through.
FAILURE_COOLDOWN = 1.0
# How long the single-flight lock outlives the provider call's deadline: the holder still reads
# and writes the store after the answer (each store call bounded by the store's own timeout).
LOCK_MARGIN = 5.0


def refresh_lock_name(key: ConnectionKey) -> str:
    """The single-flight lock of one connection's refresh, shared by every replica."""
    return f"refresh:{key.associated_data().decode()}"


def refresh_lock_ttl(timeout_seconds: float) -> float:
    """The single-flight lock lives longer than its holder's refresh can take (its deadline,
    `refresh_within_deadline`, plus LOCK_MARGIN): no second caller takes the lock and sends the
    same refresh token while the first one is still in flight. RFC 9700 §4.14.2: a rotated
    refresh token presented twice tells the provider "of the breach", and it may revoke the grant."""
    # mutant: lifecycle.refresh_lock_ttl
    return timeout_seconds + LOCK_MARGIN


class TokenLifecycle:
    def __init__(
        self,
        store: Store,
        outbound: OutboundHttp,
        *,
        timeout_seconds: float,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        connection_events: ConnectionEvents | None = None,
    ) -> None:
        self._store = store
        self._connection_events = connection_events
        self._outbound = outbound
        self._metrics = metrics or Metrics()
        self._timeout = timeout_seconds
        self._clock = clock
        # Longer than one token-endpoint call: a holder that dies frees the lock after this.
        self.lock_ttl = refresh_lock_ttl(timeout_seconds)
        # Lock name -> set when this process's refresh under that lock is over (either way).
        self._refreshing: dict[str, anyio.Event] = {}

    def expiring(self, connection: Connection, provider: ProviderConfig) -> bool:
        expires_at = connection.tokens.expires_at
        return expires_at is not None and expires_at - provider.refresh_skew_seconds <= self._clock()

    async def fresh(
        self, connection: Connection, provider: ProviderConfig, *, force: bool = False
    ) -> Connection:
        """`connection` with an access token that is not about to expire (refreshing if needed).
        `force`: the API just refused this access token (401), so refresh even if not expiring."""
        if connection.status in (ConnectionStatus.NEEDS_REAUTHORIZATION, ConnectionStatus.REVOKED):
            raise NeedsReauthorization(connection.status.value)
        try:
            require_grant_of_current_issuer(connection.tokens, provider)
        except NeedsReauthorization:
            await self._needs_reauthorization(connection)
            raise
        if not force and not self.expiring(connection, provider):
            return connection
        if connection.tokens.refresh_token is None:
            if force or self._expired(connection):
                await self._needs_reauthorization(connection)
                raise NeedsReauthorization("no refresh token")
            return connection  # expiring soon but still valid, and nothing to refresh with
        return await self._single_flight(connection, provider)

    async def refused(self, connection: Connection) -> None:
        """The provider refused an access token it had just issued (RFC 6750 §3.1 invalid_token):
        the grant is unusable, so it is marked and the next call asks the user to connect again."""
        await self._needs_reauthorization(connection)

    async def describe(self, connections: list[Connection]) -> list[dict[str, Any]]:
        """What `list_connections` and the connections page show: each connection's record, with
        the status `refreshing` while a refresh of it is in flight anywhere (its single-flight lock
        is held). Worked out when asked, not stored: a refresher that dies cannot leave it behind."""
        described = []
        for connection in connections:
            shown = connection.describe()
            if connection.status is ConnectionStatus.OK and await self._store.lock_held(
                refresh_lock_name(connection.key)
            ):
                shown["status"] = ConnectionStatus.REFRESHING.value
            described.append(shown)
        return described

    async def _single_flight(self, seen: Connection, provider: ProviderConfig) -> Connection:
        store = self._store
        name = refresh_lock_name(seen.key)
        deadline = self._clock() + self.lock_ttl + 1
        while True:
            # One failed call answers everyone waiting (and the next few seconds of callers): a
            # failing provider sees one refresh, not one per caller.
            await self._fail_if_failed_recently(name, provider)
            owner = await store.acquire_lock(name, self.lock_ttl)
            if owner is not None:
                done = self._refreshing[name] = anyio.Event()
                try:
                    # Again under the lock: a holder that failed between our check and our
                    # acquire set the marker before releasing the lock.
                    await self._fail_if_failed_recently(name, provider)
                    return await self._refresh_once(seen, provider)
                finally:
                    try:
                        await store.release_lock(name, owner)
                    finally:  # released (or the store failed): waiters here look again now
                        if self._refreshing.get(name) is done:  # not a later holder's, taken meanwhile
                            del self._refreshing[name]
                        done.set()
            # Another caller is refreshing: reuse its result, as soon as it lands if the caller is
            # in this process, else (another replica) at the next re-read.
            refreshing = self._refreshing.get(name)
            if refreshing is None:
                await anyio.sleep(WAIT_INTERVAL)
            else:
                with anyio.move_on_after(WAIT_INTERVAL):
                    await refreshing.wait()
            current = await store.get_connection(seen.key.user, seen.key.provider, seen.key.account)
            if current is None:
                raise NeedsReauthorization("disconnected")
            if current.updated_at != seen.updated_at or current.status is not ConnectionStatus.OK:
                if current.status in (ConnectionStatus.NEEDS_REAUTHORIZATION, ConnectionStatus.REVOKED):
                    raise NeedsReauthorization(current.status.value)
                return current
            if self._clock() > deadline:
                raise ProviderApiError(
                    f"refreshing the {provider.display_name} token timed out", provider=provider.name
                )

    async def _refresh_once(self, seen: Connection, provider: ProviderConfig) -> Connection:
        store = self._store
        # Under the lock, re-read: a previous holder may have refreshed already.
        current = await store.get_connection(seen.key.user, seen.key.provider, seen.key.account)
        if current is None:
            raise NeedsReauthorization("disconnected")
        if current.updated_at != seen.updated_at:
            return current
        assert current.tokens.refresh_token is not None
        started = time.perf_counter()
        try:
            tokens = await self.refresh_within_deadline(provider, current.tokens)
        except TokenExchangeError as exc:
            if exc.error == "invalid_grant":
                # RFC 6749 §5.2: the grant is dead; asking again is the only way forward.
                await self._needs_reauthorization(current)
                self._count(provider, "invalid_grant", started)
                audit("refresh.invalid_grant", current.key)
                raise NeedsReauthorization("invalid_grant") from None
            self._count(provider, "failed", started)
            audit("refresh.failed", current.key, reason=exc.error or "unavailable")
            await store.acquire_lock(f"{refresh_lock_name(seen.key)}:failed", FAILURE_COOLDOWN)
            raise ProviderApiError(
                f"{provider.display_name}: {exc}", provider=provider.name, retry_after=FAILURE_COOLDOWN
            ) from None
        now = self._clock()
        renewed = replace(
            current, tokens=tokens, updated_at=now, refreshed_at=now, status=ConnectionStatus.OK
        )
        if not await store.replace_connection(renewed, expected_updated_at=current.updated_at):
            # Replaced meanwhile (a reconnect): theirs is newer than ours.
            latest = await store.get_connection(seen.key.user, seen.key.provider, seen.key.account)
            if latest is None:
                # Disconnected while we refreshed: the grant we just received must not stay live.
                await revoke(provider, tokens, timeout_seconds=self._timeout, outbound=self._outbound)
                raise NeedsReauthorization("disconnected")
            return latest
        self._count(provider, "ok", started)
        audit("refresh", renewed.key, expires_at=tokens.expires_at)
        return renewed

    async def refresh_within_deadline(self, provider: ProviderConfig, tokens: TokenSet) -> TokenSet:
        """One refresh at the provider, abandoned `timeout_seconds` after it started whatever
        the HTTP client does, so it always ends before its lock can expire (`refresh_lock_ttl`;
        RFC 9700 §4.14.2: the refresh token is sent once)."""
        # mutant: lifecycle.refresh_within_deadline
        with anyio.move_on_after(self._timeout):
            return await refresh(provider, tokens, timeout_seconds=self._timeout, outbound=self._outbound)
        raise TokenExchangeError("the token endpoint did not answer within the timeout")

    async def _fail_if_failed_recently(self, name: str, provider: ProviderConfig) -> None:
        """Raise when the failure marker is set (a lock with a TTL doubles as a flag shared by
        replicas; the failing holder sets it before it releases the refresh lock)."""
        if await self._store.lock_held(f"{name}:failed"):
            raise ProviderApiError(
                f"{provider.display_name} could not refresh the token",
                provider=provider.name,
                retry_after=FAILURE_COOLDOWN,
            )

    def _expired(self, connection: Connection) -> bool:
        expires_at = connection.tokens.expires_at
        return expires_at is not None and expires_at <= self._clock()

    def _count(self, provider: ProviderConfig, outcome: str, started: float) -> None:
        """One refresh at the provider: `mcpuc_token_refreshes_total` and its call's duration."""
        self._metrics.refreshes.labels(provider=provider.name, outcome=outcome).inc()
        elapsed = time.perf_counter() - started
        self._metrics.provider_call_seconds.labels(provider=provider.name, step="refresh").observe(elapsed)

    async def _needs_reauthorization(self, connection: Connection) -> None:
        """Mark the grant dead and queue its `connection.needs_reauthorization` webhook; a
        connection read as already marked is left alone (no second webhook)."""
        if connection.status is ConnectionStatus.NEEDS_REAUTHORIZATION:
            return
        updated = await self._store.set_connection_status(
            connection.key, ConnectionStatus.NEEDS_REAUTHORIZATION
        )
        if updated and self._connection_events is not None:
            await self._connection_events.emit(
                NEEDS_REAUTHORIZATION_EVENT,
                connection.key,
                account_label=connection.account_label,
                status=ConnectionStatus.NEEDS_REAUTHORIZATION,
            )
