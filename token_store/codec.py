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
from typing import Any

from token_store.crypto import DecryptError, KeyRing
from token_store.models import (
    ClientRegistration,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    OAuthState,
    TokenSet,
    UserRef,
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


def connection_values(keyring: KeyRing, connection: Connection) -> tuple[Any, ...]:
    """The `connections` row of `connection` in `CONNECTION_COLUMNS` order, its token set sealed."""
    key = connection.key
    return (
        key.user.iss,
        key.user.sub,
        key.provider,
        key.account,
        connection.account_label,
        seal_tokens(keyring, key, connection.tokens),
        connection.connected_at,
        connection.updated_at,
        connection.status.value,
        connection.refreshed_at,
    )


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
        tokens = open_tokens(keyring, key, blob)
        if tokens is not None:
            connections.append(
                Connection(key, tokens, label, connected_at, updated_at, parsed_status, refreshed_at)
            )
    return connections


def open_any_connection_rows(keyring: KeyRing, rows: Iterable[Sequence[Any]]) -> list[Connection]:
    """`open_connection_rows` over rows of any users: each row is (iss, sub, then its columns)."""
    connections = []
    for iss, sub, *columns in rows:
        connections.extend(open_connection_rows(keyring, UserRef(iss, sub), [columns]))
    return connections


def check_lock_ttl(ttl_seconds: float) -> None:
    if not (math.isfinite(ttl_seconds) and ttl_seconds > 0):
        raise ValueError("lock TTL must be a positive number of seconds")
