"""The storage interface every backend implements (SQLite, Redis, PostgreSQL).

Backends hold three kinds of records:
- connections: token sets, encrypted (AEAD, associated data = the connection key), no TTL;
- pending elicitations: id -> record with a small status machine, TTL;
- one-time records (OAuth states, request-state nonces): single use, TTL, atomic consume;
  a callback's outcome, kept under its taken state's hash a short while (TTL).

Every method is atomic on its own. A backend failure raises `StoreUnavailable`; callers fail
closed on it (docs/threat-model.md, "Failure is closed").
"""

from __future__ import annotations

from typing import Protocol

from token_store.models import (
    CallbackOutcome,
    ClientRegistration,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    UserRef,
    WebhookMessage,
)


class StoreError(Exception):
    """Base class for store failures."""


class StoreUnavailable(StoreError):
    """The backend could not be reached or did not answer in time."""


class TooManyPending(StoreError):
    """The user already has the maximum number of live pending elicitations
    (docs/threat-model.md, "per-user limit on pending elicitations")."""


class Store(Protocol):
    # --- connections (tokens) -------------------------------------------------------------
    async def put_connection(self, connection: Connection) -> None:
        """Insert or replace the connection at `connection.key` (encrypts the token set)."""
        ...

    async def get_connection(
        self, user: UserRef, provider: str, account: str | None = None
    ) -> Connection | None:
        """The connection for (user, provider[, account]); with no account, the most recently
        updated one. A record that fails to decrypt (tampered, moved, unknown key) reads as absent."""
        ...

    async def list_connections(self, user: UserRef, provider: str | None = None) -> list[Connection]:
        """All of the user's connections that decrypt (only those at `provider` when given: one
        lookup, which a tool call's account choice needs), ordered by provider then account."""
        ...

    async def delete_connection(self, key: ConnectionKey) -> bool:
        """Delete one connection; True when something was deleted."""
        ...

    async def delete_connections(self, user: UserRef, provider: str) -> list[Connection]:
        """Delete every connection of the user at `provider`; returns what was deleted."""
        ...

    async def replace_connection(self, connection: Connection, expected_updated_at: float) -> bool:
        """Compare-and-set: store `connection` (same key) only if the stored record's
        `updated_at` still equals `expected_updated_at`. False when it changed or is gone.
        Used by refresh so a rotated refresh token never overwrites a newer grant."""
        ...

    async def set_connection_status(self, key: ConnectionKey, status: ConnectionStatus) -> bool:
        """Set the status of an existing connection (tokens untouched); False when absent."""
        ...

    async def find_connections(
        self, provider: str | None = None, sub: str | None = None, iss: str | None = None
    ) -> list[Connection]:
        """Every user's connections matching each filter given (all of them with none) that
        decrypt, ordered by user (iss, sub), provider, account. For operators (`connections list`,
        `connections revoke`, the admin API): a scan of the store, never on a request's path."""
        ...

    # --- remembered choices ---------------------------------------------------------------
    async def get_default_account(self, user: UserRef, provider: str) -> str | None:
        """The account (the provider's id, as in `ConnectionKey.account`) the user chose to use at
        `provider` when a tool call names none; None when no choice is remembered. Not a secret.
        The account may since have been disconnected: the caller checks it still exists."""
        ...

    async def set_default_account(self, user: UserRef, provider: str, account: str | None) -> None:
        """Remember `account` as the user's default at `provider` (None forgets it). No TTL."""
        ...

    # --- locks ----------------------------------------------------------------------------
    async def acquire_lock(self, name: str, ttl_seconds: float) -> str | None:
        """Take the named lock for at most `ttl_seconds`: a random owner token, or None when
        another owner holds it. Shared by every replica using the store (single-flight refresh)."""
        ...

    async def release_lock(self, name: str, owner: str) -> bool:
        """Release the lock if `owner` still holds it (never someone else's after a TTL expiry)."""
        ...

    async def lock_held(self, name: str) -> bool:
        """Is the named lock held (unexpired)? Read-only: a lock doubles as a flag with a TTL."""
        ...

    # --- pending elicitations -------------------------------------------------------------
    async def create_elicitation(self, elicitation: PendingElicitation, max_live_per_user: int) -> None:
        """Store a new pending elicitation (TTL until `expires_at`).

        Raises `TooManyPending` when the user already has `max_live_per_user` live (status in
        `LIVE_STATUSES`, unexpired) elicitations. Check and insert are one atomic step.
        """
        ...

    async def get_elicitation(self, elicitation_id: str) -> PendingElicitation | None:
        """The elicitation, or None when unknown or expired."""
        ...

    async def live_elicitations(self, user: UserRef) -> list[PendingElicitation]:
        """The user's live (status in `LIVE_STATUSES`) unexpired elicitations, those
        `create_elicitation` counts (at most its `max_live_per_user`), newest first."""
        ...

    async def get_elicitation_with_connection(
        self, elicitation_id: str
    ) -> tuple[PendingElicitation, Connection | None] | None:
        """The elicitation as `get_elicitation` returns it, with the connection
        `get_connection(elicitation.user, elicitation.provider)` would return (the most recently
        updated one that decrypts, or None), read together in one round trip. None when the
        elicitation is unknown or expired.

        For /connect, which checks the elicitation and, before sending the browser to the provider,
        whether a healthy refresh token is already held. Replaces `get_elicitation` +
        `get_connection`; the two reads need not be one snapshot (the connection is only a hint).
        """
        ...

    async def transition_elicitation(
        self, elicitation_id: str, expected: ElicitationStatus, new: ElicitationStatus
    ) -> PendingElicitation | None:
        """Atomic compare-and-set of the status. Returns the updated record, or None when the
        elicitation is unknown, expired, or not in `expected` (so each transition happens once).
        ValueError, with nothing sent to the backend, when `expected → new` is not a `Transition`."""
        ...

    async def open_elicitation(self, state: OAuthState) -> PendingElicitation | None:
        """Start the provider authorization of `state.elicitation`, in one atomic step: move the
        stored elicitation (looked up by `state.elicitation.id`) from PENDING to OPENED
        (`Transition.OPEN`) and store
        `state` as `put_oauth_state` would (sealed, under a hash of `state.state`, until
        `state.expires_at`; `take_oauth_state` takes it).

        Returns the opened elicitation as stored (status OPENED). Returns None, and stores
        nothing, when the elicitation is unknown, expired or not PENDING: a connect link opens
        once, and a losing concurrent visit leaves no usable state behind. A state that already
        exists raises `StoreUnavailable` and changes nothing.

        Replaces `put_oauth_state` + `transition_elicitation(id, PENDING, OPENED)` (+ the
        `take_oauth_state` clean-up when the transition lost): one transaction or Lua script.
        """
        ...

    async def complete_elicitation(
        self, connection: Connection, elicitation_id: str
    ) -> PendingElicitation | None:
        """Store the token set of a finished authorization and complete its elicitation, in one
        atomic step: insert or replace `connection` as `put_connection` would, then move the
        elicitation `elicitation_id` from OPENED to COMPLETE (`Transition.COMPLETE`).

        One difference from `put_connection`: when a connection with the same key (user,
        provider, account) is already stored, the stored record's `connected_at` is kept (a
        reconnect is not a new connection) and everything else is taken from `connection`; a new
        connection gets `connection.connected_at`. So the callback need not read the previous
        record for it.

        The connection is stored whatever the elicitation's status (the user did authorize; a
        connection is never lost to a concurrently failed or expired elicitation). Returns the
        completed elicitation as stored (status COMPLETE), to be published to the waiting client;
        None when it was unknown, expired or not OPENED (then there is nothing to publish). The
        caller binds the two: `connection.key.user` must be the elicitation's user.

        Replaces `put_connection` + `transition_elicitation(id, OPENED, COMPLETE)`.
        """
        ...

    # --- one-time records -----------------------------------------------------------------
    async def put_oauth_state(self, state: OAuthState) -> None:
        """Store an OAuth state (encrypted, keyed by a hash of `state.state`) until `expires_at`."""
        ...

    async def take_oauth_state(self, state: str) -> OAuthState | None:
        """Atomically fetch and delete. None when unknown, expired, already taken, or it fails to decrypt."""
        ...

    async def put_callback_outcome(self, state: str, outcome: CallbackOutcome) -> None:
        """Keep `outcome` under a hash of the OAuth state `state` until `outcome.expires_at`. The
        first one put for a state stays: a second put changes nothing."""
        ...

    async def get_callback_outcome(self, state: str) -> CallbackOutcome | None:
        """The outcome put for `state` (read, not taken: a callback may be repeated), or None when
        none was put or it expired."""
        ...

    async def put_nonce(self, nonce: str, ttl_seconds: float, slot: str | None = None) -> None:
        """Record a single-use nonce (for example the one inside a 2026-07-28 requestState).

        With `slot` (for example one user's open question at one provider), the nonce replaces,
        in the same atomic step, the one last put under that slot, which no longer takes: a slot
        holds at most one live nonce, however often it is asked again. The slot is stored only
        as a hash. On Redis Cluster the nonces of one slot begin with the same `slot_tag` (as
        `mint_opaque_id(owner)` mints them): the slot's record lies in the slot they name."""
        ...

    async def take_nonce(self, nonce: str) -> bool:
        """Atomically consume a nonce: True the first time, False afterwards or once expired."""
        ...

    # --- key rotation ---------------------------------------------------------------------
    async def reencrypt_all(self) -> int:
        """Re-encrypt every stored secret (token sets, OAuth states) not sealed under the key
        ring's primary key; return how many records were rewritten.

        Safe while other replicas serve traffic: each record is replaced only if it still holds
        the blob that was read (compare-and-set), so a concurrent write is never overwritten;
        records written concurrently are already under the primary key. Records that fail to
        decrypt are left alone (and counted nowhere).
        """
        ...

    async def count_sealed_under(self, kid: str) -> int:
        """How many stored secrets (token sets, unexpired OAuth states) are sealed under key `kid`:
        each is sealed under one key only, so these are what removing `kid` would strand."""
        ...

    # --- webhook outbox --------------------------------------------------------------------
    async def enqueue_webhook(self, message: WebhookMessage) -> None:
        """Keep `message` until `settle_webhook` removes it (no TTL: a replica that dies does
        not lose it). Its id is unique; enqueueing the same id again changes nothing."""
        ...

    async def claim_webhooks(self, now: float, lease_seconds: float, limit: int) -> list[WebhookMessage]:
        """Up to `limit` messages due (`next_attempt_at <= now`), oldest due first, each moved to
        `next_attempt_at = now + lease_seconds` (its lease) in the same atomic step: a message
        under a live lease is never claimed, so no other replica sends it while this one does,
        and if this one dies it is due again when the lease ends. Returned with `attempts` so far
        and `next_attempt_at` = the lease's end, which `settle_webhook` checks."""
        ...

    async def settle_webhook(self, claimed: WebhookMessage, retry_at: float | None) -> bool:
        """After an attempt on `claimed` (as `claim_webhooks` returned it): None removes the
        message (delivered, or given up); a time counts the attempt and makes the message due
        again then. Only the holder of the message's current lease settles it: once the lease
        ended and another replica claimed the message, this changes nothing and returns False
        (the other replica's attempt is the one that counts)."""
        ...

    # --- client registrations -------------------------------------------------------------
    async def get_client_registration(self, issuer: str, redirect_uri: str) -> ClientRegistration | None:
        """This server's dynamic registration at `issuer` for `redirect_uri`, or None (also when it
        fails to decrypt). No TTL: a registration lives until `remove_client_registration`."""
        ...

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration:
        """Store `registration` (sealed) unless one is already stored for its (issuer, redirect
        URI), in one atomic step; return the one stored: this one, or the one that was there. So
        replicas that registered at the same time all keep the first one stored."""
        ...

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        """Delete the registration of (issuer, redirect URI) if it is still `client_id`'s (never a
        newer one another replica stored); True when something was deleted."""
        ...

    async def reencrypt_client_registrations(self) -> int:
        """`reencrypt_all` for client registrations: each one not sealed under the primary key is
        sealed again (compare-and-set); how many were rewritten."""
        ...

    async def count_client_registrations_sealed_under(self, kid: str) -> int:
        """`count_sealed_under` for client registrations."""
        ...

    # --- lifecycle ------------------------------------------------------------------------
    async def ping(self) -> None:
        """Raise `StoreUnavailable` when the backend cannot serve requests."""
        ...

    async def close(self) -> None: ...
