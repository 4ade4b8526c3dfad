"""The shared backend: Redis, for several replicas behind one load balancer.

Key layout (docs/redis.md has the full table); `u` is `user_tag(user)`, a hash of the MCP user:

- `{prefix}conn:{u}:{provider}`: hash, field = account, value = JSON with the sealed token set and
  the connection's metadata (label, times, status). No TTL.
- `{prefix}user:{u}:providers`: set of providers the user has connections at. No TTL.
- `{prefix}user:{u}:defaults`: hash, field = provider, value = the account the user chose there
  (not secret). No TTL.
- `{prefix}gone:{u}:{provider}`: hash, field = account, value = JSON with iss, sub and when the
  connection was deleted (not secret; token_store/store_copy.py). Each entry kept
  `DELETIONS_KEPT`, the hash as long past its newest entry.
- `{prefix}copy-window`: string, when the first `store copy-from` into this store began. No TTL.
- `{prefix}elic:{id}`: hash (status, record, user, expires_at), TTL until the elicitation expires.
- `{prefix}elic-user:{u}`: zset of the user's live elicitation ids scored by expires_at, TTL.
- `{prefix}state:{sha256(state)}`: sealed OAuth state, TTL. `{prefix}nonce:{sha256(nonce)}`: TTL.
- `{prefix}nonce-slot:{sha256(slot)}`: string, the sha256 of the slot's live nonce, TTL.
- `{prefix}lock:{sha256(name)}`: string, the owner token of a held lock, TTL = the lock's TTL.
- `{prefix}callback:{sha256(state)}`: JSON, how the callback that took that state ended, TTL.
- `{prefix}client:{sha256(issuer, redirect URI)}`: string, a sealed client registration. No TTL.

Multi-key steps are atomic: a Lua script or MULTI/EXEC. Redis TTLs only bound how long records
linger; whether a record is still valid is decided against the store's clock (`clock=`), as in
SQLite. One exception: a lock expires by its key's TTL, the Redis server's clock, which every
replica shares (the store's clock plays no part in locks).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError

from token_store import codec
from token_store.backends.redis.plaintext import LOCALHOST, RedisAddress, connect_hook
from token_store.base import StoreUnavailable, TooManyPending
from token_store.crypto import KeyRing
from token_store.models import (
    DELETIONS_KEPT,
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

_log = logging.getLogger(__name__)

SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
SCHEMES = ("redis", "rediss", SENTINEL_SCHEME, CLUSTER_SCHEME)
SLOT_TAG_CHARS = 4  # hex: the 14 bits that pick one of Redis Cluster's 16384 hash slots
DEFAULT_PREFIX = "mcpuc:"  # the one default of the key prefix (token_store.DEFAULT_REDIS_PREFIX)
_SCAN_COUNT = 500
_REENCRYPT_ATTEMPTS = 3  # per field, when a concurrent write changed it between read and write-back
_SLOT_ATTEMPTS = 16  # Cluster: a nonce slot's read-then-replace; each round one concurrent put wins
_USER_TAG_CHARS = 32  # 128 bits of sha256: collisions are out of reach, keys stay short
_COPY_ATTEMPTS = 8  # a copy step whose key changed between its read and its write, tried again


def _lua(*names: str) -> str:
    """The scripts in `scripts/<name>.lua`, joined: a shared function's file comes before
    the scripts that call it. Read from the package (importlib.resources), so a wheel ships them."""
    folder = resources.files("token_store.backends.redis").joinpath("scripts")
    return "\n".join(folder.joinpath(f"{name}.lua").read_text(encoding="utf-8") for name in names)


_CREATE_ELICITATION = _lua("create_elicitation")
_TRANSITION_ELICITATION = _lua("transition", "transition_elicitation")
_OPEN_ELICITATION = _lua("transition", "open_elicitation")
_COMPLETE_ELICITATION = _lua("transition", "complete_elicitation")
_ELICITATION_WITH_CONNECTION = _lua("elicitation_with_connection")
_PUT_CONNECTION = _lua("put_connection")
_DELETE_CONNECTION = _lua("remember_deletion", "delete_connection")
_DELETE_CONNECTIONS = _lua("remember_deletion", "delete_connections")
_CHANGE_CONNECTION = _lua("remember_deletion", "change_connection")
_CAS_FIELD = _lua("cas_field")
_CAS_STRING = _lua("cas_string")
_REPLACE_CONNECTION = _lua("stored_value", "replace_connection")
_SET_CONNECTION_STATUS = _lua("stored_value", "set_connection_status")
_PUT_SLOTTED_NONCE = _lua("put_slotted_nonce")
_RELEASE_LOCK = _lua("release_lock")
_ENQUEUE_WEBHOOK = _lua("enqueue_webhook")
_CLAIM_WEBHOOKS = _lua("claim_webhooks")
_SETTLE_WEBHOOK = _lua("settle_webhook")
_ADD_IF_ABSENT = _lua("add_if_absent")
_DELETE_IF_EQUAL = _lua("delete_if_equal")


def user_tag(user: UserRef) -> str:
    """The stable per-user part of key names: no raw issuer or subject in key names."""
    canonical = json.dumps([user.iss, user.sub], separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()[:_USER_TAG_CHARS]


def slot_tag(user: UserRef) -> str:
    """The user's Redis Cluster hash tag: 4 hex characters, 14 bits of `user_tag`, one of 16384
    values as the cluster has slots. Every key of the user carries it as `{tag}`, and the ids,
    OAuth states and requestState nonces minted for the user carry it masked (`SlotTags`), so the
    record an id names lies in its user's slot (docs/redis.md, "Cluster")."""
    return _slot_tag_of(user_tag(user))


def _slot_tag_of(tag: str) -> str:
    return f"{int(tag[:4], 16) % 16384:0{SLOT_TAG_CHARS}x}"


MASKED_SLOT_TAG = "t"  # leads an id carrying a masked slot tag: no hex digit, as unmasked tags are
_SLOT_BITS = 16383  # the 14 bits of a slot tag


class SlotTags:
    """On Redis Cluster, how an id, OAuth state or nonce names its user's hash slot without telling
    whose it is. `mint` writes `t`, then the user's `slot_tag` XOR 14 bits of HMAC-SHA256 (under a
    server key) of the id's 256 random bits, then those bits: the store unmasks it with the same
    key (`slot_of`) and places the record in the user's slot, while whoever sees the id (the
    model, the client, browser history, the provider) learns nothing of its user, and two ids of
    one user look unrelated. An id beginning with four hex digits carries its slot tag in clear,
    as every id was minted before (still resolved)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a slot tag key has at least 256 bits")
        self._key = key

    def _mask(self, random_part: str) -> int:
        digest = hmac.new(self._key, random_part.encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:2], "big") & _SLOT_BITS

    def mint(self, user: UserRef) -> str:
        """A fresh id for `user`: 256 random bits from `secrets`, led by the user's slot tag, masked."""
        random_part = secrets.token_urlsafe(32)
        # mutant: redis.slot_tag_masked "^ self._mask(random_part)" -> ""
        carried = int(slot_tag(user), 16) ^ self._mask(random_part)
        return f"{MASKED_SLOT_TAG}{carried:0{SLOT_TAG_CHARS}x}{random_part}"

    def slot_of(self, opaque: str) -> str:
        """The slot tag `opaque` carries: unmasked when `mint` made it, else its first four
        characters (an id minted before tags were masked; any other string names some slot)."""
        if not _masked(opaque):
            return opaque[:SLOT_TAG_CHARS]
        carried = int(opaque[1 : 1 + SLOT_TAG_CHARS], 16)
        return f"{carried ^ self._mask(opaque[1 + SLOT_TAG_CHARS :]):0{SLOT_TAG_CHARS}x}"


def _masked(opaque: str) -> bool:
    """Whether `opaque` is shaped as `SlotTags.mint` writes: `t`, four hex digits, the rest."""
    carried = opaque[1 : 1 + SLOT_TAG_CHARS]
    return (
        opaque.startswith(MASKED_SLOT_TAG)
        and len(carried) == SLOT_TAG_CHARS
        and all(c in "0123456789abcdef" for c in carried)
    )


@dataclass(frozen=True)
class _Keys:
    """Key names. `cluster`: each name carries a hash tag, `{slot tag}`, right after its kind:
    the user's for the user's keys, the one an id, state or nonce carries for theirs (`slots`
    unmasks it)."""

    prefix: str
    cluster: bool = False
    slots: SlotTags | None = None

    def user(self, tag: str) -> str:
        return f"{{{_slot_tag_of(tag)}}}{tag}" if self.cluster else tag

    def slot_of(self, opaque: str) -> str:
        """The slot tag an id, state or nonce carries (Cluster only)."""
        if self.slots is not None:
            return self.slots.slot_of(opaque)
        if _masked(opaque):
            raise ValueError("a Redis Cluster store opened without slot_tags cannot place a masked id")
        return opaque[:SLOT_TAG_CHARS]

    def carried(self, opaque: str) -> str:
        """The hash tag an id, state or nonce carries (nothing on a single primary)."""
        return f"{{{self.slot_of(opaque)}}}" if self.cluster else ""

    @property
    def conn_prefix(self) -> str:
        return f"{self.prefix}conn:"

    def per_provider(self, kind: str, tag: str, provider: str) -> str:
        """A key of one user at one provider: `conn` (their connections), `gone` (deletions)."""
        return f"{self.prefix}{kind}:{self.user(tag)}:{provider}"

    def conn(self, tag: str, provider: str) -> str:
        return self.per_provider("conn", tag, provider)

    def gone(self, tag: str, provider: str) -> str:
        return self.per_provider("gone", tag, provider)

    @property
    def copy_window(self) -> str:
        return f"{self.prefix}copy-window"

    def providers(self, tag: str) -> str:
        return f"{self.prefix}user:{self.user(tag)}:providers"

    def defaults(self, tag: str) -> str:
        return f"{self.prefix}user:{self.user(tag)}:defaults"

    def elic(self, elicitation_id: str) -> str:
        return f"{self.prefix}elic:{self.carried(elicitation_id)}{elicitation_id}"

    def elic_user_prefix(self, elicitation_id: str) -> str:
        """The live-set name without the user tag, for the transition script's ARGV."""
        return f"{self.prefix}elic-user:{self.carried(elicitation_id)}"

    def elic_user(self, tag: str) -> str:
        return f"{self.prefix}elic-user:{self.user(tag)}"

    @property
    def state_prefix(self) -> str:
        return f"{self.prefix}state:"

    def state(self, state: str, digest: str) -> str:
        return f"{self.state_prefix}{self.carried(state)}{digest}"

    def nonce(self, nonce: str, digest: str) -> str:
        return f"{self.nonce_prefix(nonce)}{digest}"

    def nonce_prefix(self, nonce: str) -> str:
        return f"{self.prefix}nonce:{self.carried(nonce)}"

    def nonce_slot(self, nonce: str, digest: str) -> str:
        return f"{self.prefix}nonce-slot:{self.carried(nonce)}{digest}"

    def lock(self, digest: str) -> str:
        return f"{self.prefix}lock:{digest}"

    def callback(self, digest: str) -> str:
        return f"{self.prefix}callback:{digest}"

    @property
    def client_prefix(self) -> str:
        return f"{self.prefix}client:"

    def client(self, digest: str) -> str:
        return f"{self.client_prefix}{digest}"

    def pattern(self, kind: str) -> str:
        """SCAN MATCH pattern for one key kind; glob characters in the prefix match literally."""
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return f"{escaped}{kind}:*"

    @property
    def webhooks(self) -> str:
        """The outbox's keys' common part; on Cluster one hash tag puts all three in one slot, so
        its scripts (which touch all three) run on one shard."""
        return f"{self.prefix}webhooks:{{outbox}}:" if self.cluster else f"{self.prefix}webhooks:"

    @property
    def webhooks_due(self) -> str:
        """zset: webhook message id -> when it is next due."""
        return f"{self.webhooks}due"

    @property
    def webhooks_messages(self) -> str:
        """hash: webhook message id -> the message (JSON: type, body, created_at)."""
        return f"{self.webhooks}messages"

    @property
    def webhooks_attempts(self) -> str:
        """hash: webhook message id -> attempts made so far (absent: none)."""
        return f"{self.webhooks}attempts"


class RedisStore:
    """`Store` over Redis (>= 6.2). Create it with `await RedisStore.open(...)`."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        keyring: KeyRing,
        prefix: str,
        clock: Callable[[], float],
        *,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        slot_tags: SlotTags | None = None,
    ) -> None:
        self._client: Redis | RedisCluster | None = client
        self._wait_replicas = wait_replicas
        self._wait_timeout_ms = max(1, math.ceil(wait_timeout * 1000))
        self._keyring = keyring
        self._keys = _Keys(prefix, cluster=isinstance(client, RedisCluster), slots=slot_tags)
        self._clock = clock
        # Scripts are sent by SHA; redis-py loads them again when a restarted server has forgotten them.
        self._create_elicitation = client.register_script(_CREATE_ELICITATION)
        self._transition_elicitation = client.register_script(_TRANSITION_ELICITATION)
        self._open_elicitation = client.register_script(_OPEN_ELICITATION)
        self._elicitation_with_connection = client.register_script(_ELICITATION_WITH_CONNECTION)
        self._complete_elicitation = client.register_script(_COMPLETE_ELICITATION)
        self._put_connection = client.register_script(_PUT_CONNECTION)
        self._delete_connection = client.register_script(_DELETE_CONNECTION)
        self._delete_connections = client.register_script(_DELETE_CONNECTIONS)
        self._change_connection = client.register_script(_CHANGE_CONNECTION)
        self._cas_field = client.register_script(_CAS_FIELD)
        self._cas_string = client.register_script(_CAS_STRING)
        self._replace_connection = client.register_script(_REPLACE_CONNECTION)
        self._put_slotted_nonce = client.register_script(_PUT_SLOTTED_NONCE)
        self._set_connection_status = client.register_script(_SET_CONNECTION_STATUS)
        self._release_lock = client.register_script(_RELEASE_LOCK)
        self._add_if_absent = client.register_script(_ADD_IF_ABSENT)
        self._delete_if_equal = client.register_script(_DELETE_IF_EQUAL)

    @classmethod
    async def open(
        cls,
        url: str,
        keyring: KeyRing,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] = time.time,
        socket_timeout: float = 2.0,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        allow_plaintext: bool = False,
        slot_tags: SlotTags | None = None,
    ) -> RedisStore:
        """Connect to `url` (redis://, rediss://, redis+sentinel:// or redis+cluster://) and check
        it answers; `StoreUnavailable` otherwise (also when a connection would go in plain text
        to another machine and `allow_plaintext` is not set: `plaintext.connect_hook`).

        `clock` judges whether a record is still valid; Redis's own TTLs only bound how long a
        record lingers, except for locks, which expire by the Redis server's clock.
        `wait_replicas` > 0: a write that stores a token set returns only once that many replicas
        acknowledged it (`WAIT`, at most `wait_timeout` seconds; `require_replica_acknowledgement`).
        `slot_tags`: on Cluster, the key that unmasks the slot tag of the ids the service mints
        (`SlotTags`; the same on every replica); unused elsewhere.
        """
        if not prefix:
            raise ValueError("redis key prefix must not be empty")
        if wait_replicas < 0 or (wait_replicas and not 0 < wait_timeout < socket_timeout):
            # A WAIT longer than the socket timeout would end as a timeout, not as its count.
            raise ValueError("wait_replicas must be >= 0, and 0 < wait_timeout < socket_timeout")
        if wait_replicas and urlsplit(url).scheme.lower() == CLUSTER_SCHEME:
            raise ValueError("wait_replicas is for a single primary or Sentinel, not Cluster")
        if urlsplit(url).scheme.lower() == CLUSTER_SCHEME and ("{" in prefix or "}" in prefix):
            raise ValueError("on Redis Cluster the key prefix must not contain { or }")
        timeouts = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
        client = redis_client(url, **timeouts, allow_plaintext=allow_plaintext)
        store = cls(
            client,
            keyring,
            prefix,
            clock,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            slot_tags=slot_tags,
        )
        try:
            await store.ping()
        except BaseException:
            await store.close()
            raise
        return store

    # --- connections (tokens) -------------------------------------------------------------
    async def put_connection(self, connection: Connection) -> None:
        key = connection.key
        tag = user_tag(key.user)
        value = self._connection_value(connection)
        # One script: the index never misses a connection that exists.
        keys = [self._keys.conn(tag, key.provider), self._keys.providers(tag)]
        async with self._replicated("put_connection") as client:
            await self._put_connection(keys=keys, args=[key.account, value, key.provider], client=client)

    async def get_connection(
        self, user: UserRef, provider: str, account: str | None = None
    ) -> Connection | None:
        name = self._keys.conn(user_tag(user), provider)
        # Exactly one round trip on the hot path of every tool call.
        async with self._guard("get_connection") as client:
            if account is None:
                fields = await client.hgetall(name)
            else:
                raw = await client.hget(name, account)
                fields = {} if raw is None else {account: raw}
        return self._newest_connection(user, provider, fields)

    async def list_connections(self, user: UserRef, provider: str | None = None) -> list[Connection]:
        tag = user_tag(user)
        async with self._guard("list_connections") as client:
            if provider is not None:  # one round trip: the tool call's path
                return self._open_hash(user, provider, await client.hgetall(self._keys.conn(tag, provider)))
            providers = sorted(_text(p) for p in await client.smembers(self._keys.providers(tag)))
            if not providers:
                return []
            # One round trip; on Cluster without MULTI (reads only, one node: the user's slot).
            async with client.pipeline(transaction=not self._keys.cluster) as pipe:
                for provider in providers:
                    pipe.hgetall(self._keys.conn(tag, provider))
                hashes = await pipe.execute()
        connections = []
        for provider, fields in zip(providers, hashes, strict=True):
            connections.extend(self._open_hash(user, provider, fields))
        return connections

    async def delete_connection(self, key: ConnectionKey) -> bool:
        # One script: the deletion is remembered with it (token_store/store_copy.py).
        now = self._clock()
        args = [key.account, key.provider, _deletion_value(key.user, now), *self._kept_args(now)]
        async with self._guard("delete_connection"):
            deleted = await self._delete_connection(
                keys=self._connection_keys(key.user, key.provider), args=args
            )
        return bool(deleted)

    async def delete_connections(self, user: UserRef, provider: str) -> list[Connection]:
        now = self._clock()
        args = [provider, _deletion_value(user, now), *self._kept_args(now)]
        # Read and delete in one script: what is returned is exactly what was deleted.
        async with self._guard("delete_connections"):
            flat = await self._delete_connections(keys=self._connection_keys(user, provider), args=args)
        return self._open_hash(user, provider, dict(zip(flat[::2], flat[1::2], strict=True)))

    async def replace_connection(self, connection: Connection, expected_updated_at: float) -> bool:
        key = connection.key
        value = self._connection_value(connection)
        name = self._keys.conn(user_tag(key.user), key.provider)
        async with self._replicated("replace_connection") as client:
            # The field exists, so the provider index already names it: one key, one script.
            replaced = await self._replace_connection(
                keys=[name], args=[key.account, _num(expected_updated_at), value], client=client
            )
        return bool(replaced)

    async def set_connection_status(self, key: ConnectionKey, status: ConnectionStatus) -> bool:
        name = self._keys.conn(user_tag(key.user), key.provider)
        async with self._guard("set_connection_status"):
            updated = await self._set_connection_status(
                keys=[name], args=[key.account, ConnectionStatus(status).value]
            )
        return bool(updated)

    # --- remembered choices ---------------------------------------------------------------
    async def get_default_account(self, user: UserRef, provider: str) -> str | None:
        async with self._guard("get_default_account") as client:
            raw = await client.hget(self._keys.defaults(user_tag(user)), provider)
        return None if raw is None else _text(raw)

    async def set_default_account(self, user: UserRef, provider: str, account: str | None) -> None:
        name = self._keys.defaults(user_tag(user))
        async with self._guard("set_default_account") as client:
            if account is None:
                await client.hdel(name, provider)
            else:
                await client.hset(name, provider, account)

    # --- locks ----------------------------------------------------------------------------
    async def acquire_lock(self, name: str, ttl_seconds: float) -> str | None:
        # The lock expires by the Redis server's clock (PX), the one clock every replica shares.
        if not (math.isfinite(ttl_seconds) and ttl_seconds > 0):
            raise ValueError("lock TTL must be a positive number of seconds")
        owner = secrets.token_urlsafe(24)
        px = max(1, math.ceil(ttl_seconds * 1000))
        async with self._guard("acquire_lock") as client:
            # NX: of concurrent acquirers exactly one sets the key; an expired key is gone, so the
            # next acquirer takes the lock over.
            taken = await client.set(self._keys.lock(codec.lookup_key(name)), owner, px=px, nx=True)
        return owner if taken else None

    async def release_lock(self, name: str, owner: str) -> bool:
        async with self._guard("release_lock"):
            released = await self._release_lock(keys=[self._keys.lock(codec.lookup_key(name))], args=[owner])
        return bool(released)

    async def lock_held(self, name: str) -> bool:
        async with self._guard("lock_held") as client:
            return bool(await client.exists(self._keys.lock(codec.lookup_key(name))))

    # --- pending elicitations -------------------------------------------------------------
    async def create_elicitation(self, elicitation: PendingElicitation, max_live_per_user: int) -> None:
        e = elicitation
        now = self._clock()
        tag = user_tag(e.user)
        if self._keys.cluster:
            require_slot_tag(self._keys.slot_of(e.id), _slot_tag_of(tag))
        args: list[str | int] = [
            _num(now),
            max_live_per_user,
            _num(e.expires_at),
            _ttl_ms(e.expires_at, now),
            e.id,
            e.status.value,
            e.to_json(),
            tag,
            "1" if e.status.is_live else "0",
        ]
        async with self._guard("create_elicitation"):
            # Count and insert in one script: concurrent creates cannot both take the last slot.
            code, live = await self._create_elicitation(
                keys=[self._keys.elic(e.id), self._keys.elic_user(tag)], args=args
            )
        if code == 0:
            raise TooManyPending(f"the user already has {live} live pending elicitations")
        if code != 1:
            raise StoreUnavailable("redis store: create_elicitation failed (id already exists)")

    async def get_elicitation(self, elicitation_id: str) -> PendingElicitation | None:
        now = self._clock()
        async with self._guard("get_elicitation") as client:
            status, record = await client.hmget(self._keys.elic(elicitation_id), ["status", "record"])
        if status is None or record is None:
            return None
        elicitation = PendingElicitation.from_json(record)
        if elicitation.expires_at <= now:
            return None
        return replace(elicitation, status=ElicitationStatus(_text(status)))

    async def live_elicitations(self, user: UserRef) -> list[PendingElicitation]:
        now = self._clock()
        async with self._guard("live_elicitations") as client:
            ids = await client.zrevrangebyscore(self._keys.elic_user(user_tag(user)), "+inf", f"({_num(now)}")
            async with client.pipeline(transaction=False) as pipe:
                for elicitation_id in ids:
                    pipe.hmget(self._keys.elic(_text(elicitation_id)), ["status", "record"])
                replies = await pipe.execute() if ids else []
        found = []
        for status, record in replies:
            if status is None or record is None:
                continue
            elicitation = replace(
                PendingElicitation.from_json(record), status=ElicitationStatus(_text(status))
            )
            if elicitation.status.is_live and elicitation.expires_at > now:
                found.append(elicitation)
        return found

    async def get_elicitation_with_connection(
        self, elicitation_id: str
    ) -> tuple[PendingElicitation, Connection | None] | None:
        now = self._clock()
        reply: Any
        async with self._guard("get_elicitation_with_connection") as client:
            if self._keys.cluster:
                # Two reads: the connection's key name comes from the record.
                found: list[Any] = await client.hmget(
                    self._keys.elic(elicitation_id), ["status", "record", "user"]
                )
                if None in found:
                    return None
                name = self._keys.conn(_text(found[2]), PendingElicitation.from_json(found[1]).provider)
                fields = await client.hgetall(name)
                reply = [found[0], found[1], [item for pair in fields.items() for item in pair]]
            else:
                reply = await self._elicitation_with_connection(
                    keys=[self._keys.elic(elicitation_id)], args=[self._keys.conn_prefix]
                )
        if reply is None:
            return None
        status, record, flat = reply
        elicitation = PendingElicitation.from_json(record)
        if elicitation.expires_at <= now:
            return None
        elicitation = replace(elicitation, status=ElicitationStatus(_text(status)))
        fields = dict(zip(flat[::2], flat[1::2], strict=True))
        held = self._newest_connection(elicitation.user, elicitation.provider, fields)
        return elicitation, held

    async def transition_elicitation(
        self, elicitation_id: str, expected: ElicitationStatus, new: ElicitationStatus
    ) -> PendingElicitation | None:
        require_transition(expected, new)
        args = self._transition_args(elicitation_id, expected, new)
        async with self._guard("transition_elicitation") as client:
            live = await self._declared_live_set(client, elicitation_id)
            if live is None:
                return None
            # Compare-and-set on the status inside one script: each transition happens once.
            record = await self._transition_elicitation(
                keys=[self._keys.elic(elicitation_id), *live], args=args
            )
        return None if record is None else replace(PendingElicitation.from_json(record), status=new)

    async def _declared_live_set(self, client: Redis | RedisCluster, elicitation_id: str) -> list[str] | None:
        """On Cluster, the live set of the elicitation's user, read from the record so that the
        transition script can declare it (its name needs the user, the caller has only the id);
        None when there is no record. Nothing to declare on a single primary."""
        if not self._keys.cluster:
            return []
        tag = await client.hget(self._keys.elic(elicitation_id), "user")
        return None if tag is None else [self._keys.elic_user(_text(tag))]

    async def open_elicitation(self, state: OAuthState) -> PendingElicitation | None:
        elicitation_id = state.elicitation.id
        digest, blob = codec.seal_state(self._keyring, state)
        args = self._transition_args(elicitation_id, *Transition.OPEN.value)
        args += [blob, _ttl_ms(state.expires_at, self._clock())]
        if self._keys.cluster:
            require_slot_tag(self._keys.slot_of(state.state), self._keys.slot_of(elicitation_id))
        keys = [self._keys.elic(elicitation_id), self._keys.state(state.state, digest)]
        async with self._guard("open_elicitation") as client:
            live = await self._declared_live_set(client, elicitation_id)
            if live is None:
                return None
            reply = await self._open_elicitation(keys=[*keys, *live], args=args)
        if reply[0] == -1:
            raise StoreUnavailable("redis store: open_elicitation failed (state already exists)")
        if reply[0] != 1:
            return None
        return replace(PendingElicitation.from_json(reply[1]), status=Transition.OPEN.new)

    async def complete_elicitation(
        self, connection: Connection, elicitation_id: str
    ) -> PendingElicitation | None:
        key = connection.key
        tag = user_tag(key.user)
        args = self._transition_args(elicitation_id, *Transition.COMPLETE.value)
        args += [key.account, key.provider, self._connection_value(connection)]
        keys = [
            self._keys.elic(elicitation_id),
            self._keys.conn(tag, key.provider),
            self._keys.providers(tag),
        ]
        if self._keys.cluster:
            if self._keys.slot_of(elicitation_id) != _slot_tag_of(tag):
                # Not in the user's slot, so not the user's: the connection is stored all the same.
                await self.put_connection(connection)
                return None
            # The caller binds the connection's user to the elicitation's; the script checks it.
            keys.append(self._keys.elic_user(tag))
        async with self._replicated("complete_elicitation") as client:
            record = await self._complete_elicitation(keys=keys, args=args, client=client)
        if record is None:
            return None
        return replace(PendingElicitation.from_json(record), status=Transition.COMPLETE.new)

    def _transition_args(
        self, elicitation_id: str, expected: ElicitationStatus, new: ElicitationStatus
    ) -> list[str | int | bytes]:
        """ARGV[1..6] of scripts/transition.lua."""
        return [
            expected.value,
            new.value,
            _num(self._clock()),
            "1" if new.is_live else "0",
            self._keys.elic_user_prefix(elicitation_id),
            elicitation_id,
        ]

    # --- one-time records -----------------------------------------------------------------
    async def put_oauth_state(self, state: OAuthState) -> None:
        digest, blob = codec.seal_state(self._keyring, state)
        px = _ttl_ms(state.expires_at, self._clock())
        async with self._guard("put_oauth_state") as client:
            # NX: a stored state is never replaced, only taken once (or left to expire).
            stored = await client.set(self._keys.state(state.state, digest), blob, px=px, nx=True)
        if not stored:
            raise StoreUnavailable("redis store: put_oauth_state failed (state already exists)")

    async def take_oauth_state(self, state: str) -> OAuthState | None:
        digest = codec.lookup_key(state)
        now = self._clock()
        async with self._guard("take_oauth_state") as client:
            # GETDEL: of two concurrent takes, exactly one gets the value.
            # mutant: redis.take_oauth_state peek
            blob = await client.getdel(self._keys.state(state, digest))
        taken = None if blob is None else codec.open_state(self._keyring, digest, _bytes(blob))
        return taken if taken is not None and taken.expires_at > now else None

    async def put_callback_outcome(self, state: str, outcome: CallbackOutcome) -> None:
        px = _ttl_ms(outcome.expires_at, self._clock())
        async with self._guard("put_callback_outcome") as client:
            # NX: the first outcome of a state stays.
            await client.set(self._keys.callback(codec.lookup_key(state)), outcome.to_json(), px=px, nx=True)

    async def get_callback_outcome(self, state: str) -> CallbackOutcome | None:
        async with self._guard("get_callback_outcome") as client:
            raw = await client.get(self._keys.callback(codec.lookup_key(state)))
        found = None if raw is None else CallbackOutcome.from_json(_bytes(raw))
        return found if found is not None and found.expires_at > self._clock() else None

    async def put_nonce(self, nonce: str, ttl_seconds: float, slot: str | None = None) -> None:
        now = self._clock()
        expires_at = now + ttl_seconds
        digest = codec.lookup_key(nonce)
        key = self._keys.nonce(nonce, digest)
        if slot is not None:
            slot_key = self._keys.nonce_slot(nonce, codec.lookup_key(slot))
            args: list[str | int] = [
                _num(expires_at),
                _ttl_ms(expires_at, now),
                self._keys.nonce_prefix(nonce),
                digest,
            ]
            async with self._guard("put_nonce") as client:
                if not self._keys.cluster:
                    await self._put_slotted_nonce(keys=[key, slot_key], args=args)
                    return
                for _ in range(_SLOT_ATTEMPTS):
                    # Declare the nonce the slot holds: read it, then replace it only if unchanged.
                    old = await client.get(slot_key)
                    held = [] if old is None else [self._keys.nonce(nonce, _text(old))]
                    expected = "" if old is None else _text(old)
                    if await self._put_slotted_nonce(keys=[key, slot_key, *held], args=[*args, expected]):
                        return
            raise StoreUnavailable("redis store: put_nonce failed (its slot kept changing)")
        async with self._guard("put_nonce") as client:
            await client.set(key, _num(expires_at), px=_ttl_ms(expires_at, now))

    async def take_nonce(self, nonce: str) -> bool:
        now = self._clock()
        async with self._guard("take_nonce") as client:
            # GETDEL rather than DEL: as atomic, and the stored expiry lets the store's clock decide.
            # mutant: redis.take_nonce peek
            expires_at = await client.getdel(self._keys.nonce(nonce, codec.lookup_key(nonce)))
        if expires_at is None:
            return False
        try:
            return float(_text(expires_at)) > now
        except ValueError:
            return False

    # --- key rotation ---------------------------------------------------------------------
    async def reencrypt_all(self) -> int:
        async with self._guard("reencrypt_all") as client:
            rewritten = 0
            async for name in client.scan_iter(
                match=self._keys.pattern("conn"), count=_SCAN_COUNT, _type="hash"
            ):
                rewritten += await self._reencrypt_hash(client, _text(name))
            async for name in client.scan_iter(
                match=self._keys.pattern("state"), count=_SCAN_COUNT, _type="string"
            ):
                rewritten += await self._reencrypt_state(client, _text(name))
        return rewritten

    async def _reencrypt_hash(self, client: Redis | RedisCluster, name: str) -> int:
        parsed = self._parse_provider_name("conn", name)
        if parsed is None:
            return 0
        tag, provider = parsed
        rewritten = 0
        for account_raw, raw in (await client.hgetall(name)).items():
            account = _text(account_raw)
            value: Any = raw
            for _ in range(_REENCRYPT_ATTEMPTS):
                new = self._resealed_value(tag, provider, account, value)
                if new is None:
                    break
                # Compare-and-set: a write by another replica since the read above wins.
                if await self._cas_field(keys=[name], args=[account, value, new]):
                    rewritten += 1
                    break
                # Changed meanwhile. A new token set is already under the primary key, but a status
                # change keeps the old blob: read the field again and re-seal what is there now.
                value = await client.hget(name, account)
                if value is None:
                    break
        return rewritten

    def _resealed_value(self, tag: str, provider: str, account: str, raw: Any) -> bytes | None:
        """`raw` with its blob sealed again under the primary key; None when the value is current,
        malformed, moved from another user, or does not open."""
        stored = _stored_connection(raw, provider, account)
        if stored is None or not self._keyring.is_stale(stored.blob):
            return None
        if user_tag(stored.key.user) != tag:  # moved here from another user's hash: leave it alone
            return None
        blob = codec.reseal_tokens(self._keyring, stored.key, stored.blob)
        return None if blob is None else _connection_value(replace(stored, blob=blob))

    async def _reencrypt_state(self, client: Redis | RedisCluster, name: str) -> int:
        digest = name.removeprefix(self._keys.state_prefix)
        if self._keys.cluster:
            digest = digest[SLOT_TAG_CHARS + 2 :]  # after the `{tag}`
        blob = await client.get(name)
        if blob is None:
            return 0
        new = codec.reseal_state(self._keyring, digest, _bytes(blob))
        if new is None:
            return 0
        return int(await self._cas_string(keys=[name], args=[blob, new]))

    # --- client registrations -------------------------------------------------------------
    async def get_client_registration(self, issuer: str, redirect_uri: str) -> ClientRegistration | None:
        digest = codec.client_registration_key(issuer, redirect_uri)
        async with self._guard("get_client_registration") as client:
            blob = await client.get(self._keys.client(digest))
        return None if blob is None else codec.open_client(self._keyring, digest, _bytes(blob))

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration:
        digest, blob = codec.seal_client(self._keyring, registration)
        async with self._replicated("add_client_registration") as client:
            stored = _bytes(
                await self._add_if_absent(keys=[self._keys.client(digest)], args=[blob], client=client)
            )
        if stored == blob:
            return registration
        opened = codec.open_client(self._keyring, digest, stored)
        if opened is None:
            raise StoreUnavailable("redis store: add_client_registration found a record that does not open")
        return opened

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        digest = codec.client_registration_key(issuer, redirect_uri)
        name = self._keys.client(digest)
        async with self._guard("remove_client_registration") as client:
            blob = await client.get(name)
            if blob is None:
                return False
            stored = codec.open_client(self._keyring, digest, _bytes(blob))
            if stored is not None and stored.client_id != client_id:
                return False  # another client was stored meanwhile: it stays
            return bool(await self._delete_if_equal(keys=[name], args=[blob]))

    async def reencrypt_client_registrations(self) -> int:
        rewritten = 0
        async with self._guard("reencrypt_client_registrations") as client:
            async for name, digest, blob in self._client_blobs(client):
                new = codec.reseal_client(self._keyring, digest, _bytes(blob))
                if new is not None:
                    rewritten += int(await self._cas_string(keys=[name], args=[blob, new]))
        return rewritten

    async def client_registrations(self) -> AsyncIterator[ClientRegistration]:
        async with self._guard("client_registrations") as client:
            async for _, digest, blob in self._client_blobs(client):
                opened = codec.open_client(self._keyring, digest, _bytes(blob))
                if opened is not None:
                    yield opened

    async def count_client_registrations_sealed_under(self, kid: str) -> int:
        prefix = KeyRing.sealed_prefix(kid)
        count = 0
        async with self._guard("count_client_registrations_sealed_under") as client:
            async for _, _, blob in self._client_blobs(client):
                count += _bytes(blob).startswith(prefix)
        return count

    async def _client_blobs(self, client: Redis | RedisCluster) -> AsyncIterator[tuple[str, str, Any]]:
        """Each stored client registration: its key, its issuer's digest and its sealed value
        (as read, for a compare-and-set); one deleted meanwhile is skipped."""
        async for raw_name in client.scan_iter(
            match=self._keys.pattern("client"), count=_SCAN_COUNT, _type="string"
        ):
            name = _text(raw_name)
            blob = await client.get(name)
            if blob is not None:
                yield name, name.removeprefix(self._keys.client_prefix), blob

    # --- moving to another store (token_store/store_copy.py) ------------------------------
    async def sealed_connections(self) -> AsyncIterator[SealedConnection]:
        async with self._guard("sealed_connections") as client:
            async for tag, provider, fields in self._provider_hashes(client, "conn"):
                for account, raw in fields.items():
                    stored = _stored_connection(raw, provider, _text(account))
                    if stored is not None and user_tag(stored.key.user) == tag:
                        yield stored

    async def deletions(self) -> AsyncIterator[Deletion]:
        now = self._clock()
        async with self._guard("deletions") as client:
            async for tag, provider, fields in self._provider_hashes(client, "gone"):
                for account, raw in fields.items():
                    user = _deleted_user(raw)
                    if user is None or user_tag(user) != tag:
                        continue
                    deletion = _deletion(ConnectionKey(user, provider, _text(account)), raw, now)
                    if deletion is not None:
                        yield deletion

    async def default_accounts(self) -> AsyncIterator[tuple[UserRef, str, str]]:
        async with self._guard("default_accounts") as client:
            async for name in client.scan_iter(
                match=self._keys.pattern("user"), count=_SCAN_COUNT, _type="hash"
            ):
                tag = self._parse_defaults_name(_text(name))
                # The hash names the user by a hash only: their (iss, sub) is in their connections,
                # and a default of a user with none left has nothing to choose from.
                user = None if tag is None else await self._user_of_tag(client, tag)
                if user is not None:
                    for provider, account in (await client.hgetall(name)).items():
                        yield user, _text(provider), _text(account)

    async def change_connection(self, key: ConnectionKey, decide: Decision) -> Change:
        keys = self._connection_keys(key.user, key.provider)
        async with self._replicated("change_connection") as client:
            for _ in range(_COPY_ATTEMPTS):
                # Read, decide, then write only if both fields are still as read (the script).
                now = self._clock()
                held = await client.hget(keys[0], key.account)
                remembered = await client.hget(keys[2], key.account)
                stored = None if held is None else _stored_connection(held, key.provider, key.account)
                made = decide(
                    None if stored is None else replace(stored, key=key),
                    None if remembered is None else _deletion(key, remembered, now),
                )
                if made.put is None and not made.remove and made.deletion is None:
                    return made
                args = [
                    key.account,
                    key.provider,
                    held or b"",
                    remembered or b"",
                    b"" if made.put is None else _connection_value(made.put),
                    "1" if made.remove else "0",
                    b"" if made.deletion is None else _deletion_value(key.user, made.deletion.deleted_at),
                    *self._kept_args(now),
                ]
                if await self._change_connection(keys=keys, args=args, client=client):
                    return made
        raise StoreUnavailable("redis store: change_connection failed (the key kept changing)")

    async def copy_default_account(self, user: UserRef, provider: str, account: str) -> None:
        async with self._guard("copy_default_account") as client:
            await client.hsetnx(self._keys.defaults(user_tag(user)), provider, account)

    async def open_copy_window(self, now: float, *, new: bool) -> float:
        async with self._guard("open_copy_window") as client:
            await client.set(self._keys.copy_window, _num(now), nx=not new)
            return float(_text(await client.get(self._keys.copy_window)))

    def _connection_keys(self, user: UserRef, provider: str) -> list[str]:
        """The connection hash, provider index and deletion hash of `user` at `provider`: what the
        scripts that store or delete a connection touch (one slot on Cluster)."""
        tag = user_tag(user)
        return [self._keys.conn(tag, provider), self._keys.providers(tag), self._keys.gone(tag, provider)]

    def _kept_args(self, now: float) -> list[str | int]:
        """ARGV of scripts/remember_deletion.lua: now, and how long a deletion is kept."""
        return [_num(now), _num(DELETIONS_KEPT), int(DELETIONS_KEPT * 1000)]

    async def _provider_hashes(
        self, client: Redis | RedisCluster, kind: str
    ) -> AsyncIterator[tuple[str, str, dict[Any, Any]]]:
        """(user tag, provider, fields) of every `{prefix}{kind}:{u}:{provider}` hash."""
        async for name in client.scan_iter(match=self._keys.pattern(kind), count=_SCAN_COUNT, _type="hash"):
            parsed = self._parse_provider_name(kind, _text(name))
            if parsed is not None:
                yield *parsed, await client.hgetall(name)

    async def _user_of_tag(self, client: Redis | RedisCluster, tag: str) -> UserRef | None:
        for provider in sorted(_text(p) for p in await client.smembers(self._keys.providers(tag))):
            for account, raw in (await client.hgetall(self._keys.conn(tag, provider))).items():
                stored = _stored_connection(raw, provider, _text(account))
                if stored is not None and user_tag(stored.key.user) == tag:
                    return stored.key.user
        return None

    def _parse_defaults_name(self, name: str) -> str | None:
        """The user tag of a `{prefix}user:{tag}:defaults` name in this store's layout."""
        rest = name.removeprefix(f"{self._keys.prefix}user:").removesuffix(":defaults")
        if self._keys.cluster:
            rest = rest[SLOT_TAG_CHARS + 2 :]
        if len(rest) != _USER_TAG_CHARS or self._keys.defaults(rest) != name:
            return None
        return rest

    def _parse_provider_name(self, kind: str, name: str) -> tuple[str, str] | None:
        # `{prefix}{kind}:{tag}:{provider}` (on Cluster `{prefix}{kind}:{{slot}}{tag}:{provider}`);
        # the tag has a fixed length, so a provider may contain ':'.
        rest = name.removeprefix(f"{self._keys.prefix}{kind}:")
        if self._keys.cluster:
            rest = rest[SLOT_TAG_CHARS + 2 :]
        tag, provider = rest[:_USER_TAG_CHARS], rest[_USER_TAG_CHARS + 1 :]
        if len(tag) != _USER_TAG_CHARS or rest[_USER_TAG_CHARS : _USER_TAG_CHARS + 1] != ":" or not provider:
            return None
        if self._keys.per_provider(kind, tag, provider) != name:
            return None
        return tag, provider

    # --- lifecycle ------------------------------------------------------------------------
    async def ping(self) -> None:
        async with self._guard("ping") as client:
            await client.ping()

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()

    # --- helpers --------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _guard(self, op: str) -> AsyncIterator[Redis | RedisCluster]:
        """The client, with every Redis failure turned into `StoreUnavailable` naming only `op`."""
        client = self._client
        if client is None:
            raise StoreUnavailable(f"redis store: {op} after close")
        try:
            yield client
        except (RedisError, RedisClusterException, OSError) as exc:
            # The error class is enough to diagnose; record data never goes into the message.
            # (redis-py's cluster errors, such as no reachable node, are not RedisErrors.)
            raise StoreUnavailable(f"redis store: {op} failed ({type(exc).__name__})") from exc

    @contextlib.asynccontextmanager
    async def _replicated(self, op: str) -> AsyncIterator[Redis | RedisCluster]:
        """`_guard`, and with `wait_replicas` set, the writes made on the yielded client are
        acknowledged by that many replicas before the block returns (one connection: `WAIT`
        counts the writes of the connection it runs on)."""
        async with self._guard(op) as client:
            if not self._wait_replicas:
                yield client
                return
            assert isinstance(client, Redis)  # `open` refuses wait_replicas on Cluster
            async with client.client() as connection:
                yield connection
                acknowledged = await connection.execute_command(  # type: ignore[no-untyped-call]
                    "WAIT", self._wait_replicas, self._wait_timeout_ms
                )
            require_replica_acknowledgement(op, int(acknowledged), self._wait_replicas)

    def _connection_value(self, connection: Connection) -> bytes:
        return _connection_value(codec.seal_connection(self._keyring, connection))

    @staticmethod
    def _parse_fields(provider: str, fields: Mapping[Any, Any]) -> list[SealedConnection]:
        """The connections of a `conn:` hash at `provider`, in account order, as their values say."""
        parsed = []
        for account_raw, raw in fields.items():
            account = _text(account_raw)
            stored = _stored_connection(raw, provider, account)
            if stored is None:
                _log.warning("stored connection is malformed; treating it as absent (account=%s)", account)
                continue
            parsed.append(stored)
        return sorted(parsed, key=lambda stored: stored.key.account)

    def _newest_connection(
        self, user: UserRef, provider: str, fields: Mapping[Any, Any]
    ) -> Connection | None:
        """The most recently updated connection among the hash `fields` that opens."""
        ordered = sorted(self._parse_fields(provider, fields), key=lambda stored: -stored.updated_at)
        for stored in ordered:
            # A record that fails to decrypt reads as absent; the next most recent answers.
            connection = self._open_connection(user, stored)
            if connection is not None:
                return connection
        return None

    def _open_hash(self, user: UserRef, provider: str, fields: Mapping[Any, Any]) -> list[Connection]:
        opened = (self._open_connection(user, stored) for stored in self._parse_fields(provider, fields))
        return [connection for connection in opened if connection is not None]

    def _open_connection(self, user: UserRef, stored: SealedConnection) -> Connection | None:
        """`stored` as `user`'s (never as the user its value names), None when it does not open."""
        return codec.open_sealed(self._keyring, replace(stored, key=replace(stored.key, user=user)))

    # --- operators ------------------------------------------------------------------------
    async def find_connections(
        self, provider: str | None = None, sub: str | None = None, iss: str | None = None
    ) -> list[Connection]:
        if iss is not None and sub is not None:  # one user: their index, no scan
            found = await self.list_connections(UserRef(iss, sub), provider)
        else:
            found = [
                connection
                async for connection in self._scan_connections("find_connections")
                if (provider is None or connection.key.provider == provider)
                and (sub is None or connection.key.user.sub == sub)
                and (iss is None or connection.key.user.iss == iss)
            ]
        return sorted(found, key=lambda c: (c.key.user, c.key.provider, c.key.account))

    async def count_sealed_under(self, kid: str) -> int:
        prefix = KeyRing.sealed_prefix(kid)
        count = 0
        async with self._guard("count_sealed_under") as client:
            async for name in client.scan_iter(
                match=self._keys.pattern("conn"), count=_SCAN_COUNT, _type="hash"
            ):
                for account, raw in (await client.hgetall(name)).items():
                    stored = _stored_connection(raw, "", _text(account))  # only its blob counts
                    count += stored is not None and stored.blob.startswith(prefix)
            async for name in client.scan_iter(
                match=self._keys.pattern("state"), count=_SCAN_COUNT, _type="string"
            ):
                blob = await client.get(name)
                # A state's TTL is its expiry (rounded up to the ms): one still here is unexpired.
                count += blob is not None and _bytes(blob).startswith(prefix)
        return count

    async def _scan_connections(self, op: str) -> AsyncIterator[Connection]:
        """Every connection that opens, hash by hash (a SCAN page of hashes read in one pipeline)."""
        async with self._guard(op) as client:
            names: list[str] = []
            async for name in client.scan_iter(
                match=self._keys.pattern("conn"), count=_SCAN_COUNT, _type="hash"
            ):
                names.append(_text(name))
                if len(names) >= _SCAN_COUNT:
                    for connection in await self._read_hashes(client, names):
                        yield connection
                    names = []
            for connection in await self._read_hashes(client, names):
                yield connection

    async def _read_hashes(self, client: Redis | RedisCluster, names: list[str]) -> list[Connection]:
        if not names:
            return []
        async with client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(name)
            hashes = await pipe.execute()
        connections = []
        for name, fields in zip(names, hashes, strict=True):
            parsed = self._parse_provider_name("conn", name)
            if parsed is None:
                continue
            tag, provider = parsed
            for stored in self._parse_fields(provider, fields):
                if user_tag(stored.key.user) != tag:  # moved here from another user's hash: not theirs
                    continue
                connection = self._open_connection(stored.key.user, stored)
                if connection is not None:
                    connections.append(connection)
        return connections

    # --- webhook outbox --------------------------------------------------------------------
    def _outbox_keys(self) -> list[str]:
        return [self._keys.webhooks_due, self._keys.webhooks_messages, self._keys.webhooks_attempts]

    def _script(self, source: str) -> Any:
        client = self._client
        if client is None:
            raise StoreUnavailable("redis store: used after close")
        return client.register_script(source)  # by SHA; reloaded if the server forgot it

    async def enqueue_webhook(self, message: WebhookMessage) -> None:
        value = json.dumps(
            {"type": message.type, "body": message.body, "created_at": message.created_at},
            separators=(",", ":"),
        )
        async with self._guard("enqueue_webhook"):
            await self._script(_ENQUEUE_WEBHOOK)(
                keys=self._outbox_keys(),
                args=[message.id, value, _num(message.next_attempt_at), message.attempts],
            )

    async def claim_webhooks(self, now: float, lease_seconds: float, limit: int) -> list[WebhookMessage]:
        lease = now + lease_seconds
        async with self._guard("claim_webhooks"):
            claimed = await self._script(_CLAIM_WEBHOOKS)(
                keys=self._outbox_keys(), args=[_num(now), _num(lease), int(limit)]
            )
        messages = []
        for message_id, raw, attempts in claimed:
            data = json.loads(_bytes(raw))
            messages.append(
                WebhookMessage(
                    _text(message_id),
                    str(data["type"]),
                    str(data["body"]),
                    float(data["created_at"]),
                    lease,
                    int(attempts),
                )
            )
        return sorted(messages, key=lambda m: (m.created_at, m.id))

    async def settle_webhook(self, claimed: WebhookMessage, retry_at: float | None) -> bool:
        args = [claimed.id, _num(claimed.next_attempt_at), "" if retry_at is None else _num(retry_at)]
        async with self._guard("settle_webhook"):
            return bool(await self._script(_SETTLE_WEBHOOK)(keys=self._outbox_keys(), args=args))


def _connection_value(sealed: SealedConnection) -> bytes:
    """A `conn:` hash field's value. iss/sub are kept so `reencrypt_all` can rebuild the associated
    data (key names hold only a hash of the user); reads never trust them: the caller's user is
    used. The provider and account are the key name and the field."""
    data = {
        "iss": sealed.key.user.iss,
        "sub": sealed.key.user.sub,
        "blob": base64.b64encode(sealed.blob).decode("ascii"),
        "label": sealed.account_label,
        "connected_at": sealed.connected_at,
        "updated_at": sealed.updated_at,
        "status": sealed.status.value,
        "refreshed_at": sealed.refreshed_at,
    }
    return json.dumps(data, separators=(",", ":")).encode()


def _stored_connection(raw: Any, provider: str, account: str) -> SealedConnection | None:
    """The value of field `account` of a `conn:` hash at `provider`, its user as the value says;
    None when it is not one (edited or corrupted underneath the store). `status` and
    `refreshed_at` came later: a value without them reads as status ok, never refreshed."""
    try:
        data = json.loads(_bytes(raw))
        refreshed_at = data.get("refreshed_at")
        return SealedConnection(
            key=ConnectionKey(
                UserRef(_require_str(data["iss"]), _require_str(data["sub"])), provider, account
            ),
            blob=base64.b64decode(_require_str(data["blob"]), validate=True),
            account_label=_require_str(data["label"]),
            connected_at=float(data["connected_at"]),
            updated_at=float(data["updated_at"]),
            status=ConnectionStatus(_require_str(data.get("status", ConnectionStatus.OK.value))),
            refreshed_at=None if refreshed_at is None else float(refreshed_at),
        )
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        return None


def _deletion_value(user: UserRef, deleted_at: float) -> bytes:
    """The value of a `gone:` hash entry: the user (key names hold only a hash of it) and when."""
    return json.dumps(
        {"iss": user.iss, "sub": user.sub, "deleted_at": deleted_at}, separators=(",", ":")
    ).encode()


def _deleted_user(raw: Any) -> UserRef | None:
    try:
        data = json.loads(_bytes(raw))
        return UserRef(_require_str(data["iss"]), _require_str(data["sub"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _deletion(key: ConnectionKey, raw: Any, now: float) -> Deletion | None:
    """The deletion a `gone:` hash entry remembers at `key`; None when malformed or past
    `DELETIONS_KEPT` (the script forgets those on its next write)."""
    try:
        deleted_at = float(json.loads(_bytes(raw))["deleted_at"])
    except (ValueError, TypeError, KeyError):
        return None
    return Deletion(key, deleted_at) if deleted_at + DELETIONS_KEPT > now else None


def require_slot_tag(carried: str, slot: str) -> None:
    """On Redis Cluster, the slot tag an id or state carries (`SlotTags.slot_of`) is `slot`, the
    slot tag of the records it is stored with (`slot_tag`), so that one script's keys share a
    hash slot (Redis Cluster specification, "Hash tags": a multi-key operation needs every key in
    one slot). A mismatch is a programming error: ValueError."""
    # mutant: redis.slot_tag
    if carried != slot:
        raise ValueError("on Redis Cluster an id or state must begin with its user's slot tag (slot_tag)")


def require_replica_acknowledgement(op: str, acknowledged: int, wanted: int) -> None:
    """A token set stored with `wait_replicas` set is on that many replicas too, or the write
    reports `StoreUnavailable`: Redis replication is asynchronous, and a failover promotes a
    replica that may lack the primary's last writes (Redis, "WAIT": "it will not make Redis a
    strongly consistent store", but a write acknowledged by N replicas survives the loss of
    the primary when one of them is promoted). The write itself is not undone: the caller's
    retry finds it if the primary survives."""
    # mutant: redis.replica_acknowledgement
    if acknowledged < wanted:
        raise StoreUnavailable(f"redis store: {op} not acknowledged by {wanted} replica(s) in time")


@dataclass(frozen=True)
class SentinelURL:
    """`redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db]`: the
    sentinels to ask, the name of the monitored primary, and the credentials of its data nodes."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    username: str | None = None
    password: str | None = None
    db: int = 0

    @classmethod
    def parse(cls, url: str) -> SentinelURL:
        """ValueError naming the part that is wrong, never the URL (it may hold a password)."""
        parts = urlsplit(url)
        if parts.scheme.lower() != SENTINEL_SCHEME:
            raise ValueError("not a redis+sentinel URL")
        if parts.query or parts.fragment:
            raise ValueError("redis+sentinel URL takes no query or fragment")
        userinfo, _, hosts = parts.netloc.rpartition("@")
        username, _, password = userinfo.partition(":")
        sentinels = tuple(_host_port(item) for item in hosts.split(","))
        path = [unquote(p) for p in parts.path.split("/")[1:]]
        if not path or not path[0] or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
            raise ValueError("redis+sentinel URL must end in /service_name or /service_name/db")
        return cls(
            sentinels=sentinels,
            service_name=path[0],
            username=unquote(username) or None,
            password=unquote(password) or None,
            db=int(path[1]) if len(path) == 2 else 0,
        )


@dataclass(frozen=True)
class ClusterURL:
    """`redis+cluster://[[user]:password@]host:port[,host:port...]`: some of the cluster's nodes
    (the client learns the rest from them) and the credentials of every node."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> ClusterURL:
        """ValueError naming the part that is wrong, never the URL (it may hold a password)."""
        parts = urlsplit(url)
        if parts.scheme.lower() != CLUSTER_SCHEME:
            raise ValueError("not a redis+cluster URL")
        if parts.query or parts.fragment or parts.path not in ("", "/"):
            raise ValueError(
                "redis+cluster URL takes no path (a cluster has database 0 only), query or fragment"
            )
        userinfo, _, hosts = parts.netloc.rpartition("@")
        username, _, password = userinfo.partition(":")
        return cls(
            nodes=tuple(_host_port(item, "redis+cluster URL: every node") for item in hosts.split(",")),
            username=unquote(username) or None,
            password=unquote(password) or None,
        )


def _host_port(item: str, what: str = "redis+sentinel URL: every sentinel") -> tuple[str, int]:
    host, sep, port = item.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} must be host:port")
    return host, int(port)


def redis_addresses(url: str) -> list[RedisAddress]:
    """The addresses a Redis store URL names, as redis-py reads it: for `redis://` and
    `rediss://`, redis-py's own URL parser (so `redis:///0?host=h` is `h`, and no host at all is
    `localhost`); every sentinel of a `redis+sentinel://` URL and every node of a
    `redis+cluster://` one (no TLS for either). Another scheme: none. ValueError for a malformed
    URL, naming nothing from it (it may hold a password)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == SENTINEL_SCHEME:
        return [RedisAddress(host, False) for host, _ in SentinelURL.parse(url).sentinels]
    if scheme == CLUSTER_SCHEME:
        return [RedisAddress(host, False) for host, _ in ClusterURL.parse(url).nodes]
    if scheme not in SCHEMES:
        return []
    try:
        options = parse_url(url)
    except ValueError:
        raise ValueError("malformed redis URL") from None
    return [RedisAddress(str(options.get("host") or LOCALHOST), scheme == "rediss")]


def redis_client(
    url: str, *, socket_timeout: float | None, socket_connect_timeout: float, allow_plaintext: bool = False
) -> Redis | RedisCluster:
    """The client for a store URL: one endpoint (redis://, rediss://), or the primary that the
    sentinels of a redis+sentinel:// URL name, found again after a failover (redis-py's Sentinel:
    a connection opened after the failover asks the sentinels; one still open to the demoted
    primary is closed by Sentinel, or fails with READONLY, so the call in flight fails and the
    next reaches the new primary). Every connection it opens, to whichever address, talks plain
    text only to this machine unless `allow_plaintext` (`plaintext.connect_hook`)."""
    checked = connect_hook(allow_plaintext)
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_connect_timeout,
        # No blind retries: replaying GETDEL or a compare-and-set whose reply was lost would
        # misreport the outcome, and a retry would stretch the time bound past socket_timeout.
        # A connection the server closed is replaced when the pool hands it out, so a
        # restarted Redis is used again without retries.
        "retry": Retry(NoBackoff(), 0),
        **_no_maintenance_notifications(),
    }
    scheme = urlsplit(url).scheme.lower()
    if scheme == CLUSTER_SCHEME:
        nodes = ClusterURL.parse(url)
        cluster_options = {k: v for k, v in options.items() if k != "retry"}
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes.nodes],
            username=nodes.username,
            password=nodes.password,
            # As for one primary, no blind retries of a call whose reply was lost; a MOVED
            # redirection after a resharding or failover is still followed (not a retry).
            retry=Retry(NoBackoff(), 0),
            **cluster_options,
        )
        _on_every_cluster_connection(cluster, checked)
        return cluster
    options["redis_connect_func"] = checked
    if scheme == SENTINEL_SCHEME:
        parsed = SentinelURL.parse(url)
        sentinel_options = {
            "socket_timeout": socket_connect_timeout,
            "socket_connect_timeout": socket_connect_timeout,
            "retry": Retry(NoBackoff(), 0),
            "redis_connect_func": checked,
        }
        sentinel = Sentinel(list(parsed.sentinels), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
        primary: Redis = sentinel.master_for(
            parsed.service_name,
            username=parsed.username,
            password=parsed.password,
            db=parsed.db,
            **options,
        )
        return primary
    if scheme not in SCHEMES:
        raise ValueError(f"not a redis URL (scheme {scheme!r})")
    try:
        return Redis.from_url(url, **options)
    except (ValueError, TypeError):
        # Name nothing from the URL: it may carry a password.
        raise ValueError("malformed redis URL") from None


def _on_every_cluster_connection(cluster: RedisCluster, hook: Callable[..., Awaitable[None]]) -> None:
    """`hook` as the `redis_connect_func` of every connection `cluster` opens. RedisCluster takes
    no such option (the single-node clients do), so it goes into the connection options of its
    nodes manager, which every node it creates copies (the nodes the cluster announces, a MOVED
    target), and of the startup nodes already made, as redis-py itself installs its maintenance
    handler. A private part of redis-py, checked here: RuntimeError when its shape changed."""
    manager = getattr(cluster, "nodes_manager", None)
    options = getattr(manager, "connection_kwargs", None)
    startup = getattr(manager, "startup_nodes", None)
    if (
        not isinstance(options, dict)
        or not isinstance(startup, dict)
        or not all(isinstance(getattr(node, "connection_kwargs", None), dict) for node in startup.values())
    ):
        raise RuntimeError("redis-py's RedisCluster changed: cannot check where its connections go")
    options["redis_connect_func"] = hook
    for node in startup.values():
        node.connection_kwargs["redis_connect_func"] = hook


def _no_maintenance_notifications() -> dict[str, Any]:
    """Client options turning off redis-py's maintenance notifications (on by default with RESP3 in
    redis-py >= 7): while on, the pool skips its check for connections the server closed (so the
    first call after a Redis restart failed) and timeouts are relaxed to seconds during maintenance."""
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # older redis-py: nothing to turn off
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def _require_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _num(value: float) -> str:
    # repr round-trips a float exactly; Lua's tonumber and ZADD parse it.
    return repr(float(value))


def _ttl_ms(expires_at: float, now: float) -> int:
    # Redis rejects a TTL <= 0; a record already expired by the clock gets 1 ms and reads as absent.
    return max(1, math.ceil((expires_at - now) * 1000))
