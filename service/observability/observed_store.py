"""The store as the rest of the process uses it: every operation that fails is counted, and every
operation fails like an outage until the backend is open.

One object from the start, handed to every part that uses the store (the flow, the lifecycle,
the operator...): a replica that starts while Redis is down builds its parts at once and opens
the backend later (`attach`), and until then each use fails as a store outage does (503 pages,
-32603 tool errors, /readyz 503).

The failure count is `mcpuc_store_errors_total{operation}`, so neither backend needs to know about
metrics. Written out method by method, because mypy then checks it against the `Store` protocol
(a generic proxy would be typed as anything), and because the label is the operation's name,
which only the caller knows.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from service.observability.metrics import Metrics
from token_store import (
    CallbackOutcome,
    ClientRegistration,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    Store,
    StoreUnavailable,
    UserRef,
    WebhookMessage,
)

T = TypeVar("T")


class ObservedStore(Store):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._opened: Store | None = None

    def attach(self, backend: Store) -> None:
        """Serve every operation from `backend` (opened) from now on."""
        self._opened = backend

    @property
    def is_open(self) -> bool:
        return self._opened is not None

    @property
    def backend(self) -> Store:
        """The open backend; `StoreUnavailable` (not counted: no operation ran) until then."""
        if self._opened is None:
            raise StoreUnavailable("store not open yet")
        return self._opened

    async def _observed(self, operation: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except StoreUnavailable:
            self._metrics.store_errors.labels(operation=operation).inc()
            raise

    # --- connections -------------------------------------------------------------------------
    async def put_connection(self, connection: Connection) -> None:
        await self._observed("put_connection", self.backend.put_connection(connection))

    async def get_connection(
        self, user: UserRef, provider: str, account: str | None = None
    ) -> Connection | None:
        return await self._observed("get_connection", self.backend.get_connection(user, provider, account))

    async def list_connections(self, user: UserRef, provider: str | None = None) -> list[Connection]:
        return await self._observed("list_connections", self.backend.list_connections(user, provider))

    async def delete_connection(self, key: ConnectionKey) -> bool:
        return await self._observed("delete_connection", self.backend.delete_connection(key))

    async def delete_connections(self, user: UserRef, provider: str) -> list[Connection]:
        return await self._observed("delete_connections", self.backend.delete_connections(user, provider))

    async def replace_connection(self, connection: Connection, expected_updated_at: float) -> bool:
        return await self._observed(
            "replace_connection", self.backend.replace_connection(connection, expected_updated_at)
        )

    async def set_connection_status(self, key: ConnectionKey, status: ConnectionStatus) -> bool:
        return await self._observed("set_connection_status", self.backend.set_connection_status(key, status))

    async def find_connections(
        self, provider: str | None = None, sub: str | None = None, iss: str | None = None
    ) -> list[Connection]:
        return await self._observed("find_connections", self.backend.find_connections(provider, sub, iss))

    # --- remembered choices ------------------------------------------------------------------
    async def get_default_account(self, user: UserRef, provider: str) -> str | None:
        return await self._observed("get_default_account", self.backend.get_default_account(user, provider))

    async def set_default_account(self, user: UserRef, provider: str, account: str | None) -> None:
        await self._observed("set_default_account", self.backend.set_default_account(user, provider, account))

    # --- locks -------------------------------------------------------------------------------
    async def acquire_lock(self, name: str, ttl_seconds: float) -> str | None:
        return await self._observed("acquire_lock", self.backend.acquire_lock(name, ttl_seconds))

    async def release_lock(self, name: str, owner: str) -> bool:
        return await self._observed("release_lock", self.backend.release_lock(name, owner))

    async def lock_held(self, name: str) -> bool:
        return await self._observed("lock_held", self.backend.lock_held(name))

    # --- pending elicitations ----------------------------------------------------------------
    async def create_elicitation(self, elicitation: PendingElicitation, max_live_per_user: int) -> None:
        await self._observed(
            "create_elicitation", self.backend.create_elicitation(elicitation, max_live_per_user)
        )

    async def get_elicitation(self, elicitation_id: str) -> PendingElicitation | None:
        return await self._observed("get_elicitation", self.backend.get_elicitation(elicitation_id))

    async def live_elicitations(self, user: UserRef) -> list[PendingElicitation]:
        return await self._observed("live_elicitations", self.backend.live_elicitations(user))

    async def get_elicitation_with_connection(
        self, elicitation_id: str
    ) -> tuple[PendingElicitation, Connection | None] | None:
        return await self._observed(
            "get_elicitation_with_connection", self.backend.get_elicitation_with_connection(elicitation_id)
        )

    async def transition_elicitation(
        self, elicitation_id: str, expected: ElicitationStatus, new: ElicitationStatus
    ) -> PendingElicitation | None:
        return await self._observed(
            "transition_elicitation", self.backend.transition_elicitation(elicitation_id, expected, new)
        )

    async def open_elicitation(self, state: OAuthState) -> PendingElicitation | None:
        return await self._observed("open_elicitation", self.backend.open_elicitation(state))

    async def complete_elicitation(
        self, connection: Connection, elicitation_id: str
    ) -> PendingElicitation | None:
        return await self._observed(
            "complete_elicitation", self.backend.complete_elicitation(connection, elicitation_id)
        )

    # --- one-time records --------------------------------------------------------------------
    async def put_oauth_state(self, state: OAuthState) -> None:
        await self._observed("put_oauth_state", self.backend.put_oauth_state(state))

    async def take_oauth_state(self, state: str) -> OAuthState | None:
        return await self._observed("take_oauth_state", self.backend.take_oauth_state(state))

    async def put_callback_outcome(self, state: str, outcome: CallbackOutcome) -> None:
        await self._observed("put_callback_outcome", self.backend.put_callback_outcome(state, outcome))

    async def get_callback_outcome(self, state: str) -> CallbackOutcome | None:
        return await self._observed("get_callback_outcome", self.backend.get_callback_outcome(state))

    async def put_nonce(self, nonce: str, ttl_seconds: float, slot: str | None = None) -> None:
        await self._observed("put_nonce", self.backend.put_nonce(nonce, ttl_seconds, slot))

    async def take_nonce(self, nonce: str) -> bool:
        return await self._observed("take_nonce", self.backend.take_nonce(nonce))

    # --- key rotation ------------------------------------------------------------------------
    async def reencrypt_all(self) -> int:
        return await self._observed("reencrypt_all", self.backend.reencrypt_all())

    async def count_sealed_under(self, kid: str) -> int:
        return await self._observed("count_sealed_under", self.backend.count_sealed_under(kid))

    # --- webhook outbox ----------------------------------------------------------------------
    async def enqueue_webhook(self, message: WebhookMessage) -> None:
        await self._observed("enqueue_webhook", self.backend.enqueue_webhook(message))

    async def claim_webhooks(self, now: float, lease_seconds: float, limit: int) -> list[WebhookMessage]:
        return await self._observed("claim_webhooks", self.backend.claim_webhooks(now, lease_seconds, limit))

    async def settle_webhook(self, claimed: WebhookMessage, retry_at: float | None) -> bool:
        return await self._observed("settle_webhook", self.backend.settle_webhook(claimed, retry_at))

    # --- client registrations ----------------------------------------------------------------
    async def get_client_registration(self, issuer: str, redirect_uri: str) -> ClientRegistration | None:
        return await self._observed(
            "get_client_registration", self.backend.get_client_registration(issuer, redirect_uri)
        )

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration:
        return await self._observed(
            "add_client_registration", self.backend.add_client_registration(registration)
        )

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        return await self._observed(
            "remove_client_registration",
            self.backend.remove_client_registration(issuer, redirect_uri, client_id),
        )

    async def reencrypt_client_registrations(self) -> int:
        return await self._observed(
            "reencrypt_client_registrations", self.backend.reencrypt_client_registrations()
        )

    async def count_client_registrations_sealed_under(self, kid: str) -> int:
        return await self._observed(
            "count_client_registrations_sealed_under",
            self.backend.count_client_registrations_sealed_under(kid),
        )

    # --- lifecycle ---------------------------------------------------------------------------
    async def ping(self) -> None:
        await self._observed("ping", self.backend.ping())

    async def close(self) -> None:
        """Close the backend, if it was opened."""
        if self._opened is not None:
            await self._observed("close", self._opened.close())
