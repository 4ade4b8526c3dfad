"""Disconnecting: delete the local record first, then revoke at the provider (RFC 7009).

Local first, so a provider that is down or slow can never leave a token we still use; the
revocation result is reported, not required. One place for the tool and the connections page.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.observability.audit import audit
from service.observability.webhooks import DELETED, ConnectionEvents
from service.providers.catalogue import ProviderConfig
from service.providers.oauth import revoke
from service.providers.outbound_http import OutboundHttp
from token_store import Connection, ConnectionKey, Store, UserRef


@dataclass(frozen=True)
class Disconnected:
    account: str
    label: str  # the name the user knows the account by (e.g. a login), beside the provider's id
    revoked: bool  # the provider confirmed revocation; False when it has no endpoint or failed


async def disconnect_one(
    store: Store,
    provider: ProviderConfig | None,
    key: ConnectionKey,
    outbound: OutboundHttp,
    events: ConnectionEvents | None = None,
    *,
    by: str = "user",
    reason: str = "user",
) -> Disconnected | None:
    """`by` names who asked in the audit event: the user, or an operator (`operator:<who>`);
    `reason` goes into the `connection.deleted` webhook (`user`, `operator`, `revocation`)."""
    connection = await store.get_connection(key.user, key.provider, key.account)
    if connection is None or not await store.delete_connection(key):
        return None
    return await _revoke(connection, provider, outbound, events, by, reason)


async def disconnect_all(
    store: Store,
    provider: ProviderConfig,
    user: UserRef,
    outbound: OutboundHttp,
    events: ConnectionEvents | None = None,
) -> list[Disconnected]:
    deleted = await store.delete_connections(user, provider.name)
    return [await _revoke(connection, provider, outbound, events) for connection in deleted]


async def _revoke(
    connection: Connection,
    provider: ProviderConfig | None,
    outbound: OutboundHttp,
    events: ConnectionEvents | None,
    by: str = "user",
    reason: str = "user",
) -> Disconnected:
    revoked = (
        provider is not None
        and provider.kind != "api_key"
        and await revoke(
            provider, connection.tokens, timeout_seconds=outbound.timeout_seconds, outbound=outbound
        )
    )
    audit("disconnect", connection.key, revoked=revoked, by=by)
    if events is not None:
        await events.emit(
            DELETED,
            connection.key,
            account_label=connection.account_label,
            status=connection.status,
            reason=reason,
        )
    return Disconnected(connection.key.account, connection.account_label, revoked)
