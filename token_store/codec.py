"""How secret records look at rest, shared by every backend.

One place for: the lookup key of a one-time value (a hash, never the value), the associated data
each kind of sealed record is bound to, sealing and opening token sets and OAuth states, and the
decrypt-or-skip rule (a record that does not open reads as absent, with one warning that names
where it is and nothing it holds). The blob format itself belongs to `KeyRing` (crypto.py); the
JSON of each record to its dataclass (models.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import astuple
from typing import Any

from token_store.crypto import DecryptError, KeyRing
from token_store.models import (
    DELETIONS_KEPT,
    ClientRegistration,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    Deletion,
    OAuthState,
    PendingElicitation,
    SealedConnection,
    TokenSet,
    UserRef,
    WebhookMessage,
)

_log = logging.getLogger(__name__)


def lookup_key(secret: str) -> str:
    """The name a one-time value (OAuth state, nonce, lock name) is stored under: its SHA-256, so
    the backend never holds the value verbatim."""
    return hashlib.sha256(secret.encode()).hexdigest()


def state_associated_data(state_key: str) -> bytes:
    """AEAD associated data of an OAuth state: its lookup key, so a state sealed for one key opens
    under no other (a record moved to another key reads as absent)."""
    return json.dumps(["state", state_key], separators=(",", ":")).encode()


def open_or_skip(keyring: KeyRing, blob: bytes, associated_data: bytes, what: str) -> bytes | None:
    """The plaintext of `blob`, or None when it does not open (tampered, moved, unknown key).

    docs/threat-model.md, 'Failure is closed': such a record reads as absent. `what` locates the
    record in the one warning logged; never pass it anything secret.
    """
    try:
        return keyring.open(blob, associated_data)
    except DecryptError:
        _log.warning("stored %s failed to decrypt; treating it as absent", what)
        return None


def reseal(keyring: KeyRing, blob: bytes, associated_data: bytes, what: str) -> bytes | None:
    """`blob` sealed again under the primary key; None when it already is, or does not open."""
    if not keyring.is_stale(blob):
        return None
    plaintext = open_or_skip(keyring, blob, associated_data, what)
    return None if plaintext is None else keyring.seal(plaintext, associated_data)


def describe_connection(key: ConnectionKey) -> str:
    """How a warning names a connection record: provider and account locate it; no user, no token."""
    return f"connection (provider={key.provider} account={key.account})"


STATE = "OAuth state"  # how a warning names an OAuth state: its hash would only be noise


def seal_tokens(keyring: KeyRing, key: ConnectionKey, tokens: TokenSet) -> bytes:
    return keyring.seal(tokens.to_json(), key.associated_data())


def open_tokens(keyring: KeyRing, key: ConnectionKey, blob: bytes) -> TokenSet | None:
    plaintext = open_or_skip(keyring, blob, key.associated_data(), describe_connection(key))
    return None if plaintext is None else TokenSet.from_json(plaintext)


def reseal_tokens(keyring: KeyRing, key: ConnectionKey, blob: bytes) -> bytes | None:
    return reseal(keyring, blob, key.associated_data(), describe_connection(key))


def seal_state(keyring: KeyRing, state: OAuthState) -> tuple[str, bytes]:
    """(lookup key, sealed blob) of an OAuth state: it holds the PKCE verifier, so it is sealed."""
    key = lookup_key(state.state)
    return key, keyring.seal(state.to_json(), state_associated_data(key))


def open_state(keyring: KeyRing, state_key: str, blob: bytes) -> OAuthState | None:
    plaintext = open_or_skip(keyring, blob, state_associated_data(state_key), STATE)
    return None if plaintext is None else OAuthState.from_json(plaintext)


def reseal_state(keyring: KeyRing, state_key: str, blob: bytes) -> bytes | None:
    return reseal(keyring, blob, state_associated_data(state_key), STATE)


def client_registration_key(issuer: str, redirect_uri: str) -> str:
    """The name a client registration is stored under: a hash of its issuer and redirect URI
    (canonical JSON, so no two pairs name one record)."""
    canonical = json.dumps([issuer, redirect_uri], separators=(",", ":"))
    return lookup_key(canonical)


def client_associated_data(key: str) -> bytes:
    """AEAD associated data of a client registration: its key, so a registration moved to another
    (issuer, redirect URI) opens under no other and reads as absent."""
    return json.dumps(["client", key], separators=(",", ":")).encode()


CLIENT = "client registration"  # how a warning names one: its issuer could be a customer's host


def seal_client(keyring: KeyRing, registration: ClientRegistration) -> tuple[str, bytes]:
    """(key, sealed blob) of a client registration: it may hold a client secret, so it is sealed."""
    key = client_registration_key(registration.issuer, registration.redirect_uri)
    return key, keyring.seal(registration.to_json(), client_associated_data(key))


def open_client(keyring: KeyRing, key: str, blob: bytes) -> ClientRegistration | None:
    plaintext = open_or_skip(keyring, blob, client_associated_data(key), CLIENT)
    return None if plaintext is None else ClientRegistration.from_json(plaintext)


def reseal_client(keyring: KeyRing, key: str, blob: bytes) -> bytes | None:
    return reseal(keyring, blob, client_associated_data(key), CLIENT)


# The `connections` table of the SQL backends, in this order everywhere: the key (its PRIMARY KEY),
# then the rest. Every statement's column list and parameter order is built from these.
CONNECTION_KEY = ("iss", "sub", "provider", "account")
CONNECTION_COLUMNS = (
    *CONNECTION_KEY,
    "account_label",
    "blob",
    "connected_at",
    "updated_at",
    "status",
    "refreshed_at",
)
# What `open_connection_rows` reads: every column but the user (iss, sub), who is known already.
CONNECTION_READ_COLUMNS = CONNECTION_COLUMNS[2:]


def seal_connection(keyring: KeyRing, connection: Connection) -> SealedConnection:
    c = connection
    blob = seal_tokens(keyring, c.key, c.tokens)
    return SealedConnection(
        c.key, blob, c.account_label, c.connected_at, c.updated_at, c.status, c.refreshed_at
    )


def connection_values(keyring: KeyRing, connection: Connection) -> tuple[Any, ...]:
    """The `connections` row of `connection` in `CONNECTION_COLUMNS` order, its token set sealed."""
    return sealed_values(seal_connection(keyring, connection))


def sealed_values(sealed: SealedConnection) -> tuple[Any, ...]:
    """The `connections` row of a sealed connection, in `CONNECTION_COLUMNS` order."""
    key = sealed.key
    return (
        key.user.iss,
        key.user.sub,
        key.provider,
        key.account,
        sealed.account_label,
        sealed.blob,
        sealed.connected_at,
        sealed.updated_at,
        sealed.status.value,
        sealed.refreshed_at,
    )


def sealed_of_row(row: Sequence[Any]) -> SealedConnection | None:
    """The sealed connection of a `connections` row (`CONNECTION_COLUMNS`); None when its status is
    unknown (only an edit underneath the store, or a newer writer, leaves one)."""
    iss, sub, provider, account, label, blob, connected_at, updated_at, status, refreshed_at = row
    try:
        parsed_status = ConnectionStatus(status)
    except ValueError:
        return None
    key = ConnectionKey(UserRef(iss, sub), provider, account)
    return SealedConnection(key, bytes(blob), label, connected_at, updated_at, parsed_status, refreshed_at)


def key_values(key: ConnectionKey) -> tuple[str, str, str, str]:
    """A connection key as the SQL backends' `CONNECTION_KEY` columns."""
    return key.user.iss, key.user.sub, key.provider, key.account


# The `deleted_connections` table of the SQL backends (`Deletion`, kept until `expires_at`).
DELETION_COLUMNS = (*CONNECTION_KEY, "deleted_at", "expires_at")


def deletion_values(deletion: Deletion) -> tuple[Any, ...]:
    """The `deleted_connections` row of `deletion`, in `DELETION_COLUMNS` order."""
    return *key_values(deletion.key), deletion.deleted_at, deletion.deleted_at + DELETIONS_KEPT


def deletion_of_row(row: Sequence[Any]) -> Deletion:
    """The deletion of an `(iss, sub, provider, account, deleted_at)` row."""
    iss, sub, provider, account, deleted_at = row
    return Deletion(ConnectionKey(UserRef(iss, sub), provider, account), deleted_at)


def open_connection_rows(keyring: KeyRing, user: UserRef, rows: Iterable[Sequence[Any]]) -> list[Connection]:
    """The connections of `user` in `rows` (`CONNECTION_READ_COLUMNS`) that open, in row order."""
    connections = []
    for provider, account, label, blob, connected_at, updated_at, status, refreshed_at in rows:
        key = ConnectionKey(user, provider, account)
        try:
            parsed_status = ConnectionStatus(status)
        except ValueError:
            # Only an edit underneath the store (or a newer writer) leaves an unknown status.
            _log.warning("stored %s has an unknown status; treating it as absent", describe_connection(key))
            continue
        sealed = SealedConnection(key, blob, label, connected_at, updated_at, parsed_status, refreshed_at)
        connection = open_sealed(keyring, sealed)
        if connection is not None:
            connections.append(connection)
    return connections


def open_sealed(keyring: KeyRing, sealed: SealedConnection) -> Connection | None:
    """The connection `sealed` holds, its token set opened; None when it does not open."""
    tokens = open_tokens(keyring, sealed.key, sealed.blob)
    if tokens is None:
        return None
    s = sealed
    return Connection(s.key, tokens, s.account_label, s.connected_at, s.updated_at, s.status, s.refreshed_at)


def open_any_connection_rows(keyring: KeyRing, rows: Iterable[Sequence[Any]]) -> list[Connection]:
    """`open_connection_rows` over rows of any users: each row is (iss, sub, then its columns)."""
    connections = []
    for iss, sub, *columns in rows:
        connections.extend(open_connection_rows(keyring, UserRef(iss, sub), [columns]))
    return connections


def resealed_connection_rows(
    keyring: KeyRing, rows: Iterable[Sequence[Any]]
) -> list[tuple[bytes, str, str, str, str, bytes]]:
    """Key rotation of the SQL backends: for each `(iss, sub, provider, account, blob)` row whose
    token set opens and is not under the primary key, `(new blob, iss, sub, provider, account,
    blob)`: the parameters of an UPDATE that replaces the blob only if it is still the one read."""
    updates = []
    for iss, sub, provider, account, blob in rows:
        new = reseal_tokens(keyring, ConnectionKey(UserRef(iss, sub), provider, account), blob)
        if new is not None:
            updates.append((new, iss, sub, provider, account, blob))
    return updates


def resealed_state_rows(keyring: KeyRing, rows: Iterable[Sequence[Any]]) -> list[tuple[bytes, str, bytes]]:
    """`resealed_connection_rows` for `(key, blob)` rows of OAuth states: `(new blob, key, blob)`."""
    updates = []
    for key, blob in rows:
        new = reseal_state(keyring, key, blob)
        if new is not None:
            updates.append((new, key, blob))
    return updates


def elicitation_of_rows(rows: Sequence[Sequence[Any]]) -> PendingElicitation | None:
    """The elicitation whose JSON record is the first column of the first row; None with no row."""
    return PendingElicitation.from_json(rows[0][0]) if rows else None


def elicitation_with_connection_rows(
    keyring: KeyRing, rows: Sequence[Sequence[Any]]
) -> tuple[PendingElicitation, Connection | None] | None:
    """`Store.get_elicitation_with_connection` from the rows of the SQL backends' join: each is the
    elicitation's record, then one of its user's connections at its provider
    (`CONNECTION_READ_COLUMNS`, all NULL when there is none), most recently updated first."""
    elicitation = elicitation_of_rows(rows)
    if elicitation is None:
        return None
    joined = [tuple(row)[1:] for row in rows if row[1] is not None]
    held = open_connection_rows(keyring, elicitation.user, joined)
    return elicitation, held[0] if held else None


# The `webhook_outbox` table of the SQL backends, in `WebhookMessage`'s field order.
WEBHOOK_COLUMNS = ("id", "type", "body", "created_at", "next_attempt_at", "attempts")


def webhook_values(message: WebhookMessage) -> tuple[Any, ...]:
    """The `webhook_outbox` row of `message`, in `WEBHOOK_COLUMNS` order."""
    return astuple(message)


def webhook_messages(rows: Iterable[Sequence[Any]]) -> list[WebhookMessage]:
    """The messages of `rows` (`WEBHOOK_COLUMNS`), oldest first (`created_at`, then `id`): the order
    `claim_webhooks` promises, which an `UPDATE … RETURNING` does not give."""
    return sorted((WebhookMessage(*row) for row in rows), key=lambda m: (m.created_at, m.id))


def check_lock_ttl(ttl_seconds: float) -> None:
    if not (math.isfinite(ttl_seconds) and ttl_seconds > 0):
        raise ValueError("lock TTL must be a positive number of seconds")
