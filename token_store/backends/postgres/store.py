"""The shared backend on PostgreSQL alone: several replicas, one database (docs/postgres.md).

asyncpg's pool (the driver measured fastest on the hot read: docs/postgres.md, "Driver"). Token
sets and OAuth states are sealed (token_store.codec) before they reach SQL; one-time values and
lock names are stored as their SHA-256. The schema is versioned (token_store.backends.postgres.migrations)
and brought up to date when the store opens.

Every step is one statement where it can be (data-modifying CTEs for the two-record steps), so
it is atomic without an explicit transaction and costs one round trip. The live-elicitation limit
is a count then an insert, which READ COMMITTED would let two writers pass together: that step
serializes per user on a transaction-scoped advisory lock.

Expiry needs no job outside the server: expired non-token rows are invisible to every read, and
TTL writes purge them at most once every `_PURGE_INTERVAL` seconds. Every TTL is judged by the
store's clock (`clock=`), as in SQLite, except a lock's: locks expire by the database server's
clock, the one clock every replica shares (as Redis locks do by the Redis server's).
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import asyncpg

from token_store import codec
from token_store.backends.postgres.migrations import SCHEMA_VERSION, SchemaBehind, migrate, stored_version
from token_store.base import StoreUnavailable, TooManyPending
from token_store.crypto import KeyRing
from token_store.models import (
    DELETIONS_KEPT,
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

SCHEMES = ("postgresql", "postgres")
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")  # libpq's
_PURGE_INTERVAL = 10.0  # seconds of the store's clock between purges of expired rows
_CONNECT_TIMEOUT = 5.0
_COMMAND_TIMEOUT = 10.0  # a statement the server does not answer fails as StoreUnavailable
_POOL_MIN, _POOL_MAX = 1, 10
_LIVE = sorted(s.value for s in LIVE_STATUSES)
_REENCRYPT_PAGE = 256

# One connection row, in this order everywhere (the key first, then the rest).
_ROW_KEY = codec.CONNECTION_KEY
_ROW_COLUMNS = codec.CONNECTION_COLUMNS
_READ_COLUMNS = ", ".join(codec.CONNECTION_READ_COLUMNS)  # what `codec.open_connection_rows` takes
_JOINED_READ_COLUMNS = ", ".join(f"c.{c}" for c in codec.CONNECTION_READ_COLUMNS)  # of the `c` in a join
_VALUES = ", ".join(f"${i}" for i in range(1, len(_ROW_COLUMNS) + 1))
_INSERT_ROW = (
    f"INSERT INTO connections ({', '.join(_ROW_COLUMNS)}) VALUES ({_VALUES}) "  # noqa: S608 - constant
    f"ON CONFLICT ({', '.join(_ROW_KEY)}) DO UPDATE SET "
)
_PUT_CONNECTION = _INSERT_ROW + ", ".join(f"{c} = excluded.{c}" for c in _ROW_COLUMNS[4:])
# `_PUT_CONNECTION`, except that a stored row keeps its `connected_at` (the contract of
# `Store.complete_elicitation`).
_UPSERT_CONNECTION = _INSERT_ROW + ", ".join(
    f"{c} = excluded.{c}" for c in _ROW_COLUMNS[4:] if c != "connected_at"
)

_KEY_WHERE = " AND ".join(f"{c} = ${i}" for i, c in enumerate(_ROW_KEY, 1))
_SELECT_CONNECTION = f"SELECT {', '.join(_ROW_COLUMNS)} FROM connections WHERE {_KEY_WHERE}"  # noqa: S608
_SELECT_DELETION = f"SELECT deleted_at, expires_at FROM deleted_connections WHERE {_KEY_WHERE}"  # noqa: S608
_INSERT_CONNECTION = f"INSERT INTO connections ({', '.join(_ROW_COLUMNS)}) VALUES ({_VALUES})"  # noqa: S608
_DELETION_VALUES = ", ".join(f"${i}" for i in range(1, len(codec.DELETION_COLUMNS) + 1))
_INSERT_DELETION = (
    f"INSERT INTO deleted_connections ({', '.join(codec.DELETION_COLUMNS)}) VALUES ({_DELETION_VALUES})"  # noqa: S608
)
_REPLACE_DELETION = f"UPDATE deleted_connections SET deleted_at = $5, expires_at = $6 WHERE {_KEY_WHERE}"  # noqa: S608


def _remember_gone(now: str, kept: str) -> str:
    """An INSERT remembering each connection the `gone` of a data-modifying WITH deleted, as deleted
    at the parameter `now`, for `kept` seconds (a later deletion replaces an earlier one)."""
    return (
        f"INSERT INTO deleted_connections ({', '.join(codec.DELETION_COLUMNS)}) "  # noqa: S608 - constant
        f"SELECT iss, sub, provider, account, {now}::double precision, "
        # mutant: postgres.remember_deletion "FROM gone " -> "FROM gone WHERE false "
        f"{now}::double precision + {kept}::double precision FROM gone "
        f"ON CONFLICT ({', '.join(_ROW_KEY)}) DO UPDATE SET deleted_at = excluded.deleted_at, "
        "expires_at = excluded.expires_at"
    )


_COPY_PAGE = 256
_COPY_ATTEMPTS = 5  # of a copy step that met a row inserted since it read (change_connection)
_WEBHOOK_COLUMNS = ", ".join(codec.WEBHOOK_COLUMNS)
_ENQUEUE_WEBHOOK = (
    f"INSERT INTO webhook_outbox ({_WEBHOOK_COLUMNS}) "  # noqa: S608 - constant
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(codec.WEBHOOK_COLUMNS) + 1))}) "
    "ON CONFLICT (id) DO NOTHING"
)


def _transition_sql(first: int) -> str:
    """Compare-and-set of an elicitation's status (the record's JSON carries it too), its
    parameters numbered from `first`: new status, id, expected status, now."""
    new, eid, expected, now = (f"${first + i}" for i in range(4))
    return (
        f"UPDATE elicitations SET status = {new}, "  # noqa: S608 - numbered parameters only
        f"record = jsonb_set(record, '{{status}}', to_jsonb({new}::text)) "
        # mutant: postgres.transition_cas "status = {expected}" -> "{expected}::text IS NOT NULL"
        f"WHERE id = {eid} AND status = {expected} AND expires_at > {now} RETURNING record::text"
    )


_TRANSITION = _transition_sql(1)
# The database server's clock, in the store's unit: locks expire by it (see the module docstring).
_DB_NOW = "extract(epoch from clock_timestamp())::double precision"
# Each table with a TTL, and the clock its expiry is judged by ($1: the store's).
_TTL_TABLES = (
    ("elicitations", "$1"),
    ("oauth_states", "$1"),
    ("nonces", "$1"),
    ("locks", _DB_NOW),
    ("deleted_connections", "$1"),
    ("callback_outcomes", "$1"),
)
# Every non-token row carries a TTL (docs/threat-model.md, "Every non-token key has a TTL"); reads
# ignore expired rows anyway, so the purge only bounds how long they linger. One statement.
_PURGE = "WITH {} SELECT {}".format(
    ", ".join(
        f"d{i} AS (DELETE FROM {table} WHERE expires_at <= {now} RETURNING 1)"  # noqa: S608 - constant
        for i, (table, now) in enumerate(_TTL_TABLES)
    ),
    " + ".join(f"(SELECT count(*) FROM d{i})" for i in range(len(_TTL_TABLES))),  # noqa: S608
)


def _user_key(user: UserRef) -> str:
    """What the live-elicitation limit serializes on: the user (an advisory lock's key)."""
    return f"{user.iss}\n{user.sub}"


# The pooled connection was closed under the statement; the pool replaces it on the next acquire.
_CONNECTION_LOST = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, ConnectionError)


def check_url(url: str) -> None:
    """ValueError, naming no part of `url`, for a setting asyncpg would refuse only when it
    connects (and a replica would then retry for ever): an `sslmode` libpq does not know."""
    for mode in parse_qs(urlsplit(url).query).get("sslmode", []):
        if mode not in SSLMODES:
            raise ValueError(f"sslmode must be one of {', '.join(SSLMODES)}")


class PostgresStore:
    """`Store` over PostgreSQL. Create it with `await PostgresStore.open(url, keyring)`."""

    def __init__(self, pool: Any, keyring: KeyRing, clock: Callable[[], float]) -> None:
        self._pool: Any | None = pool
        self._keyring = keyring
        self._clock = clock
        self._purged_at = -math.inf  # store-clock time of the last purge

    @classmethod
    async def open(
        cls, url: str, keyring: KeyRing, *, clock: Callable[[], float] = time.time
    ) -> PostgresStore:
        """Connect to the database `url` names (`postgresql://` or `postgres://`, libpq's URL with
        its `sslmode`), bring its schema up to date, and purge what expired while it was down."""
        try:
            pool = await asyncpg.create_pool(
                url,
                min_size=_POOL_MIN,
                max_size=_POOL_MAX,
                timeout=_CONNECT_TIMEOUT,
                command_timeout=_COMMAND_TIMEOUT,
            )
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            # The class only: asyncpg's messages may quote the URL's user or database.
            raise StoreUnavailable(f"postgres store: cannot connect ({type(exc).__name__})") from exc
        store = cls(pool, keyring, clock)
        try:
            await store._migrate()
            await store.purge_expired()
        except BaseException:
            await store.close()
            raise
        return store

    async def _migrate(self) -> None:
        async def run(conn: Any) -> int:
            try:
                return await migrate(conn)
            except asyncpg.InsufficientPrivilegeError:
                raise SchemaBehind(
                    f"postgres store: database schema version {await stored_version(conn)}, this "
                    f"code needs {SCHEMA_VERSION}, and this role may not upgrade it: run "
                    "`mcp-url-connect store migrate` as the schema's owner (docs/postgres.md)"
                ) from None

        applied = await self._with_conn("migrate", run)
        if applied:
            _log.info("postgres store: schema migrated to version %d", SCHEMA_VERSION)

    # --- connections (tokens) -------------------------------------------------------------
    async def put_connection(self, connection: Connection) -> None:
        await self._execute("put_connection", _PUT_CONNECTION, *self._connection_row(connection))

    async def get_connection(
        self, user: UserRef, provider: str, account: str | None = None
    ) -> Connection | None:
        if account is None:
            tail, args = "AND provider = $3 ORDER BY updated_at DESC, account", [provider]
        else:
            tail, args = "AND provider = $3 AND account = $4", [provider, account]
        rows = await self._select_connections("get_connection", user, tail, args)
        found = codec.open_connection_rows(self._keyring, user, rows)
        return found[0] if found else None

    async def list_connections(self, user: UserRef, provider: str | None = None) -> list[Connection]:
        if provider is None:
            tail, args = "ORDER BY provider, account", []
        else:
            tail, args = "AND provider = $3 ORDER BY account", [provider]
        rows = await self._select_connections("list_connections", user, tail, args)
        return codec.open_connection_rows(self._keyring, user, rows)

    async def delete_connection(self, key: ConnectionKey) -> bool:
        # One statement: the deletion is remembered with it (token_store/store_copy.py).
        rows = await self._fetch(
            "delete_connection",
            f"WITH gone AS (DELETE FROM connections WHERE {_KEY_WHERE} "  # noqa: S608 - constant
            f"RETURNING iss, sub, provider, account), remembered AS ({_remember_gone('$5', '$6')}) "
            "SELECT 1 FROM gone",
            *codec.key_values(key),
            self._clock(),
            DELETIONS_KEPT,
        )
        return bool(rows)

    async def delete_connections(self, user: UserRef, provider: str) -> list[Connection]:
        rows = await self._fetch(
            "delete_connections",
            "WITH gone AS (DELETE FROM connections WHERE iss = $1 AND sub = $2 AND provider = $3 "  # noqa: S608 - constant
            f"RETURNING iss, sub, {_READ_COLUMNS}), remembered AS ({_remember_gone('$4', '$5')}) "
            f"SELECT {_READ_COLUMNS} FROM gone",
            user.iss,
            user.sub,
            provider,
            self._clock(),
            DELETIONS_KEPT,
        )
        rows.sort(key=lambda r: r[1])  # RETURNING order is unspecified
        return codec.open_connection_rows(self._keyring, user, rows)

    async def replace_connection(self, connection: Connection, expected_updated_at: float) -> bool:
        # One compare-and-set statement: only the version that was read is replaced.
        sets = ", ".join(f"{c} = ${i}" for i, c in enumerate(_ROW_COLUMNS, 1) if c not in _ROW_KEY)
        rows = await self._fetch(
            "replace_connection",
            f"UPDATE connections SET {sets} WHERE iss = $1 AND sub = $2 AND provider = $3 "  # noqa: S608
            f"AND account = $4 AND updated_at = ${len(_ROW_COLUMNS) + 1} RETURNING 1",
            *self._connection_row(connection),
            expected_updated_at,
        )
        return bool(rows)

    async def set_connection_status(self, key: ConnectionKey, status: ConnectionStatus) -> bool:
        rows = await self._fetch(
            "set_connection_status",
            "UPDATE connections SET status = $1 WHERE iss = $2 AND sub = $3 AND provider = $4 "
            "AND account = $5 RETURNING 1",
            ConnectionStatus(status).value,
            key.user.iss,
            key.user.sub,
            key.provider,
            key.account,
        )
        return bool(rows)

    async def find_connections(
        self, provider: str | None = None, sub: str | None = None, iss: str | None = None
    ) -> list[Connection]:
        filters = [(c, v) for c, v in (("provider", provider), ("sub", sub), ("iss", iss)) if v is not None]
        where = " AND ".join(f"{column} = ${n}" for n, (column, _) in enumerate(filters, 1)) or "true"
        rows = await self._read(
            "find_connections",
            f"SELECT iss, sub, {_READ_COLUMNS} FROM connections WHERE {where} "  # noqa: S608 - constant fragments only
            "ORDER BY iss, sub, provider, account",
            *(value for _, value in filters),
        )
        return codec.open_any_connection_rows(self._keyring, rows)

    # --- remembered choices ---------------------------------------------------------------
    async def get_default_account(self, user: UserRef, provider: str) -> str | None:
        rows = await self._read(
            "get_default_account",
            "SELECT account FROM default_accounts WHERE iss = $1 AND sub = $2 AND provider = $3",
            user.iss,
            user.sub,
            provider,
        )
        return str(rows[0][0]) if rows else None

    async def set_default_account(self, user: UserRef, provider: str, account: str | None) -> None:
        if account is None:
            await self._execute(
                "set_default_account",
                "DELETE FROM default_accounts WHERE iss = $1 AND sub = $2 AND provider = $3",
                user.iss,
                user.sub,
                provider,
            )
            return
        await self._execute(
            "set_default_account",
            "INSERT INTO default_accounts (iss, sub, provider, account) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (iss, sub, provider) DO UPDATE SET account = excluded.account",
            user.iss,
            user.sub,
            provider,
            account,
        )

    # --- locks ----------------------------------------------------------------------------
    async def acquire_lock(self, name: str, ttl_seconds: float) -> str | None:
        codec.check_lock_ttl(ttl_seconds)
        owner = secrets.token_urlsafe(24)
        # One statement: insert, or take over a lock whose holder's time is up; a live lock is
        # left alone (the DO UPDATE guard fails, no row is returned).
        rows = await self._fetch(
            "acquire_lock",
            f"INSERT INTO locks (name_hash, owner, expires_at) VALUES ($1, $2, {_DB_NOW} + $3) "  # noqa: S608
            "ON CONFLICT (name_hash) DO UPDATE SET owner = excluded.owner, "
            f"expires_at = excluded.expires_at WHERE locks.expires_at <= {_DB_NOW} RETURNING owner",
            codec.lookup_key(name),
            owner,
            ttl_seconds,
        )
        return owner if rows else None

    async def release_lock(self, name: str, owner: str) -> bool:
        # Compare-and-delete: another owner's lock is never touched. Our own expired row goes
        # too, but does not count as released: the lock was no longer ours.
        rows = await self._fetch(
            "release_lock",
            # mutant: postgres.release_lock_owner "owner = $2" -> "$2::text IS NOT NULL"
            f"DELETE FROM locks WHERE name_hash = $1 AND owner = $2 RETURNING expires_at > {_DB_NOW}",  # noqa: S608
            codec.lookup_key(name),
            owner,
        )
        return bool(rows) and bool(rows[0][0])

    async def lock_held(self, name: str) -> bool:
        rows = await self._read(
            "lock_held",
            f"SELECT 1 FROM locks WHERE name_hash = $1 AND expires_at > {_DB_NOW}",  # noqa: S608
            codec.lookup_key(name),
        )
        return bool(rows)

    # --- pending elicitations -------------------------------------------------------------
    async def create_elicitation(self, elicitation: PendingElicitation, max_live_per_user: int) -> None:
        e = elicitation
        now = self._clock()

        async def create(conn: Any) -> bool:
            # Count then insert: serialized per user, or two creates could both take the last slot.
            async with conn.transaction():
                # mutant: postgres.pending_limit_per_user
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", _user_key(e.user))
                stored = await conn.fetch(
                    "INSERT INTO elicitations (id, iss, sub, provider, status, expires_at, record) "
                    "SELECT $1, $2, $3, $4, $5, $6, $7::jsonb "
                    "WHERE (SELECT count(*) FROM elicitations WHERE iss = $2 AND sub = $3 "
                    # mutant: postgres.pending_limit ") < $10" -> ") >= 0 AND $10::bigint IS NOT NULL"
                    "AND status = ANY($8::text[]) AND expires_at > $9) < $10 RETURNING 1",
                    e.id,
                    e.user.iss,
                    e.user.sub,
                    e.provider,
                    e.status.value,
                    e.expires_at,
                    e.to_json(),
                    _LIVE,
                    now,
                    max_live_per_user,
                )
                return bool(stored)

        created = await self._with_conn("create_elicitation", create)
        await self._purge_if_due(now)
        if not created:
            raise TooManyPending(f"the user already has {max_live_per_user} live pending elicitations")

    async def get_elicitation(self, elicitation_id: str) -> PendingElicitation | None:
        rows = await self._read(
            "get_elicitation",
            "SELECT record::text FROM elicitations WHERE id = $1 AND expires_at > $2",
            elicitation_id,
            self._clock(),
        )
        return codec.elicitation_of_rows(rows)

    async def live_elicitations(self, user: UserRef) -> list[PendingElicitation]:
        rows = await self._read(
            "live_elicitations",
            "SELECT record::text FROM elicitations WHERE iss = $1 AND sub = $2 "
            "AND status = ANY($3::text[]) AND expires_at > $4 ORDER BY expires_at DESC",
            user.iss,
            user.sub,
            _LIVE,
            self._clock(),
        )
        return [PendingElicitation.from_json(row[0]) for row in rows]

    async def get_elicitation_with_connection(
        self, elicitation_id: str
    ) -> tuple[PendingElicitation, Connection | None] | None:
        # One statement: the elicitation, joined with each of its user's connections at its
        # provider (none: one row of NULLs), most recently updated first.
        rows = await self._read(
            "get_elicitation_with_connection",
            f"SELECT e.record::text, {_JOINED_READ_COLUMNS} FROM elicitations e LEFT JOIN connections c "  # noqa: S608 - constant
            "ON c.iss = e.iss AND c.sub = e.sub AND c.provider = e.provider "
            "WHERE e.id = $1 AND e.expires_at > $2 ORDER BY c.updated_at DESC, c.account",
            elicitation_id,
            self._clock(),
        )
        return codec.elicitation_with_connection_rows(self._keyring, rows)

    async def transition_elicitation(
        self, elicitation_id: str, expected: ElicitationStatus, new: ElicitationStatus
    ) -> PendingElicitation | None:
        require_transition(expected, new)
        rows = await self._fetch(
            "transition_elicitation", _TRANSITION, *self._transition_params(elicitation_id, expected, new)
        )
        return codec.elicitation_of_rows(rows)

    async def open_elicitation(self, state: OAuthState) -> PendingElicitation | None:
        key, blob = codec.seal_state(self._keyring, state)
        # One statement: the state is inserted only from the row the transition returned; a
        # state that exists fails the whole statement, transition included.
        rows = await self._fetch(
            "open_elicitation",
            f"WITH opened AS ({_TRANSITION}), stored AS (INSERT INTO oauth_states "  # noqa: S608 - constant
            # mutant: postgres.open_elicitation_single_use " FROM opened)" -> ")"
            "(key, blob, expires_at) SELECT $5, $6, $7 FROM opened) SELECT record FROM opened",
            *self._transition_params(state.elicitation.id, *Transition.OPEN.value),
            key,
            blob,
            state.expires_at,
        )
        return codec.elicitation_of_rows(rows)

    async def complete_elicitation(
        self, connection: Connection, elicitation_id: str
    ) -> PendingElicitation | None:
        # One statement: the token set is stored whatever the elicitation's status. The
        # transition's parameters follow the row's.
        rows = await self._fetch(
            "complete_elicitation",
            f"WITH stored AS ({_UPSERT_CONNECTION}) {_transition_sql(len(_ROW_COLUMNS) + 1)}",
            *self._connection_row(connection),
            *self._transition_params(elicitation_id, *Transition.COMPLETE.value),
        )
        return codec.elicitation_of_rows(rows)

    # --- one-time records -----------------------------------------------------------------
    async def put_oauth_state(self, state: OAuthState) -> None:
        key, blob = codec.seal_state(self._keyring, state)
        # A plain INSERT: a stored state is never replaced, only taken once (or left to expire).
        await self._execute(
            "put_oauth_state", "INSERT INTO oauth_states VALUES ($1, $2, $3)", key, blob, state.expires_at
        )
        await self._purge_if_due(self._clock())

    async def take_oauth_state(self, state: str) -> OAuthState | None:
        key = codec.lookup_key(state)
        now = self._clock()
        # Delete-and-return in one statement: of two concurrent takes, exactly one gets the row.
        # mutant: postgres.take_oauth_state peek
        rows = await self._fetch(
            "take_oauth_state", "DELETE FROM oauth_states WHERE key = $1 RETURNING blob, expires_at", key
        )
        if not rows or rows[0][1] <= now:
            return None
        return codec.open_state(self._keyring, key, rows[0][0])

    async def put_callback_outcome(self, state: str, outcome: CallbackOutcome) -> None:
        # DO NOTHING: the first outcome of a state stays.
        await self._execute(
            "put_callback_outcome",
            "INSERT INTO callback_outcomes (key, record, expires_at) VALUES ($1, $2, $3) "
            "ON CONFLICT (key) DO NOTHING",
            codec.lookup_key(state),
            outcome.to_json(),
            outcome.expires_at,
        )
        await self._purge_if_due(self._clock())

    async def get_callback_outcome(self, state: str) -> CallbackOutcome | None:
        rows = await self._fetch(
            "get_callback_outcome",
            "SELECT record FROM callback_outcomes WHERE key = $1 AND expires_at > $2",
            codec.lookup_key(state),
            self._clock(),
        )
        return CallbackOutcome.from_json(rows[0][0]) if rows else None

    async def put_nonce(self, nonce: str, ttl_seconds: float, slot: str | None = None) -> None:
        now = self._clock()
        key, expires_at = codec.lookup_key(nonce), now + ttl_seconds
        if slot is None:
            await self._execute(
                "put_nonce",
                "INSERT INTO nonces (key, expires_at) VALUES ($1, $2) "
                "ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at",
                key,
                expires_at,
            )
        else:
            # The slot's row takes the new nonce in place: of two concurrent puts, the later wins
            # and the earlier nonce is gone (a unique index on slot arbitrates).
            await self._execute(
                "put_nonce",
                "INSERT INTO nonces (key, expires_at, slot) VALUES ($1, $2, $3) "
                "ON CONFLICT (slot) DO UPDATE SET key = excluded.key, expires_at = excluded.expires_at",
                key,
                expires_at,
                # mutant: postgres.nonce_slot none
                codec.lookup_key(slot),
            )
        await self._purge_if_due(now)

    async def take_nonce(self, nonce: str) -> bool:
        now = self._clock()
        # mutant: postgres.take_nonce peek
        rows = await self._fetch(
            "take_nonce", "DELETE FROM nonces WHERE key = $1 RETURNING expires_at", codec.lookup_key(nonce)
        )
        return bool(rows) and rows[0][0] > now

    # --- key rotation ---------------------------------------------------------------------
    async def reencrypt_all(self) -> int:
        # A page at a time in key order; each row is then replaced only if it still holds the
        # blob that was read, so a concurrent write is never overwritten.
        fresh = self._keyring.primary_prefix
        rewritten = 0
        after: tuple[str, str, str, str] = ("", "", "", "")
        while True:
            page = await self._fetch(
                "reencrypt_all",
                "SELECT iss, sub, provider, account, blob FROM connections "
                "WHERE (iss, sub, provider, account) > ($1, $2, $3, $4) "
                "AND substring(blob from 1 for $5) <> $6 ORDER BY iss, sub, provider, account LIMIT $7",
                *after,
                len(fresh),
                fresh,
                _REENCRYPT_PAGE,
            )
            if not page:
                break
            after = tuple(page[-1])[:4]
            updates = codec.resealed_connection_rows(self._keyring, page)
            rewritten += await self._update_each(
                "UPDATE connections SET blob = $1 WHERE iss = $2 AND sub = $3 AND provider = $4 "
                "AND account = $5 AND blob = $6 RETURNING 1",
                updates,
            )

        states = await self._fetch(
            "reencrypt_all",
            "SELECT key, blob FROM oauth_states "
            "WHERE expires_at > $1 AND substring(blob from 1 for $2) <> $3",
            self._clock(),
            len(fresh),
            fresh,
        )
        state_updates = codec.resealed_state_rows(self._keyring, states)
        rewritten += await self._update_each(
            "UPDATE oauth_states SET blob = $1 WHERE key = $2 AND blob = $3 RETURNING 1", state_updates
        )
        return rewritten

    async def _update_each(self, sql: str, rows: Sequence[tuple[object, ...]]) -> int:
        async def update(conn: Any) -> int:
            async with conn.transaction():
                return sum([bool(await conn.fetch(sql, *row)) for row in rows])

        return await self._with_conn("reencrypt_all", update) if rows else 0

    async def count_sealed_under(self, kid: str) -> int:
        prefix = KeyRing.sealed_prefix(kid)
        rows = await self._read(
            "count_sealed_under",
            "SELECT (SELECT count(*) FROM connections WHERE substring(blob from 1 for $1) = $2) "
            "+ (SELECT count(*) FROM oauth_states "
            "WHERE expires_at > $3 AND substring(blob from 1 for $1) = $2)",
            len(prefix),
            prefix,
            self._clock(),
        )
        return int(rows[0][0])

    # --- client registrations -------------------------------------------------------------
    async def get_client_registration(self, issuer: str, redirect_uri: str) -> ClientRegistration | None:
        key = codec.client_registration_key(issuer, redirect_uri)
        rows = await self._read(
            "get_client_registration", "SELECT blob FROM client_registrations WHERE key = $1", key
        )
        return codec.open_client(self._keyring, key, bytes(rows[0][0])) if rows else None

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration:
        key, blob = codec.seal_client(self._keyring, registration)
        # One statement: insert unless present, then the row as it is (the first stored wins).
        rows = await self._fetch(
            "add_client_registration",
            "WITH added AS (INSERT INTO client_registrations (key, blob) VALUES ($1, $2) "
            "ON CONFLICT (key) DO NOTHING RETURNING blob) "
            "SELECT blob FROM added UNION ALL SELECT blob FROM client_registrations WHERE key = $1 "
            "AND NOT EXISTS (SELECT 1 FROM added)",
            key,
            blob,
        )
        stored = bytes(rows[0][0])
        if stored == blob:
            return registration
        opened = codec.open_client(self._keyring, key, stored)
        if opened is None:
            raise StoreUnavailable(
                "postgres store: add_client_registration found a record that does not open"
            )
        return opened

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        key = codec.client_registration_key(issuer, redirect_uri)
        rows = await self._read(
            "remove_client_registration", "SELECT blob FROM client_registrations WHERE key = $1", key
        )
        if not rows:
            return False
        blob = bytes(rows[0][0])
        stored = codec.open_client(self._keyring, key, blob)
        if stored is not None and stored.client_id != client_id:
            return False  # another client was stored meanwhile: it stays
        deleted = await self._fetch(
            "remove_client_registration",
            "DELETE FROM client_registrations WHERE key = $1 AND blob = $2 RETURNING 1",
            key,
            blob,
        )
        return bool(deleted)

    async def reencrypt_client_registrations(self) -> int:
        fresh = self._keyring.primary_prefix
        rows = await self._fetch(
            "reencrypt_client_registrations",
            "SELECT key, blob FROM client_registrations WHERE substring(blob from 1 for $1) <> $2",
            len(fresh),
            fresh,
        )
        updates = []
        for key, blob in rows:
            new = codec.reseal_client(self._keyring, key, bytes(blob))
            if new is not None:
                updates.append((new, key, blob))
        return await self._update_each(
            "UPDATE client_registrations SET blob = $1 WHERE key = $2 AND blob = $3 RETURNING 1", updates
        )

    async def client_registrations(self) -> AsyncIterator[ClientRegistration]:
        for key, blob in await self._read(
            "client_registrations", "SELECT key, blob FROM client_registrations"
        ):
            opened = codec.open_client(self._keyring, key, bytes(blob))
            if opened is not None:
                yield opened

    async def count_client_registrations_sealed_under(self, kid: str) -> int:
        prefix = KeyRing.sealed_prefix(kid)
        rows = await self._read(
            "count_client_registrations_sealed_under",
            "SELECT count(*) FROM client_registrations WHERE substring(blob from 1 for $1) = $2",
            len(prefix),
            prefix,
        )
        return int(rows[0][0])

    # --- webhook outbox --------------------------------------------------------------------
    async def enqueue_webhook(self, message: WebhookMessage) -> None:
        await self._execute(
            "enqueue_webhook",
            _ENQUEUE_WEBHOOK,
            *codec.webhook_values(message),
        )

    async def claim_webhooks(self, now: float, lease_seconds: float, limit: int) -> list[WebhookMessage]:
        # SKIP LOCKED: replicas claiming at once take different rows instead of waiting in line.
        rows = await self._fetch(
            "claim_webhooks",
            "UPDATE webhook_outbox SET next_attempt_at = $1 WHERE id IN (SELECT id FROM webhook_outbox "  # noqa: S608 - constant
            # mutant: postgres.claim_webhooks_due "next_attempt_at <= $2" -> "$2::float8 IS NOT NULL"
            "WHERE next_attempt_at <= $2 ORDER BY next_attempt_at, created_at LIMIT $3 "
            "FOR UPDATE SKIP LOCKED) "
            f"RETURNING {_WEBHOOK_COLUMNS}",
            now + lease_seconds,
            now,
            limit,
        )
        return codec.webhook_messages(rows)

    async def settle_webhook(self, claimed: WebhookMessage, retry_at: float | None) -> bool:
        # Only under the claimer's own lease: one claimed again after it ended is the new claimer's.
        # mutant: postgres.settle_webhook_own_lease "next_attempt_at = $2" -> "$2::float8 IS NOT NULL"
        own_lease = "WHERE id = $1 AND next_attempt_at = $2 RETURNING 1"
        lease = (claimed.id, claimed.next_attempt_at)
        if retry_at is None:
            sql = f"DELETE FROM webhook_outbox {own_lease}"  # noqa: S608 - numbered parameters only
            return bool(await self._fetch("settle_webhook", sql, *lease))
        sql = f"UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = $3 {own_lease}"  # noqa: S608
        return bool(await self._fetch("settle_webhook", sql, *lease, retry_at))

    # --- moving to another store (token_store/store_copy.py) ------------------------------
    async def sealed_connections(self) -> AsyncIterator[SealedConnection]:
        after: tuple[str, ...] = ("", "", "", "")
        while True:
            page = await self._read(
                "sealed_connections",
                f"SELECT {', '.join(_ROW_COLUMNS)} FROM connections "  # noqa: S608 - constant
                "WHERE (iss, sub, provider, account) > ($1, $2, $3, $4) "
                "ORDER BY iss, sub, provider, account LIMIT $5",
                *after,
                _COPY_PAGE,
            )
            if not page:
                return
            after = tuple(page[-1])[:4]
            for row in page:
                sealed = codec.sealed_of_row(tuple(row))
                if sealed is not None:
                    yield sealed

    async def deletions(self) -> AsyncIterator[Deletion]:
        rows = await self._read(
            "deletions",
            "SELECT iss, sub, provider, account, deleted_at FROM deleted_connections WHERE expires_at > $1",
            self._clock(),
        )
        for row in rows:
            yield codec.deletion_of_row(tuple(row))

    async def default_accounts(self) -> AsyncIterator[tuple[UserRef, str, str]]:
        rows = await self._read(
            "default_accounts", "SELECT iss, sub, provider, account FROM default_accounts"
        )
        for iss, sub, provider, account in rows:
            yield UserRef(iss, sub), provider, account

    async def change_connection(self, key: ConnectionKey, decide: Decision) -> Change:
        now = self._clock()

        async def change(conn: Any) -> Change:
            # Under READ COMMITTED: the row read FOR UPDATE cannot change until the commit; a row
            # inserted meanwhile where none was read (a connection, a deletion) makes the plain
            # INSERT below fail, and the whole step is tried again on what is there then.
            async with conn.transaction():
                row = await conn.fetchrow(f"{_SELECT_CONNECTION} FOR UPDATE", *codec.key_values(key))
                remembered = await conn.fetchrow(f"{_SELECT_DELETION} FOR UPDATE", *codec.key_values(key))
                held = None if row is None else codec.sealed_of_row(tuple(row))
                live = remembered is not None and remembered[1] > now
                made = decide(held, Deletion(key, remembered[0]) if live else None)
                if made.remove:
                    await conn.execute(f"DELETE FROM connections WHERE {_KEY_WHERE}", *codec.key_values(key))  # noqa: S608
                if made.put is not None:
                    sql = _INSERT_CONNECTION if row is None else _PUT_CONNECTION
                    await conn.execute(sql, *codec.sealed_values(made.put))
                if made.deletion is not None:
                    sql = _INSERT_DELETION if remembered is None else _REPLACE_DELETION
                    await conn.execute(sql, *codec.deletion_values(made.deletion))
                return made

        for attempt in range(_COPY_ATTEMPTS):
            try:
                return await self._with_conn("change_connection", change)
            except StoreUnavailable as exc:
                if attempt == _COPY_ATTEMPTS - 1 or not isinstance(
                    exc.__cause__, asyncpg.UniqueViolationError
                ):
                    raise
        raise AssertionError("unreachable")

    async def copy_default_account(self, user: UserRef, provider: str, account: str) -> None:
        await self._execute(
            "copy_default_account",
            "INSERT INTO default_accounts (iss, sub, provider, account) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (iss, sub, provider) DO NOTHING",
            user.iss,
            user.sub,
            provider,
            account,
        )

    async def open_copy_window(self, now: float, *, new: bool) -> float:
        conflict = "DO UPDATE SET opened_at = excluded.opened_at" if new else "DO NOTHING"
        rows = await self._fetch(
            "open_copy_window",
            "WITH opened AS (INSERT INTO copy_window (id, opened_at) VALUES (1, $1) "  # noqa: S608 - constant
            f"ON CONFLICT (id) {conflict} RETURNING opened_at) SELECT opened_at FROM opened UNION ALL "
            "SELECT opened_at FROM copy_window WHERE NOT EXISTS (SELECT 1 FROM opened)",
            now,
        )
        return float(rows[0][0])

    # --- lifecycle ------------------------------------------------------------------------
    async def purge_expired(self) -> int:
        """Delete every expired non-token row now; returns how many. TTL writes also purge, at most
        once every `_PURGE_INTERVAL` seconds."""
        now = self._clock()
        self._purged_at = now
        rows = await self._fetch("purge_expired", _PURGE, now)
        return int(rows[0][0])

    async def _purge_if_due(self, now: float) -> None:
        if now - self._purged_at >= _PURGE_INTERVAL:
            self._purged_at = now
            await self._fetch("purge_expired", _PURGE, now)

    async def ping(self) -> None:
        await self._read("ping", "SELECT 1")

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await pool.close()
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError):
                pool.terminate()

    # --- helpers --------------------------------------------------------------------------
    def _transition_params(
        self, elicitation_id: str, old: ElicitationStatus, new: ElicitationStatus
    ) -> tuple[str, str, str, float]:
        """The parameters of `_transition_sql`, in its order."""
        return new.value, elicitation_id, old.value, self._clock()

    def _connection_row(self, connection: Connection) -> tuple[Any, ...]:
        """The `connections` row of `connection` in `_ROW_COLUMNS` order, its token set sealed."""
        return codec.connection_values(self._keyring, connection)

    async def _select_connections(self, op: str, user: UserRef, tail: str, args: Sequence[str]) -> list[Any]:
        sql = f"SELECT {_READ_COLUMNS} FROM connections WHERE iss = $1 AND sub = $2 {tail}"  # noqa: S608 - constant fragments only
        return await self._read(op, sql, user.iss, user.sub, *args)

    async def _fetch(self, op: str, sql: str, *args: Any) -> list[Any]:
        return await self._call(op, lambda pool: pool.fetch(sql, *args))

    async def _read(self, op: str, sql: str, *args: Any) -> list[Any]:
        """`_fetch` of a read-only statement, sent again once when the pooled connection turns
        out to be gone (a restarted server, a failover): asyncpg replaces a closed connection only
        once it has noticed. A write is never sent twice: its first attempt may have committed."""
        try:
            return await self._fetch(op, sql, *args)
        except StoreUnavailable as exc:
            if not isinstance(exc.__cause__, _CONNECTION_LOST):
                raise
        return await self._fetch(op, sql, *args)

    async def _execute(self, op: str, sql: str, *args: Any) -> None:
        await self._call(op, lambda pool: pool.execute(sql, *args))

    async def _with_conn(self, op: str, fn: Callable[[Any], Awaitable[_T]]) -> _T:
        async def acquired(pool: Any) -> _T:
            async with pool.acquire() as conn:
                return await fn(conn)

        return await self._call(op, acquired)

    async def _call(self, op: str, fn: Callable[[Any], Awaitable[_T]]) -> _T:
        pool = self._pool
        if pool is None:
            raise StoreUnavailable(f"postgres store: {op} after close")
        try:
            return await fn(pool)
        except asyncpg.PostgresError as exc:
            # The SQLSTATE's name is enough to diagnose; asyncpg's message and detail may quote
            # a key or a value, so they never go into ours.
            raise StoreUnavailable(f"postgres store: {op} failed ({type(exc).__name__})") from exc
        except (asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"postgres store: {op} failed ({type(exc).__name__})") from exc
