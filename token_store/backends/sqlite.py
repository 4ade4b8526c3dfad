"""The embedded default backend: one SQLite file, for a single replica.

One connection guarded by a lock; every call runs in a worker thread so the event loop never
blocks on disk. Token sets and OAuth states are sealed (token_store.codec) before they reach SQL.

A step of one write statement runs on its own: SQLite takes the write lock when such a statement
starts, so it is atomic without BEGIN/COMMIT. A step of several statements runs in one
`BEGIN IMMEDIATE` transaction. Expired non-token rows are invisible to every read; they are
deleted by a purge that TTL writes run at most once every `_PURGE_INTERVAL` seconds.

Schema versions (`PRAGMA user_version`): 1 the first release; 2 adds `connections.status` and
`connections.refreshed_at` (metadata, not secret) and the `locks` table; 3 adds the
`default_accounts` table (the account a user chose per provider, not secret); 4 adds `nonces.slot`
(a hash; one live nonce per slot); 5 adds the `webhook_outbox` table (no secret); 6 adds the
`deleted_connections` table (each connection deleted and when: no secret, kept `DELETIONS_KEPT`)
and `copy_window` (when the first `store copy-from` into this store began); 7 adds
`callback_outcomes` (how a callback ended, under its state's hash, minutes: no secret); 8 adds the
`client_registrations` table (sealed: a client secret). Opening an older database migrates it in
place (one transaction); a newer one is refused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from token_store import codec
from token_store.base import StoreUnavailable, TooManyPending
from token_store.crypto import KeyRing
from token_store.models import (
    LIVE_STATUSES,
    CallbackOutcome,
    ClientRegistration,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    Deletion,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    SealedConnection,
    Transition,
    UserRef,
    WebhookMessage,
    require_transition,
)
from token_store.store_copy import Change, Decision

_T = TypeVar("_T")
_log = logging.getLogger(__name__)

_MIN_SQLITE = (3, 35, 0)  # DELETE/UPDATE ... RETURNING
_SCHEMA_VERSION = 8
_LIVE_JSON = json.dumps(sorted(s.value for s in LIVE_STATUSES))  # bound to `json_each` in SQL
_PURGE_INTERVAL = 10.0  # seconds of the store's clock between purges of expired rows

# The current schema, one statement each (they run inside the migration transaction, which
# `executescript` would commit). A new database gets it whole; an older one gets the missing tables
# here and the missing columns from `_ADDED_COLUMNS`.
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS connections (
    iss TEXT NOT NULL,
    sub TEXT NOT NULL,
    provider TEXT NOT NULL,
    account TEXT NOT NULL,
    account_label TEXT NOT NULL,
    blob BLOB NOT NULL,
    connected_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'ok',
    refreshed_at REAL,
    PRIMARY KEY (iss, sub, provider, account)
)""",
    """CREATE TABLE IF NOT EXISTS elicitations (
    id TEXT PRIMARY KEY,
    iss TEXT NOT NULL,
    sub TEXT NOT NULL,
    provider TEXT NOT NULL,
    status TEXT NOT NULL,
    expires_at REAL NOT NULL,
    record TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS elicitations_user ON elicitations (iss, sub, status, expires_at)",
    "CREATE INDEX IF NOT EXISTS elicitations_expiry ON elicitations (expires_at)",
    """CREATE TABLE IF NOT EXISTS oauth_states (
    key TEXT PRIMARY KEY,
    blob BLOB NOT NULL,
    expires_at REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS oauth_states_expiry ON oauth_states (expires_at)",
    """CREATE TABLE IF NOT EXISTS nonces (
    key TEXT PRIMARY KEY,
    expires_at REAL NOT NULL,
    slot TEXT
)""",
    "CREATE INDEX IF NOT EXISTS nonces_expiry ON nonces (expires_at)",
    """CREATE TABLE IF NOT EXISTS locks (
    name_hash TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS locks_expiry ON locks (expires_at)",
    """CREATE TABLE IF NOT EXISTS default_accounts (
    iss TEXT NOT NULL,
    sub TEXT NOT NULL,
    provider TEXT NOT NULL,
    account TEXT NOT NULL,
    PRIMARY KEY (iss, sub, provider)
)""",
    """CREATE TABLE IF NOT EXISTS webhook_outbox (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    next_attempt_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0
)""",
    "CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox (next_attempt_at)",
    """CREATE TABLE IF NOT EXISTS deleted_connections (
    iss TEXT NOT NULL,
    sub TEXT NOT NULL,
    provider TEXT NOT NULL,
    account TEXT NOT NULL,
    deleted_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (iss, sub, provider, account)
)""",
    "CREATE INDEX IF NOT EXISTS deleted_connections_expiry ON deleted_connections (expires_at)",
    """CREATE TABLE IF NOT EXISTS callback_outcomes (
    key TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    expires_at REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS callback_outcomes_expiry ON callback_outcomes (expires_at)",
    """CREATE TABLE IF NOT EXISTS copy_window (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    opened_at REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS client_registrations (
    key TEXT PRIMARY KEY,
    blob BLOB NOT NULL
)""",
)

# Columns added after version 1: (table, column, declaration). ADD COLUMN fills existing rows with
# the default, so a connection stored by version 1 reads as status 'ok', never refreshed.
_ADDED_COLUMNS = (
    ("connections", "status", "TEXT NOT NULL DEFAULT 'ok'"),
    ("connections", "refreshed_at", "REAL"),
    ("nonces", "slot", "TEXT"),
)
# Indexes on added columns: created once the columns exist. A slot holds one nonce: INSERT OR
# REPLACE deletes the row already in the slot (NULL slots never conflict).
# mutant: sqlite.nonce_slot "UNIQUE " -> ""
_ADDED_INDEXES = ("CREATE UNIQUE INDEX IF NOT EXISTS nonces_slot ON nonces (slot)",)

_TTL_TABLES = ("elicitations", "oauth_states", "nonces", "locks", "deleted_connections", "callback_outcomes")
_COPY_PAGE = 256
_CONNECTION_COLUMNS = ", ".join(codec.CONNECTION_READ_COLUMNS)


class SQLiteStore:
    """`Store` over a local SQLite file. Create it with `await SQLiteStore.open(...)`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        keyring: KeyRing,
        clock: Callable[[], float],
        reader: sqlite3.Connection | None = None,
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        # Single-statement reads run on the event loop over their own read-only connection (see
        # `_read`); without one they take the worker thread like everything else.
        self._reader = reader
        self._keyring = keyring
        self._clock = clock
        self._lock = threading.Lock()
        self._purged_at = -math.inf  # store-clock time of the last purge

    @classmethod
    async def open(
        cls, path: Path, keyring: KeyRing, *, clock: Callable[[], float] = time.time
    ) -> SQLiteStore:
        """Open (creating when missing) the database at `path`; dir 0700, file 0600. Every TTL is
        judged by `clock` (injectable for tests)."""
        conn = await anyio.to_thread.run_sync(_connect, path)
        try:
            reader = await anyio.to_thread.run_sync(_connect_reader, path)
        except BaseException:
            conn.close()
            raise
        store = cls(conn, keyring, clock, reader)
        try:
            await store.purge_expired()  # rows that expired while the process was down
        except BaseException:
            store._close()  # synchronous: must also run when this task is being cancelled
            raise
        return store

    # --- connections (tokens) -------------------------------------------------------------
    async def put_connection(self, connection: Connection) -> None:
        row = self._connection_row(connection)
        await self._run("put_connection", lambda conn: _put_connection(conn, row))

    async def get_connection(
        self, user: UserRef, provider: str, account: str | None = None
    ) -> Connection | None:
        if account is None:
            where, args = "AND provider = ? ORDER BY updated_at DESC, account", [provider]
        else:
            where, args = "AND provider = ? AND account = ?", [provider, account]
        rows = await self._select_connections("get_connection", user, where, args)
        # A row that fails to decrypt reads as absent; with no account, the next most recent one answers.
        found = codec.open_connection_rows(self._keyring, user, rows)
        return found[0] if found else None

    async def list_connections(self, user: UserRef, provider: str | None = None) -> list[Connection]:
        if provider is None:
            where, args = "ORDER BY provider, account", []
        else:
            where, args = "AND provider = ? ORDER BY account", [provider]
        rows = await self._select_connections("list_connections", user, where, args)
        return codec.open_connection_rows(self._keyring, user, rows)

    async def delete_connection(self, key: ConnectionKey) -> bool:
        now = self._clock()

        def delete(conn: sqlite3.Connection) -> bool:
            # The deletion is remembered in the same transaction (token_store/store_copy.py).
            deleted = _changes(_DELETE_CONNECTION, codec.key_values(key), conn) > 0
            # mutant: sqlite.remember_deletion
            if deleted:
                _remember_deletion(conn, Deletion(key, now))
            return deleted

        return await self._run("delete_connection", delete, transaction=True)

    async def delete_connections(self, user: UserRef, provider: str) -> list[Connection]:
        now = self._clock()

        def delete(conn: sqlite3.Connection) -> list[Any]:
            rows = conn.execute(
                f"DELETE FROM connections WHERE iss = ? AND sub = ? AND provider = ? "  # noqa: S608 - constant
                f"RETURNING {_CONNECTION_COLUMNS}",
                (user.iss, user.sub, provider),
            ).fetchall()
            for row in rows:
                # mutant: sqlite.remember_deletion
                _remember_deletion(conn, Deletion(ConnectionKey(user, provider, row[1]), now))
            return rows

        rows = await self._run("delete_connections", delete, transaction=True)
        rows.sort(key=lambda r: r[1])  # RETURNING order is unspecified
        return codec.open_connection_rows(self._keyring, user, rows)

    async def replace_connection(self, connection: Connection, expected_updated_at: float) -> bool:
        # One compare-and-set statement: only the version that was read is replaced.
        replace = partial(
            _changes,
            _REPLACE_CONNECTION,
            {**self._connection_row(connection), "expected": expected_updated_at},
        )
        return await self._run("replace_connection", replace) > 0

    async def set_connection_status(self, key: ConnectionKey, status: ConnectionStatus) -> bool:
        # The blob and updated_at stay as they are: a status change is not a new version.
        set_status = partial(
            _changes,
            "UPDATE connections SET status = ? WHERE iss = ? AND sub = ? AND provider = ? AND account = ?",
            (ConnectionStatus(status).value, key.user.iss, key.user.sub, key.provider, key.account),
        )
        return await self._run("set_connection_status", set_status) > 0

    async def find_connections(
        self, provider: str | None = None, sub: str | None = None, iss: str | None = None
    ) -> list[Connection]:
        sql, args = _find_connections_sql(provider, sub, iss)
        # On the worker thread: an operator's scan may be long, and must not hold the event loop.
        rows = await self._run("find_connections", lambda conn: conn.execute(sql, args).fetchall())
        return codec.open_any_connection_rows(self._keyring, rows)

    # --- remembered choices ---------------------------------------------------------------
    async def get_default_account(self, user: UserRef, provider: str) -> str | None:
        rows = await self._read(
            "get_default_account",
            "SELECT account FROM default_accounts WHERE iss = ? AND sub = ? AND provider = ?",
            (user.iss, user.sub, provider),
        )
        return str(rows[0][0]) if rows else None

    async def set_default_account(self, user: UserRef, provider: str, account: str | None) -> None:
        if account is None:
            sql = "DELETE FROM default_accounts WHERE iss = ? AND sub = ? AND provider = ?"
            args: tuple[str, ...] = (user.iss, user.sub, provider)
        else:
            sql = "INSERT OR REPLACE INTO default_accounts (iss, sub, provider, account) VALUES (?, ?, ?, ?)"
            args = (user.iss, user.sub, provider, account)
        await self._run("set_default_account", partial(_changes, sql, args))

    # --- locks ----------------------------------------------------------------------------
    async def acquire_lock(self, name: str, ttl_seconds: float) -> str | None:
        codec.check_lock_ttl(ttl_seconds)
        owner = secrets.token_urlsafe(24)
        now = self._clock()
        args = {"name": codec.lookup_key(name), "owner": owner, "expires_at": now + ttl_seconds, "now": now}

        def acquire(conn: sqlite3.Connection) -> bool:
            # One statement: insert, or take over a lock whose holder's time is up; a live lock is
            # left alone (the DO UPDATE guard fails, nothing changes, no row is returned).
            return bool(
                conn.execute(
                    "INSERT INTO locks (name_hash, owner, expires_at) VALUES (:name, :owner, :expires_at) "
                    "ON CONFLICT (name_hash) DO UPDATE SET owner = excluded.owner, "
                    "expires_at = excluded.expires_at WHERE locks.expires_at <= :now RETURNING owner",
                    args,
                ).fetchall()
            )

        return owner if await self._run("acquire_lock", acquire) else None

    async def release_lock(self, name: str, owner: str) -> bool:
        now = self._clock()

        def release(conn: sqlite3.Connection) -> list[Any]:
            # Compare-and-delete: another owner's lock is never touched. Our own expired row goes
            # too, but does not count as released: the lock was no longer ours.
            return conn.execute(
                # mutant: sqlite.release_lock_owner " AND owner = ?" -> ""
                "DELETE FROM locks WHERE name_hash = ? AND owner = ? RETURNING expires_at",
                # mutant: sqlite.release_lock_owner ", owner)" -> ",)"
                (codec.lookup_key(name), owner),
            ).fetchall()

        rows = await self._run("release_lock", release)
        return bool(rows) and rows[0][0] > now

    async def lock_held(self, name: str) -> bool:
        now = self._clock()

        sql = "SELECT 1 FROM locks WHERE name_hash = ? AND expires_at > ?"
        return bool(await self._read("lock_held", sql, (codec.lookup_key(name), now)))

    # --- pending elicitations -------------------------------------------------------------
    async def create_elicitation(self, elicitation: PendingElicitation, max_live_per_user: int) -> None:
        e = elicitation
        now = self._clock()
        args = {
            "id": e.id,
            "iss": e.user.iss,
            "sub": e.user.sub,
            "provider": e.provider,
            "status": e.status.value,
            "expires_at": e.expires_at,
            "record": e.to_json(),
            "live": _LIVE_JSON,
            "now": now,
            "max_live": max_live_per_user,
        }

        # Count and insert in one statement, which holds the write lock from its start: two
        # concurrent creates cannot both take the last slot.
        create = partial(
            _changes,
            "INSERT INTO elicitations (id, iss, sub, provider, status, expires_at, record) "
            "SELECT :id, :iss, :sub, :provider, :status, :expires_at, :record "
            "WHERE (SELECT count(*) FROM elicitations WHERE iss = :iss AND sub = :sub "
            # mutant: sqlite.pending_limit "< :max_live" -> ">= 0"
            "AND status IN (SELECT value FROM json_each(:live)) AND expires_at > :now) < :max_live",
            args,
        )
        if not await self._run_ttl_write("create_elicitation", create, now):
            raise TooManyPending(f"the user already has {max_live_per_user} live pending elicitations")

    async def get_elicitation(self, elicitation_id: str) -> PendingElicitation | None:
        now = self._clock()

        rows = await self._read(
            "get_elicitation",
            "SELECT record FROM elicitations WHERE id = ? AND expires_at > ?",
            (elicitation_id, now),
        )
        return codec.elicitation_of_rows(rows)

    async def live_elicitations(self, user: UserRef) -> list[PendingElicitation]:
        now = self._clock()
        rows = await self._read(
            "live_elicitations",
            "SELECT record FROM elicitations WHERE iss = ? AND sub = ? "
            "AND status IN (SELECT value FROM json_each(?)) AND expires_at > ? ORDER BY expires_at DESC",
            (user.iss, user.sub, _LIVE_JSON, now),
        )
        return [PendingElicitation.from_json(row[0]) for row in rows]

    async def get_elicitation_with_connection(
        self, elicitation_id: str
    ) -> tuple[PendingElicitation, Connection | None] | None:
        now = self._clock()

        # One statement: the elicitation, joined with each of its user's connections at its
        # provider (none: one row of NULLs), most recently updated first.
        rows = await self._read(
            "get_elicitation_with_connection",
            f"SELECT e.record, {_JOINED_CONNECTION_COLUMNS} FROM elicitations e LEFT JOIN connections c "  # noqa: S608 - constant
            "ON c.iss = e.iss AND c.sub = e.sub AND c.provider = e.provider "
            "WHERE e.id = ? AND e.expires_at > ? ORDER BY c.updated_at DESC, c.account",
            (elicitation_id, now),
        )
        return codec.elicitation_with_connection_rows(self._keyring, rows)

    async def transition_elicitation(
        self, elicitation_id: str, expected: ElicitationStatus, new: ElicitationStatus
    ) -> PendingElicitation | None:
        require_transition(expected, new)
        transition = partial(_transition, elicitation_id, expected, new, self._clock())
        return await self._run("transition_elicitation", transition)

    async def open_elicitation(self, state: OAuthState) -> PendingElicitation | None:
        key, blob = codec.seal_state(self._keyring, state)
        transition = partial(_transition, state.elicitation.id, *Transition.OPEN.value, self._clock())

        def open_(conn: sqlite3.Connection) -> PendingElicitation | None:
            # One transaction: the state is stored only when this call opened the elicitation.
            opened = transition(conn)
            # mutant: sqlite.open_elicitation_single_use true
            if opened is not None:
                _insert_state(conn, key, blob, state.expires_at)
            return opened

        return await self._run("open_elicitation", open_, transaction=True)

    async def complete_elicitation(
        self, connection: Connection, elicitation_id: str
    ) -> PendingElicitation | None:
        row = self._connection_row(connection)
        transition = partial(_transition, elicitation_id, *Transition.COMPLETE.value, self._clock())

        def complete(conn: sqlite3.Connection) -> PendingElicitation | None:
            _upsert_connection(conn, row)  # the token set first, whatever the elicitation's status
            return transition(conn)

        return await self._run("complete_elicitation", complete, transaction=True)

    # --- one-time records -----------------------------------------------------------------
    async def put_oauth_state(self, state: OAuthState) -> None:
        key, blob = codec.seal_state(self._keyring, state)
        await self._run_ttl_write(
            "put_oauth_state", lambda conn: _insert_state(conn, key, blob, state.expires_at), self._clock()
        )

    async def take_oauth_state(self, state: str) -> OAuthState | None:
        key = codec.lookup_key(state)
        now = self._clock()

        def take(conn: sqlite3.Connection) -> list[Any]:
            # Delete-and-return in one statement: of two concurrent takes, exactly one gets the row.
            # mutant: sqlite.take_oauth_state peek
            return conn.execute(
                "DELETE FROM oauth_states WHERE key = ? RETURNING blob, expires_at", (key,)
            ).fetchall()

        rows = await self._run("take_oauth_state", take)
        if not rows or rows[0][1] <= now:
            return None
        return codec.open_state(self._keyring, key, rows[0][0])

    async def put_callback_outcome(self, state: str, outcome: CallbackOutcome) -> None:
        key = codec.lookup_key(state)

        def put(conn: sqlite3.Connection) -> None:
            # OR IGNORE: the first outcome of a state stays.
            conn.execute(
                "INSERT OR IGNORE INTO callback_outcomes (key, record, expires_at) VALUES (?, ?, ?)",
                (key, outcome.to_json(), outcome.expires_at),
            )

        await self._run_ttl_write("put_callback_outcome", put, self._clock())

    async def get_callback_outcome(self, state: str) -> CallbackOutcome | None:
        rows = await self._read(
            "get_callback_outcome",
            "SELECT record FROM callback_outcomes WHERE key = ? AND expires_at > ?",
            (codec.lookup_key(state), self._clock()),
        )
        return CallbackOutcome.from_json(rows[0][0]) if rows else None

    async def put_nonce(self, nonce: str, ttl_seconds: float, slot: str | None = None) -> None:
        key = codec.lookup_key(nonce)
        slot_key = None if slot is None else codec.lookup_key(slot)
        now = self._clock()

        def put(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO nonces (key, expires_at, slot) VALUES (?, ?, ?)",
                (key, now + ttl_seconds, slot_key),
            )

        await self._run_ttl_write("put_nonce", put, now)

    async def take_nonce(self, nonce: str) -> bool:
        key = codec.lookup_key(nonce)
        now = self._clock()

        def take(conn: sqlite3.Connection) -> list[Any]:
            # mutant: sqlite.take_nonce peek
            return conn.execute("DELETE FROM nonces WHERE key = ? RETURNING expires_at", (key,)).fetchall()

        rows = await self._run("take_nonce", take)
        return bool(rows) and rows[0][0] > now

    # --- key rotation ---------------------------------------------------------------------
    async def reencrypt_all(self) -> int:
        # Reads and crypto run outside the write lock, a page at a time; each row is then replaced
        # only if it still holds the blob that was read, so a concurrent write is never overwritten.
        fresh = self._keyring.primary_prefix
        rewritten = 0
        after = 0
        while True:
            page = await self._run("reencrypt_all", partial(_stale_connections, fresh=fresh, after=after))
            if not page:
                break
            after = page[-1][0]
            updates = codec.resealed_connection_rows(self._keyring, (row[1:] for row in page))
            rewritten += await self._run(
                "reencrypt_all", partial(_update_each, _CAS_CONNECTION, updates), transaction=True
            )

        states = await self._run("reencrypt_all", partial(_stale_states, fresh=fresh, now=self._clock()))
        state_updates = codec.resealed_state_rows(self._keyring, states)
        rewritten += await self._run(
            "reencrypt_all", partial(_update_each, _CAS_STATE, state_updates), transaction=True
        )
        return rewritten

    async def count_sealed_under(self, kid: str) -> int:
        prefix = KeyRing.sealed_prefix(kid)
        now = self._clock()

        def count(conn: sqlite3.Connection) -> int:
            tokens = conn.execute(
                "SELECT count(*) FROM connections WHERE substr(blob, 1, ?) = ?", (len(prefix), prefix)
            ).fetchone()[0]
            states = conn.execute(
                "SELECT count(*) FROM oauth_states WHERE expires_at > ? AND substr(blob, 1, ?) = ?",
                (now, len(prefix), prefix),
            ).fetchone()[0]
            return int(tokens) + int(states)

        return await self._run("count_sealed_under", count)

    # --- webhook outbox --------------------------------------------------------------------
    async def enqueue_webhook(self, message: WebhookMessage) -> None:
        await self._run(
            "enqueue_webhook",
            partial(_changes, _ENQUEUE_WEBHOOK, codec.webhook_values(message)),
        )

    async def claim_webhooks(self, now: float, lease_seconds: float, limit: int) -> list[WebhookMessage]:
        # One statement, so atomic: the rows it picks are leased before any other writer runs.
        claim = partial(
            _fetch,
            "UPDATE webhook_outbox SET next_attempt_at = :lease WHERE id IN (SELECT id FROM webhook_outbox "  # noqa: S608 - constant
            # mutant: sqlite.claim_webhooks_due "next_attempt_at <= :now" -> ":now IS NOT NULL"
            "WHERE next_attempt_at <= :now ORDER BY next_attempt_at, created_at LIMIT :limit) "
            f"RETURNING {_WEBHOOK_COLUMNS}",
            {"lease": now + lease_seconds, "now": now, "limit": limit},
        )
        return codec.webhook_messages(await self._run("claim_webhooks", claim))

    async def settle_webhook(self, claimed: WebhookMessage, retry_at: float | None) -> bool:
        args = {"id": claimed.id, "lease": claimed.next_attempt_at, "retry_at": retry_at}
        if retry_at is None:
            sql = "DELETE FROM webhook_outbox WHERE id = :id"
        else:
            sql = "UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = :retry_at "
            sql += "WHERE id = :id"
        # Only under the claimer's own lease: one claimed again after it ended is the new claimer's.
        # mutant: sqlite.settle_webhook_own_lease " AND next_attempt_at = :lease" -> ""
        sql += " AND next_attempt_at = :lease"
        return bool(await self._run("settle_webhook", partial(_changes, sql, args)))

    # --- client registrations -------------------------------------------------------------
    async def get_client_registration(self, issuer: str, redirect_uri: str) -> ClientRegistration | None:
        key = codec.client_registration_key(issuer, redirect_uri)
        rows = await self._read(
            "get_client_registration", "SELECT blob FROM client_registrations WHERE key = ?", (key,)
        )
        return codec.open_client(self._keyring, key, rows[0][0]) if rows else None

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration:
        key, blob = codec.seal_client(self._keyring, registration)

        def add(conn: sqlite3.Connection) -> bytes:
            # The first stored wins: a second add leaves it and reads it back, in one transaction.
            conn.execute("INSERT OR IGNORE INTO client_registrations (key, blob) VALUES (?, ?)", (key, blob))
            stored: bytes = conn.execute(
                "SELECT blob FROM client_registrations WHERE key = ?", (key,)
            ).fetchone()[0]
            return stored

        stored = await self._run("add_client_registration", add, transaction=True)
        if stored == blob:
            return registration
        opened = codec.open_client(self._keyring, key, stored)
        if opened is None:
            raise StoreUnavailable("sqlite store: add_client_registration found a record that does not open")
        return opened

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        key = codec.client_registration_key(issuer, redirect_uri)
        rows = await self._read(
            "remove_client_registration", "SELECT blob FROM client_registrations WHERE key = ?", (key,)
        )
        if not rows:
            return False
        stored = codec.open_client(self._keyring, key, rows[0][0])
        if stored is not None and stored.client_id != client_id:
            return False  # another client was stored meanwhile: it stays
        # Compare-and-delete on the blob read: a registration stored since is never removed.
        sql = "DELETE FROM client_registrations WHERE key = ? AND blob = ?"
        return bool(await self._run("remove_client_registration", partial(_changes, sql, (key, rows[0][0]))))

    async def reencrypt_client_registrations(self) -> int:
        fresh = self._keyring.primary_prefix
        rows = await self._run(
            "reencrypt_client_registrations",
            partial(
                _fetch,
                "SELECT key, blob FROM client_registrations WHERE substr(blob, 1, ?) != ?",
                (len(fresh), fresh),
            ),
        )
        updates = []
        for key, blob in rows:
            new = codec.reseal_client(self._keyring, key, blob)
            if new is not None:
                updates.append((new, key, blob))
        sql = "UPDATE client_registrations SET blob = ? WHERE key = ? AND blob = ?"
        return await self._run(
            "reencrypt_client_registrations", partial(_update_each, sql, updates), transaction=True
        )

    async def client_registrations(self) -> AsyncIterator[ClientRegistration]:
        sql = "SELECT key, blob FROM client_registrations"
        for key, blob in await self._run("client_registrations", partial(_fetch, sql, ())):
            opened = codec.open_client(self._keyring, key, blob)
            if opened is not None:
                yield opened

    async def count_client_registrations_sealed_under(self, kid: str) -> int:
        prefix = KeyRing.sealed_prefix(kid)
        rows = await self._read(
            "count_client_registrations_sealed_under",
            "SELECT count(*) FROM client_registrations WHERE substr(blob, 1, ?) = ?",
            (len(prefix), prefix),
        )
        return int(rows[0][0])

    # --- moving to another store (token_store/store_copy.py) ------------------------------
    async def sealed_connections(self) -> AsyncIterator[SealedConnection]:
        after = 0
        while True:
            page = await self._run("sealed_connections", partial(_fetch, _SEALED_PAGE, (after, _COPY_PAGE)))
            if not page:
                return
            after = page[-1][0]
            for row in page:
                sealed = codec.sealed_of_row(row[1:])
                if sealed is not None:
                    yield sealed

    async def deletions(self) -> AsyncIterator[Deletion]:
        sql = "SELECT iss, sub, provider, account, deleted_at FROM deleted_connections WHERE expires_at > ?"
        for row in await self._run("deletions", partial(_fetch, sql, (self._clock(),))):
            yield codec.deletion_of_row(row)

    async def default_accounts(self) -> AsyncIterator[tuple[UserRef, str, str]]:
        sql = "SELECT iss, sub, provider, account FROM default_accounts"
        for iss, sub, provider, account in await self._run("default_accounts", partial(_fetch, sql, ())):
            yield UserRef(iss, sub), provider, account

    async def change_connection(self, key: ConnectionKey, decide: Decision) -> Change:
        now = self._clock()

        def change(conn: sqlite3.Connection) -> Change:
            # One transaction under the write lock: nothing changes between the reads and the write.
            row = conn.execute(_SELECT_CONNECTION, codec.key_values(key)).fetchone()
            remembered = conn.execute(_SELECT_DELETION, (*codec.key_values(key), now)).fetchone()
            made = decide(
                None if row is None else codec.sealed_of_row(row),
                None if remembered is None else Deletion(key, remembered[0]),
            )
            if made.remove:
                conn.execute(_DELETE_CONNECTION, codec.key_values(key))
            if made.put is not None:
                _put_connection(conn, dict(zip(_ROW_COLUMNS, codec.sealed_values(made.put), strict=True)))
            if made.deletion is not None:
                _remember_deletion(conn, made.deletion)
            return made

        return await self._run("change_connection", change, transaction=True)

    async def copy_default_account(self, user: UserRef, provider: str, account: str) -> None:
        sql = "INSERT OR IGNORE INTO default_accounts (iss, sub, provider, account) VALUES (?, ?, ?, ?)"
        await self._run(
            "copy_default_account", partial(_changes, sql, (user.iss, user.sub, provider, account))
        )

    async def open_copy_window(self, now: float, *, new: bool) -> float:
        def open_(conn: sqlite3.Connection) -> float:
            verb = "INSERT OR REPLACE" if new else "INSERT OR IGNORE"
            conn.execute(f"{verb} INTO copy_window (id, opened_at) VALUES (1, ?)", (now,))
            return float(conn.execute("SELECT opened_at FROM copy_window").fetchone()[0])

        return await self._run("open_copy_window", open_, transaction=True)

    # --- lifecycle ------------------------------------------------------------------------
    async def purge_expired(self) -> int:
        """Delete every expired non-token row now; returns how many. TTL writes also purge, at most
        once every `_PURGE_INTERVAL` seconds."""
        now = self._clock()
        self._purged_at = now
        return await self._run("purge_expired", lambda conn: _purge(conn, now), transaction=True)

    async def ping(self) -> None:
        await self._run("ping", lambda conn: conn.execute("SELECT 1").fetchone())

    async def close(self) -> None:
        # The read connection is used on the event loop: close it here, so no read is in flight.
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(sqlite3.Error):
                reader.close()
        await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            reader, self._reader = self._reader, None
        for each in (conn, reader):
            if each is not None:
                with contextlib.suppress(sqlite3.Error):
                    each.close()

    def trace(self, callback: Callable[[str], object] | None) -> None:
        """Every statement either connection runs goes to `callback` (benchmarks and the tests
        that count statements); None stops it."""
        for each in (self._conn, self._reader):
            if each is not None:
                each.set_trace_callback(callback)

    # --- helpers --------------------------------------------------------------------------
    def _connection_row(self, connection: Connection) -> dict[str, Any]:
        """The `connections` row of `connection`, its token set sealed, as named parameters."""
        return dict(zip(_ROW_COLUMNS, codec.connection_values(self._keyring, connection), strict=True))

    async def _select_connections(
        self, op: str, user: UserRef, where_tail: str, args: Sequence[str]
    ) -> list[Any]:
        sql = f"SELECT {_CONNECTION_COLUMNS} FROM connections WHERE iss = ? AND sub = ? {where_tail}"  # noqa: S608 - constant fragments only
        return await self._read(op, sql, (user.iss, user.sub, *args))

    async def _run_ttl_write(self, op: str, fn: Callable[[sqlite3.Connection], _T], now: float) -> _T:
        """Run a write of a record with a TTL; when a purge is due, purge in the same transaction."""
        if now - self._purged_at < _PURGE_INTERVAL:
            return await self._run(op, fn)
        self._purged_at = now

        def write_and_purge(conn: sqlite3.Connection) -> _T:
            result = fn(conn)
            _purge(conn, now)
            return result

        return await self._run(op, write_and_purge, transaction=True)

    async def _read(self, op: str, sql: str, params: Sequence[Any]) -> list[Any]:
        """All the rows of one read statement, run right here on the event loop.

        Why not the worker thread: the hop there and back cost more CPU (~150 µs: a lock, two
        thread wake-ups) than the indexed read itself (~20 µs), on every token-backed tool call.
        Why it cannot stall the loop: in WAL mode a reader never waits for the writer (it reads
        the last committed snapshot), and the read connection has no busy timeout; in the rare
        case SQLite still answers "busy" (WAL recovery, a checkpoint by another process) the read
        is retried on the worker thread, which may wait. Every row is fetched before returning: a
        statement left half-read would keep its snapshot open, and later reads would see the past.
        """

        def fetch(conn: sqlite3.Connection) -> list[Any]:
            return conn.execute(sql, params).fetchall()

        reader = self._reader
        if reader is None:
            return await self._run(op, fetch)
        try:
            return fetch(reader)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return await self._run(op, fetch)
            raise StoreUnavailable(f"sqlite store: {op} failed ({_error_name(exc)})") from exc
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite store: {op} failed ({_error_name(exc)})") from exc

    async def _run(self, op: str, fn: Callable[[sqlite3.Connection], _T], *, transaction: bool = False) -> _T:
        """Run `fn` on the connection in a worker thread. `transaction`: `fn` runs several
        statements that must apply together (or reads that must see one snapshot); without it,
        `fn` must run a single statement, atomic on its own."""
        return await anyio.to_thread.run_sync(self._run_sync, op, fn, transaction)

    def _run_sync(self, op: str, fn: Callable[[sqlite3.Connection], _T], transaction: bool) -> _T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreUnavailable(f"sqlite store: {op} after close")
            try:
                if not transaction:
                    return fn(conn)
                # IMMEDIATE takes the write lock up front, so read-then-write steps cannot interleave
                # with another process using the same file.
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:  # also after a failed COMMIT, which leaves it open
                        conn.rollback()
                    raise
                return result
            except sqlite3.Error as exc:
                # The error name is enough to diagnose; record data never goes into the message.
                raise StoreUnavailable(f"sqlite store: {op} failed ({_error_name(exc)})") from exc


def _connect(path: Path) -> sqlite3.Connection:
    if sqlite3.sqlite_version_info < _MIN_SQLITE:
        raise StoreUnavailable(f"sqlite >= 3.35 is required (found {sqlite3.sqlite_version})")
    try:
        _create_private(path)
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise StoreUnavailable(f"sqlite store: cannot open database ({type(exc).__name__})") from exc
    try:
        _configure(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreUnavailable(f"sqlite store: cannot open database ({_error_name(exc)})") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_reader(path: Path) -> sqlite3.Connection:
    """A second connection to the file `_connect` opened and migrated, for `SQLiteStore._read`:
    read-only (`query_only`), no busy timeout (busy means: take the worker thread instead)."""
    try:
        # mode=rw: the file `_connect` created (0600) or nothing; this never creates one.
        reader = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=rw", uri=True, check_same_thread=False, isolation_level=None
        )
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"sqlite store: cannot open database ({_error_name(exc)})") from exc
    try:
        reader.execute("PRAGMA busy_timeout = 0")
        reader.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        reader.close()
        raise StoreUnavailable(f"sqlite store: cannot open database ({_error_name(exc)})") from exc
    return reader


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA busy_timeout = 5000")  # another process on the same file: wait, then fail
    (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if str(mode).lower() != "wal":
        raise StoreUnavailable(f"sqlite store: WAL journal mode unavailable (got {mode})")
    conn.execute("PRAGMA synchronous = FULL")  # a stored token survives power loss, not just a crash
    conn.execute("PRAGMA secure_delete = ON")  # taken states and replaced blobs leave no residue
    _check_version(conn)
    _migrate(conn)
    conn.execute("SELECT json_set('{}', '$.s', 'x')")  # transition_elicitation needs JSON1


def _check_version(conn: sqlite3.Connection) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > _SCHEMA_VERSION:
        raise StoreUnavailable(f"database schema version {version} is newer than this code supports")


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the database to `_SCHEMA_VERSION` in one transaction: create what is missing (all of
    it for a new file), add the columns later versions introduced, then record the version.

    IMMEDIATE: another process opening the same file at the same time waits, then finds the work
    done. Every step is idempotent, so running it on a current database changes nothing.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        _check_version(conn)  # again, under the write lock: a newer process may have migrated meanwhile
        for statement in _SCHEMA:
            conn.execute(statement)
        for table, column, declaration in _ADDED_COLUMNS:
            if column not in _columns(conn, table):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        for statement in _ADDED_INDEXES:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _create_private(path: Path) -> None:
    """Create the parent dir (0700) and the db file (0600) before SQLite touches them.

    SQLite would create the file with 0644; its -wal and -shm files copy the db file's mode.
    """
    # Only a directory created here is made private: an existing one may be shared on purpose.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)  # also tightens a file created earlier with a looser mode


def _purge(conn: sqlite3.Connection, now: float) -> int:
    # Every non-token row carries a TTL (docs/threat-model.md, "Every non-token key has a TTL");
    # reads ignore expired rows anyway, so the purge only bounds how long they linger.
    return sum(
        conn.execute(f"DELETE FROM {table} WHERE expires_at <= ?", (now,)).rowcount  # noqa: S608
        for table in _TTL_TABLES
    )


_REENCRYPT_PAGE = 256
# Compare-and-set: the blob read earlier must still be there.
_CAS_CONNECTION = (
    "UPDATE connections SET blob = ? WHERE iss = ? AND sub = ? AND provider = ? AND account = ? AND blob = ?"
)
_CAS_STATE = "UPDATE oauth_states SET blob = ? WHERE key = ? AND blob = ?"


def _find_connections_sql(provider: str | None, sub: str | None, iss: str | None) -> tuple[str, list[str]]:
    """The `find_connections` statement: each filter given is one equality."""
    filters = [(c, v) for c, v in (("provider", provider), ("sub", sub), ("iss", iss)) if v is not None]
    where = " AND ".join(f"{column} = ?" for column, _ in filters) or "1"
    sql = (
        f"SELECT {', '.join(_ROW_COLUMNS)} FROM connections WHERE {where} "  # noqa: S608 - constant fragments only
        "ORDER BY iss, sub, provider, account"
    )
    return sql, [value for _, value in filters]


def _stale_connections(conn: sqlite3.Connection, *, fresh: bytes, after: int) -> list[Any]:
    """The next page (by rowid) of connections whose blob is not sealed under the primary key."""
    return conn.execute(
        "SELECT rowid, iss, sub, provider, account, blob FROM connections "
        "WHERE rowid > ? AND substr(blob, 1, ?) != ? ORDER BY rowid LIMIT ?",
        (after, len(fresh), fresh, _REENCRYPT_PAGE),
    ).fetchall()


def _stale_states(conn: sqlite3.Connection, *, fresh: bytes, now: float) -> list[Any]:
    return conn.execute(
        "SELECT key, blob FROM oauth_states WHERE expires_at > ? AND substr(blob, 1, ?) != ?",
        (now, len(fresh), fresh),
    ).fetchall()


def _update_each(sql: str, rows: Sequence[tuple[object, ...]], conn: sqlite3.Connection) -> int:
    return sum(_changes(sql, row, conn) for row in rows)


def _fetch(sql: str, args: Sequence[object] | Mapping[str, object], conn: sqlite3.Connection) -> list[Any]:
    return conn.execute(sql, args).fetchall()


def _changes(sql: str, args: Sequence[object] | Mapping[str, object], conn: sqlite3.Connection) -> int:
    """Run one statement; how many rows it inserted, updated or deleted."""
    return conn.execute(sql, args).rowcount


# One connection row, as named parameters (`SQLiteStore._connection_row`); the key is the PRIMARY KEY.
_ROW_KEY = codec.CONNECTION_KEY
_ROW_COLUMNS = codec.CONNECTION_COLUMNS
_INSERT_ROW = (
    f"INTO connections ({', '.join(_ROW_COLUMNS)}) VALUES ({', '.join(':' + c for c in _ROW_COLUMNS)})"
)
_PUT_CONNECTION = f"INSERT OR REPLACE {_INSERT_ROW}"
# `_PUT_CONNECTION`, except that a stored row keeps its `connected_at` (the contract of
# `Store.complete_elicitation`): every other column is overwritten, in place, in one statement.
_UPSERT_CONNECTION = f"INSERT {_INSERT_ROW} ON CONFLICT ({', '.join(_ROW_KEY)}) DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in _ROW_COLUMNS if c not in (*_ROW_KEY, "connected_at")
)
# Compare-and-set (`replace_connection`): only the version that was read (`:expected`) is replaced.
_REPLACE_CONNECTION = (
    "UPDATE connections SET "  # noqa: S608 - constant fragments only
    + ", ".join(f"{c} = :{c}" for c in _ROW_COLUMNS if c not in _ROW_KEY)
    + " WHERE "
    + " AND ".join(f"{c} = :{c}" for c in _ROW_KEY)
    + " AND updated_at = :expected"
)
_WEBHOOK_COLUMNS = ", ".join(codec.WEBHOOK_COLUMNS)
_ENQUEUE_WEBHOOK = (
    f"INSERT OR IGNORE INTO webhook_outbox ({_WEBHOOK_COLUMNS}) "  # noqa: S608 - constant
    f"VALUES ({', '.join('?' for _ in codec.WEBHOOK_COLUMNS)})"
)
# `_CONNECTION_COLUMNS` of the `c` in a join.
_JOINED_CONNECTION_COLUMNS = ", ".join(f"c.{c}" for c in codec.CONNECTION_READ_COLUMNS)


_KEY_WHERE = " AND ".join(f"{c} = ?" for c in _ROW_KEY)
_DELETE_CONNECTION = f"DELETE FROM connections WHERE {_KEY_WHERE}"  # noqa: S608 - constant
_SELECT_CONNECTION = f"SELECT {', '.join(_ROW_COLUMNS)} FROM connections WHERE {_KEY_WHERE}"  # noqa: S608
_SELECT_DELETION = f"SELECT deleted_at FROM deleted_connections WHERE {_KEY_WHERE} AND expires_at > ?"  # noqa: S608
_SEALED_PAGE = (
    f"SELECT rowid, {', '.join(_ROW_COLUMNS)} FROM connections "  # noqa: S608 - constant
    "WHERE rowid > ? ORDER BY rowid LIMIT ?"
)
# A later deletion of the same key replaces the earlier one.
_REMEMBER_DELETION = (
    f"INSERT OR REPLACE INTO deleted_connections ({', '.join(codec.DELETION_COLUMNS)}) "  # noqa: S608
    f"VALUES ({', '.join('?' for _ in codec.DELETION_COLUMNS)})"
)


def _remember_deletion(conn: sqlite3.Connection, deletion: Deletion) -> None:
    conn.execute(_REMEMBER_DELETION, codec.deletion_values(deletion))


def _put_connection(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    conn.execute(_PUT_CONNECTION, row)


def _upsert_connection(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    conn.execute(_UPSERT_CONNECTION, row)


def _insert_state(conn: sqlite3.Connection, key: str, blob: bytes, expires_at: float) -> None:
    # A plain INSERT: a stored state is never replaced, only taken once (or left to expire).
    conn.execute("INSERT INTO oauth_states VALUES (?, ?, ?)", (key, blob, expires_at))


def _transition(
    elicitation_id: str,
    expected: ElicitationStatus,
    new: ElicitationStatus,
    now: float,
    conn: sqlite3.Connection,
) -> PendingElicitation | None:
    # One compare-and-set statement: the status guard makes each transition happen once.
    rows = conn.execute(
        "UPDATE elicitations SET status = :new, record = json_set(record, '$.status', :new) "
        # mutant: sqlite.transition_cas " AND status = :expected" -> ""
        "WHERE id = :id AND status = :expected AND expires_at > :now RETURNING record",
        {"new": new.value, "id": elicitation_id, "expected": expected.value, "now": now},
    ).fetchall()
    return codec.elicitation_of_rows(rows)


def _error_name(exc: sqlite3.Error) -> str:
    return getattr(exc, "sqlite_errorname", None) or type(exc).__name__
