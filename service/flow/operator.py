"""What an operator does to every user's connections: list them, remove one user's (an employee
left), remove every one at a provider (its client secret leaked).

One place for the CLI (`mcp-url-connect connections ...`) and the admin API (service/ops/admin_api.py).
Each removal is a disconnect (service/flow/disconnect.py): the local record first, so nothing here
uses the grant any more, then RFC 7009 revocation at the provider, reported, not required.

The provider-wide switch is resumable: it removes connection by connection, so running it
again after an interruption finds only what is left; at most `concurrency` grants were deleted
here but not yet revoked at the provider when it was stopped (their revocation is lost, as when
a provider is down during a user's own disconnect).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from service.errors import UnknownProvider
from service.flow.connect import ConnectFlow
from service.flow.disconnect import disconnect_one
from service.observability.audit import audit_operator
from service.observability.webhooks import ConnectionEvents
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from token_store import Connection, Store, UserRef

DEFAULT_REVOKE_RATE = 20.0  # provider requests per second, per provider: under common API limits
DEFAULT_REVOKE_CONCURRENCY = 8  # revocations in flight at once


def connection_row(connection: Connection) -> dict[str, Any]:
    """One connection as an operator sees it: whose, and `Connection.describe` (no secret)."""
    return {"iss": connection.key.user.iss, "sub": connection.key.user.sub, **connection.describe()}


@dataclass
class Removal:
    """What a revoke did: each deleted connection (with `revoked`: the provider confirmed) and
    how many of the users' flows in progress were ended."""

    matched: int = 0
    deleted: list[dict[str, Any]] = field(default_factory=list)
    flows_ended: int = 0
    dry_run: bool = False

    @property
    def revoked(self) -> int:
        return sum(1 for row in self.deleted if row["revoked"])

    def summary(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "deleted": len(self.deleted),
            "revoked_at_provider": self.revoked,
            "flows_ended": self.flows_ended,
            "dry_run": self.dry_run,
            "connections": self.deleted,
        }


class Operator:
    def __init__(
        self,
        store: Store,
        providers: Mapping[str, ProviderConfig],
        outbound: OutboundHttp,
        flow: ConnectFlow,
        *,
        default_issuer: str,
        events: ConnectionEvents | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._store = store
        self._providers = providers
        self._outbound = outbound
        self._flow = flow
        self._default_issuer = default_issuer
        self._events = events
        self._clock = clock  # paces revocations: a monotonic clock
        self._sleep = sleep

    async def list_connections(
        self, actor: str, *, sub: str | None = None, iss: str | None = None, provider: str | None = None
    ) -> list[dict[str, Any]]:
        rows = [connection_row(c) for c in await self._store.find_connections(provider, sub, iss)]
        audit_operator("list", actor, sub=sub, iss=iss, provider=provider, count=len(rows))
        return rows

    async def revoke_user(
        self, actor: str, sub: str, *, iss: str | None = None, provider: str | None = None
    ) -> Removal:
        """Remove the user's connections (at `provider` only when given) and end their flows in
        progress. The user is (iss, sub): without `iss`, the MCP authorization server's."""
        self._require_known(provider)
        user = UserRef(iss or self._default_issuer, sub)
        # mutant: operator.revoke_by_iss_and_sub "user.iss)" -> "None)"
        found = await self._store.find_connections(provider, user.sub, user.iss)
        removal = Removal(matched=len(found))
        await self._remove(actor, found, removal, rate=None, concurrency=1, reason="operator")
        removal.flows_ended = await self._flow.withdraw(user)
        audit_operator(
            "revoke_user",
            actor,
            iss=user.iss,
            sub=user.sub,
            provider=provider,
            deleted=len(removal.deleted),
            revoked_at_provider=removal.revoked,
            flows_ended=removal.flows_ended,
        )
        return removal

    async def revoke_provider(
        self,
        actor: str,
        provider: str,
        *,
        dry_run: bool = False,
        rate: float = DEFAULT_REVOKE_RATE,
        concurrency: int = DEFAULT_REVOKE_CONCURRENCY,
    ) -> Removal:
        """The incident switch: remove every connection at `provider`, starting at most `rate`
        revocations per second. With `dry_run`, only count."""
        self._require_known(provider)
        if not rate > 0 or concurrency < 1:
            raise ValueError("rate must be > 0 and concurrency >= 1")
        found = await self._store.find_connections(provider)
        removal = Removal(matched=len(found), dry_run=dry_run)
        if not dry_run:
            await self._remove(actor, found, removal, rate=rate, concurrency=concurrency, reason="revocation")
        audit_operator(
            "revoke_provider",
            actor,
            provider=provider,
            dry_run=dry_run,
            matched=removal.matched,
            deleted=len(removal.deleted),
            revoked_at_provider=removal.revoked,
        )
        return removal

    def _require_known(self, provider: str | None) -> None:
        if provider is not None and provider not in self._providers:
            raise UnknownProvider(f"no provider named {provider!r} is configured")

    async def _remove(
        self,
        actor: str,
        found: list[Connection],
        removal: Removal,
        *,
        rate: float | None,
        concurrency: int,
        reason: str,
    ) -> None:
        in_flight = anyio.Semaphore(concurrency)
        start = self._clock()

        async def remove(connection: Connection) -> None:
            key = connection.key
            try:
                done = await disconnect_one(
                    self._store,
                    self._providers.get(key.provider),
                    key,
                    self._outbound,
                    self._events,
                    by=f"operator:{actor}",
                    reason=reason,
                )
            finally:
                in_flight.release()
            if done is not None:  # None: someone else removed it meanwhile
                removal.deleted.append({**connection_row(connection), "revoked": done.revoked})

        async with anyio.create_task_group() as tasks:
            for position, connection in enumerate(found):
                if rate is not None:
                    # Paced by start time: the n-th revocation starts no sooner than n / rate s in.
                    wait = start + position / rate - self._clock()
                    if wait > 0:
                        await self._sleep(wait)
                await in_flight.acquire()
                tasks.start_soon(remove, connection)
