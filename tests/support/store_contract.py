"""Shared helpers for the store tests (no tests here): record factories, a fake clock, one `Harness`
per backend (SQLite, Redis, Redis behind Sentinel, Redis Cluster, PostgreSQL), the Redis skip rule,
and a private redis-server for the fault tests.

A harness does what an attacker or an operator would do underneath a store (edit a stored blob,
move a record, reopen the store, read the raw bytes at rest, break the backend), so the contract
tests in test_store_contract.py can run unchanged against every backend.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import json
import secrets
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import asyncpg
import pytest
import redis
import redis.asyncio
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript

from tests.needs import (  # noqa: F401 - re-exported for the store tests
    REDIS_HOST,
    REDIS_PORT,
    REDIS_URL,
    ClusterGroup,
    RedisServer,
    SentinelGroup,
    free_port,
    glob_escape,
    redis_prefix,
    redis_server,
    require_redis,
    skip_or_fail_in_ci,
)
from tests.support.postgres import PostgresSchema
from token_store import (
    Connection,
    ConnectionKey,
    ElicitationStatus,
    KeyRing,
    OAuthState,
    PendingElicitation,
    SlotTags,
    Store,
    TokenSet,
    Transition,
    UserRef,
)
from token_store.backends.postgres.store import PostgresStore
from token_store.backends.redis.store import RedisStore
from token_store.backends.sqlite import SQLiteStore

# The key the contract suite's ids are minted and placed with: on Cluster the store needs it to
# find an id's slot; elsewhere a masked slot tag is as opaque as the random bits after it.
SLOT_TAGS = SlotTags(b"the contract suite's slot tag key")
ALICE = UserRef("https://as.example", "alice")
BOB = UserRef("https://as.example", "bob")
T0 = 1_700_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- records ----------------------------------------------------------------------------------


def make_connection(
    user: UserRef = ALICE, provider: str = "github", account: str = "1", *, updated_at: float = T0
) -> Connection:
    key = ConnectionKey(user, provider, account)
    return Connection(key, make_tokens(), f"{user.sub}@{provider}", connected_at=T0, updated_at=updated_at)


def make_tokens() -> TokenSet:
    return TokenSet(
        access_token=f"at-{secrets.token_hex(16)}",
        refresh_token=f"rt-{secrets.token_hex(16)}",
        expires_at=T0 + 3600,
        scopes=("repo", "read:user"),
    )


def make_elicitation(
    user: UserRef = ALICE, *, ttl: float = 600, provider: str = "github"
) -> PendingElicitation:
    return PendingElicitation(
        id=SLOT_TAGS.mint(user),  # as the service mints them on Cluster (`mint_opaque_id`)
        user=user,
        client_id="client-1",
        mcp_session_id="session-1",
        provider=provider,
        scopes=("repo",),
        created_at=T0,
        expires_at=T0 + ttl,
    )


# How an elicitation reaches each status from `pending`, by the status machine's transitions only.
_ROUTE: dict[ElicitationStatus, tuple[Transition, ...]] = {
    ElicitationStatus.PENDING: (),
    ElicitationStatus.OPENED: (Transition.OPEN,),
    ElicitationStatus.COMPLETE: (Transition.OPEN, Transition.COMPLETE),
    ElicitationStatus.FAILED: (Transition.DECLINE,),
}


async def reach(store: Store, elicitation: PendingElicitation, status: ElicitationStatus) -> None:
    """Move the stored `elicitation` (pending) to `status` the way the flow would."""
    for transition in _ROUTE[status]:
        assert await store.transition_elicitation(elicitation.id, *transition.value) is not None


def make_state(*, ttl: float = 600) -> OAuthState:
    return OAuthState(
        state=SLOT_TAGS.mint(ALICE),
        elicitation=make_elicitation(),
        browser_binding="b" * 64,
        code_verifier=f"cv-{secrets.token_urlsafe(48)}",
        redirect_uri="https://mcp.example/callback",
        token_endpoint="https://github.example/login/oauth/access_token",
        expected_issuer=None,
        created_at=T0,
        expires_at=T0 + ttl,
    )


def flip_ciphertext_byte(blob: bytes) -> bytes:
    header, _, body = blob.rpartition(b".")
    raw = bytearray(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
    raw[len(raw) // 2] ^= 0x01
    return header + b"." + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=")


def encoded_forms(secret: bytes) -> Iterator[bytes]:
    """`secret` as it would appear plain or inside any base64 / base64url text, at any alignment."""
    yield secret
    for offset in range(3):
        start = -(-offset * 8 // 6)  # first character not touched by the prefix
        end = (offset + len(secret)) * 8 // 6  # last character not touched by padding
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            yield encode(b"\0" * offset + secret)[start:end]


def state_digest(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def user_tag(user: UserRef) -> str:
    """The documented per-user key part, computed independently of the store's code."""
    return hashlib.sha256(json.dumps([user.iss, user.sub], separators=(",", ":")).encode()).hexdigest()[:32]


# --- harnesses --------------------------------------------------------------------------------


class Harness(Protocol):
    name: str
    clock: FakeClock
    short_lock_ttl: float  # a lock TTL `outlive_lock` can wait out quickly

    async def open(self, keyring: KeyRing) -> Store: ...
    async def outlive_lock(self, ttl: float) -> None: ...
    def read_blob(self, key: ConnectionKey) -> bytes: ...
    def write_blob(self, key: ConnectionKey, blob: bytes) -> None: ...
    def copy_connection(self, src: ConnectionKey, dst: ConnectionKey) -> None: ...
    def read_state_blob(self, state: str) -> bytes | None: ...
    def count_nonces(self) -> int: ...
    async def break_backend(self) -> None: ...
    def raw_bytes(self) -> bytes: ...


class SQLiteHarness:
    """Reaches under the store with a second, independent sqlite3 connection to the same file."""

    name = "sqlite"
    short_lock_ttl = 30.0  # on the fake clock

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = FakeClock()

    async def open(self, keyring: KeyRing) -> Store:
        return await SQLiteStore.open(self.path, keyring, clock=self.clock)

    async def outlive_lock(self, ttl: float) -> None:
        self.clock.advance(ttl)  # SQLite locks expire by the store's clock

    def sql(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def read_blob(self, key: ConnectionKey) -> bytes:
        rows = self.sql(
            "SELECT blob FROM connections WHERE iss = ? AND sub = ? AND provider = ? AND account = ?",
            (key.user.iss, key.user.sub, key.provider, key.account),
        )
        blob = rows[0][0]
        assert isinstance(blob, bytes)
        return blob

    def write_blob(self, key: ConnectionKey, blob: bytes) -> None:
        self.sql(
            "UPDATE connections SET blob = ? WHERE iss = ? AND sub = ? AND provider = ? AND account = ?",
            (blob, key.user.iss, key.user.sub, key.provider, key.account),
        )

    def copy_connection(self, src: ConnectionKey, dst: ConnectionKey) -> None:
        self.sql(
            "INSERT OR REPLACE INTO connections "
            "(iss, sub, provider, account, account_label, blob, connected_at, updated_at, "
            "status, refreshed_at) "
            "SELECT ?, ?, ?, ?, account_label, blob, connected_at, updated_at, status, refreshed_at "
            "FROM connections WHERE iss = ? AND sub = ? AND provider = ? AND account = ?",
            (*astuple(dst.user), dst.provider, dst.account, *astuple(src.user), src.provider, src.account),
        )

    def read_state_blob(self, state: str) -> bytes | None:
        rows = self.sql("SELECT blob FROM oauth_states WHERE key = ?", (state_digest(state),))
        return bytes(rows[0][0]) if rows else None

    def count_nonces(self) -> int:
        """Nonce rows, expired or not (what the file holds)."""
        return int(self.sql("SELECT count(*) FROM nonces")[0][0])

    async def break_backend(self) -> None:
        self.sql("DROP TABLE connections")
        self.sql("DROP TABLE locks")

    def raw_bytes(self) -> bytes:
        files = [self.path, Path(f"{self.path}-wal")]
        return b"".join(p.read_bytes() for p in files if p.exists())

    def cleanup(self) -> None:
        pass


class RedisHarness:
    """Reaches under the store with a second, synchronous client to the same Redis and prefix."""

    name = "redis"
    short_lock_ttl = 0.2  # real time: Redis expires the lock key itself (PX)

    def __init__(self, url: str, prefix: str, raw: redis.Redis | redis.RedisCluster | None = None) -> None:
        self.url = url
        self.prefix = prefix
        self.clock = FakeClock()
        self.raw = raw if raw is not None else redis.Redis.from_url(url, socket_timeout=5)
        self.stores: list[RedisStore] = []

    async def open(self, keyring: KeyRing) -> Store:
        store = await RedisStore.open(
            self.url, keyring, prefix=self.prefix, clock=self.clock, slot_tags=SLOT_TAGS
        )
        self.stores.append(store)
        return store

    async def outlive_lock(self, ttl: float) -> None:
        await asyncio.sleep(ttl + 0.1)  # the fake clock does not move Redis's

    def lock_key(self, name: str) -> str:
        return f"{self.prefix}lock:{hashlib.sha256(name.encode()).hexdigest()}"

    def user_part(self, user: UserRef) -> str:
        """The user's part of key names (docs/redis.md, "Keys")."""
        return user_tag(user)

    def carried(self, opaque: str) -> str:
        """What the key of an id, state or nonce carries before its digest: nothing here."""
        return ""

    def conn_key(self, key: ConnectionKey) -> str:
        return f"{self.prefix}conn:{self.user_part(key.user)}:{key.provider}"

    def read_value(self, key: ConnectionKey) -> dict[str, Any]:
        raw = self.raw.hget(self.conn_key(key), key.account)
        assert raw is not None
        value = json.loads(raw)
        assert isinstance(value, dict)
        return value

    def write_value(self, key: ConnectionKey, value: dict[str, Any] | bytes) -> None:
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        self.raw.hset(self.conn_key(key), key.account, raw)

    def read_blob(self, key: ConnectionKey) -> bytes:
        return base64.b64decode(self.read_value(key)["blob"])

    def write_blob(self, key: ConnectionKey, blob: bytes) -> None:
        value = self.read_value(key)
        value["blob"] = base64.b64encode(blob).decode()
        self.write_value(key, value)

    def copy_connection(self, src: ConnectionKey, dst: ConnectionKey) -> None:
        raw = self.raw.hget(self.conn_key(src), src.account)
        assert raw is not None
        self.raw.hset(self.conn_key(dst), dst.account, raw)
        self.raw.sadd(f"{self.prefix}user:{self.user_part(dst.user)}:providers", dst.provider)

    def read_state_blob(self, state: str) -> bytes | None:
        raw = self.raw.get(f"{self.prefix}state:{self.carried(state)}{state_digest(state)}")
        return None if raw is None else bytes(raw)

    def count_nonces(self) -> int:
        """`nonce:` keys (what Redis holds until their TTL)."""
        return sum(1 for _ in self.raw.scan_iter(match=glob_escape(self.prefix) + "nonce:*", count=500))

    async def break_backend(self) -> None:
        # Point every open store's pool at a port nothing listens on, as if the network had gone.
        dead = free_port()
        for store in self.stores:
            client = store._client
            if client is None:
                continue
            pool = client.connection_pool
            await pool.disconnect()
            pool.connection_kwargs = {**pool.connection_kwargs, "host": REDIS_HOST, "port": dead}
            pool.reset()

    def redis_keys(self) -> list[bytes]:
        return sorted(self.raw.scan_iter(match=glob_escape(self.prefix) + "*", count=500))

    def raw_bytes(self) -> bytes:
        """Every key name, its DUMP (what a backup or replica holds) and its logical value."""
        parts: list[bytes] = []
        for key in self.redis_keys():
            parts.append(key)
            parts.append(self.raw.dump(key) or b"")  # DUMP may LZF-compress, so also read values
            kind = self.raw.type(key)
            if kind == b"string":
                parts.append(self.raw.get(key) or b"")
            elif kind == b"hash":
                for field, value in self.raw.hgetall(key).items():
                    parts += [field, value]
            elif kind == b"set":
                parts += list(self.raw.smembers(key))
            elif kind == b"zset":
                parts += [member for member, _ in self.raw.zrange(key, 0, -1, withscores=True)]
        return b"\n".join(parts)

    def cleanup(self) -> None:
        keys = self.redis_keys()
        if keys:
            self.raw.unlink(*keys)
        self.raw.close()


class SentinelHarness(RedisHarness):
    """The Redis harness behind Sentinel: the store finds the primary through the sentinels; the
    raw client talks to the primary they name."""

    name = "sentinel"

    def __init__(self, group: SentinelGroup, prefix: str) -> None:
        super().__init__(group.url(), prefix, group.primary())

    async def break_backend(self) -> None:
        # Sentinels that do not answer, and no connection open: the primary cannot be found.
        dead = free_port()
        for store in self.stores:
            client = store._client
            if client is None:
                continue
            pool = client.connection_pool
            assert isinstance(pool, SentinelConnectionPool)
            pool.sentinel_manager.sentinels = [
                redis.asyncio.Redis(host=REDIS_HOST, port=dead, socket_connect_timeout=0.5)
            ]
            await pool.disconnect()


class ClusterHarness(RedisHarness):
    """The Redis harness on a private three-primary cluster: the documented Cluster layout, where
    each key carries its hash tag, `{slot tag}` (docs/redis.md, "Cluster")."""

    name = "cluster"

    def __init__(self, group: ClusterGroup, prefix: str) -> None:
        super().__init__(group.url(), prefix, group.client())

    def user_part(self, user: UserRef) -> str:
        tag = user_tag(user)
        return f"{{{int(tag[:4], 16) % 16384:04x}}}{tag}"

    def carried(self, opaque: str) -> str:
        return f"{{{SLOT_TAGS.slot_of(opaque)}}}"

    async def break_backend(self) -> None:
        # Each open store's client replaced by one whose only node is a port nothing listens on.
        dead = free_port()
        for store in self.stores:
            client = store._client
            if client is None:
                continue
            await client.aclose()
            unreachable = redis.asyncio.RedisCluster(
                host=REDIS_HOST, port=dead, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
            )
            store._client = unreachable
            for script in vars(store).values():  # the Lua scripts run on the client they were registered with
                if isinstance(script, AsyncScript):
                    script.registered_client = unreachable


_T = TypeVar("_T")


class PostgresHarness:
    """Reaches under the store with its own asyncpg connections to the same schema. The sync
    methods run their query on a loop of their own in a worker thread (the test's loop is busy)."""

    name = "postgres"
    short_lock_ttl = 0.2  # real time: locks expire by the database server's clock

    def __init__(self, schema: PostgresSchema) -> None:
        self.schema = schema
        self.clock = FakeClock()
        self.stores: list[PostgresStore] = []

    async def open(self, keyring: KeyRing) -> Store:
        store = await PostgresStore.open(self.schema.url, keyring, clock=self.clock)
        self.stores.append(store)
        return store

    async def outlive_lock(self, ttl: float) -> None:
        await asyncio.sleep(ttl + 0.1)  # the fake clock does not move the server's

    async def run(self, fn: Callable[[Any], Awaitable[_T]]) -> _T:
        conn = await asyncpg.connect(self.schema.url)
        try:
            return await fn(conn)
        finally:
            await conn.close()

    def run_sync(self, fn: Callable[[Any], Awaitable[_T]]) -> _T:
        with concurrent.futures.ThreadPoolExecutor(1) as worker:
            return worker.submit(asyncio.run, self.run(fn)).result()  # type: ignore[arg-type]

    def sql(self, sql: str, *args: object) -> list[Any]:
        return self.run_sync(lambda conn: conn.fetch(sql, *args))

    def read_blob(self, key: ConnectionKey) -> bytes:
        rows = self.sql(
            "SELECT blob FROM connections WHERE iss = $1 AND sub = $2 AND provider = $3 AND account = $4",
            key.user.iss,
            key.user.sub,
            key.provider,
            key.account,
        )
        return bytes(rows[0][0])

    def write_blob(self, key: ConnectionKey, blob: bytes) -> None:
        self.sql(
            "UPDATE connections SET blob = $1 WHERE iss = $2 AND sub = $3 AND provider = $4 AND account = $5",
            blob,
            key.user.iss,
            key.user.sub,
            key.provider,
            key.account,
        )

    def copy_connection(self, src: ConnectionKey, dst: ConnectionKey) -> None:
        self.sql(
            "INSERT INTO connections (iss, sub, provider, account, account_label, blob, connected_at, "
            "updated_at, status, refreshed_at) "
            "SELECT $1, $2, $3, $4, account_label, blob, connected_at, updated_at, status, refreshed_at "
            "FROM connections WHERE iss = $5 AND sub = $6 AND provider = $7 AND account = $8 "
            "ON CONFLICT (iss, sub, provider, account) DO UPDATE SET blob = excluded.blob",
            *astuple(dst.user),
            dst.provider,
            dst.account,
            *astuple(src.user),
            src.provider,
            src.account,
        )

    def read_state_blob(self, state: str) -> bytes | None:
        rows = self.sql("SELECT blob FROM oauth_states WHERE key = $1", state_digest(state))
        return bytes(rows[0][0]) if rows else None

    def count_nonces(self) -> int:
        """Nonce rows, expired or not (what the database holds)."""
        return int(self.sql("SELECT count(*) FROM nonces")[0][0])

    async def break_backend(self) -> None:
        await self.run(lambda conn: conn.execute("DROP TABLE connections; DROP TABLE locks"))

    def raw_bytes(self) -> bytes:
        """Every row of the schema as text, and the table, index and TOAST files on disk (after a
        checkpoint): what a backup or a stolen disk holds."""

        async def read(conn: Any) -> bytes:
            await conn.execute("CHECKPOINT")
            tables = await conn.fetch(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = $1 AND c.relkind = 'r'",
                self.schema.name,
            )
            parts = []
            for (table,) in tables:
                rows = await conn.fetch(f'SELECT row_to_json(t)::text FROM "{table}" t')  # noqa: S608
                parts += [row[0].encode() for row in rows]
            files = await conn.fetch(
                "SELECT pg_relation_filepath(c.oid) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = $1 UNION ALL "
                "SELECT pg_relation_filepath(c.reltoastrelid) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.reltoastrelid <> 0",
                self.schema.name,
            )
            for (path,) in files:
                if path is not None and (self.schema.server.data / path).exists():
                    parts.append((self.schema.server.data / path).read_bytes())
            return b"\n".join(parts)

        return self.run_sync(read)

    def cleanup(self) -> None:
        pass


# --- what reaches the backend -------------------------------------------------------------------


@dataclass
class Wire:
    """What the store sent to Redis: one entry per socket write, i.e. per round trip."""

    writes: list[bytes] = field(default_factory=list)

    def commands(self) -> list[list[bytes]]:
        """Command names per write (a MULTI/EXEC pipeline is several commands in one write)."""
        return [
            [
                parts[i + 2].upper()
                for i, part in enumerate(parts)
                if part.startswith(b"*") and i + 2 < len(parts)
            ]
            for parts in (write.split(b"\r\n") for write in self.writes)
        ]


def record_wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    """Record every write any Redis connection sends, until `monkeypatch` is undone."""
    recorded = Wire()
    real = AbstractConnection.send_packed_command

    async def recording(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, bytes | str) else list(command)
        recorded.writes.append(b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks))
        await real(self, chunks, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", recording)
    return recorded


# The least-privilege ACL docs/redis.md recommends; keep the two in sync.
ACL_RULES = (
    "on >store-password ~mcpuc:* resetchannels -@all "
    "+ping +hello +auth +select "
    "+multi +exec +discard +evalsha +script|load +scan "
    "+get +set +getdel +del +exists "
    "+hget +hgetall +hmget +hset +hdel +smembers +sadd +srem "
    "+zadd +zrem +zcard +zremrangebyscore +zrevrangebyscore +pexpire +pttl "
    "+hsetnx +hincrby +hexists +zrangebyscore +zscore"
)
