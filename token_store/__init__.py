"""Storage of token sets, pending elicitations and one-time OAuth records.

`open_store(url, keyring)` picks the backend from the URL; everything else talks to the `Store`
interface only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from token_store import models
from token_store.backends.postgres.store import SCHEMES as POSTGRES_SCHEMES
from token_store.backends.postgres.store import PostgresStore
from token_store.backends.postgres.store import check_url as check_postgres_url
from token_store.backends.redis.plaintext import (
    PlaintextToRemoteRedis,
    RedisAddress,
    require_tls_to_redis_unless_loopback,
)
from token_store.backends.redis.store import (
    CLUSTER_SCHEME,
    SENTINEL_SCHEME,
    ClusterURL,
    RedisStore,
    SentinelURL,
    SlotTags,
    redis_addresses,
    slot_tag,
)
from token_store.backends.redis.store import DEFAULT_PREFIX as DEFAULT_REDIS_PREFIX
from token_store.backends.redis.store import SCHEMES as REDIS_SCHEMES
from token_store.backends.sqlite import SQLiteStore
from token_store.base import Store, StoreError, StoreUnavailable, TooManyPending
from token_store.crypto import DecryptError, KeyRing
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
    TokenSet,
    Transition,
    UserRef,
    WebhookMessage,
    require_transition,
)
from token_store.store_copy import COPY_WINDOW, CopyReport, CopyWindowClosed, copy_endpoints, copy_store

__all__ = [
    "CLUSTER_SCHEME",
    "COPY_WINDOW",
    "DEFAULT_REDIS_PREFIX",
    "LIVE_STATUSES",
    "POSTGRES_SCHEMES",
    "REDIS_SCHEMES",
    "STORE_SCHEMES",
    "CallbackOutcome",
    "ClientRegistration",
    "ClusterURL",
    "Connection",
    "ConnectionKey",
    "ConnectionStatus",
    "CopyReport",
    "CopyWindowClosed",
    "DecryptError",
    "Deletion",
    "ElicitationStatus",
    "KeyRing",
    "OAuthState",
    "PendingElicitation",
    "PlaintextToRemoteRedis",
    "PostgresStore",
    "RedisAddress",
    "RedisStore",
    "SQLiteStore",
    "SealedConnection",
    "SentinelURL",
    "SlotTags",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TokenSet",
    "TooManyPending",
    "Transition",
    "UserRef",
    "WebhookMessage",
    "check_store_url",
    "copy_between",
    "copy_endpoints",
    "copy_store",
    "models",
    "open_store",
    "redis_addresses",
    "require_tls_to_redis_unless_loopback",
    "require_transition",
    "slot_tag",
]

STORE_SCHEMES = ("sqlite", *REDIS_SCHEMES, *POSTGRES_SCHEMES)  # what `open_store` opens


async def open_store(
    url: str,
    keyring: KeyRing,
    *,
    prefix: str = DEFAULT_REDIS_PREFIX,
    clock: Callable[[], float] = time.time,
    wait_replicas: int = 0,
    wait_timeout: float = 1.0,
    allow_plaintext_redis: bool = False,
    slot_tags: SlotTags | None = None,
) -> Store:
    """Open the backend `url` names (`check_store_url` says which).

    Supported: `sqlite:///absolute/path.db`, `sqlite:///./relative.db`,
    `redis://[[user]:password@]host[:port][/db]` or `rediss://...` (TLS; see docs/redis.md),
    `redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db]`,
    `redis+cluster://[[user]:password@]host:port[,host:port...]` (ids then carry their user's
    `slot_tag`, masked: `slot_tags` unmasks it), and
    `postgresql://user:password@host[:port]/database[?sslmode=...]` or `postgres://...`
    (docs/postgres.md). `prefix` namespaces the Redis keys (`DEFAULT_REDIS_PREFIX` unless given);
    the others ignore it. `clock` judges every TTL of every backend (Redis locks excepted: they
    expire by the server's clock). `wait_replicas`/`wait_timeout`: Redis only, see
    `RedisStore.open`; so is `allow_plaintext_redis`, without which every Redis connection is TLS
    or to this machine (`require_tls_to_redis_unless_loopback`, checked on each connection).
    """
    scheme = check_store_url(url)
    if scheme == "sqlite":
        return await SQLiteStore.open(_sqlite_path(url), keyring, clock=clock)
    if scheme in REDIS_SCHEMES:
        return await RedisStore.open(
            url,
            keyring,
            prefix=prefix,
            clock=clock,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            allow_plaintext=allow_plaintext_redis,
            slot_tags=slot_tags,
        )
    return await PostgresStore.open(url, keyring, clock=clock)


async def copy_between(
    source_url: str,
    target_url: str,
    keyring: KeyRing,
    *,
    prefix: str = DEFAULT_REDIS_PREFIX,
    new_window: bool = False,
    clock: Callable[[], float] = time.time,
    allow_plaintext_redis: bool = False,
) -> CopyReport:
    """`mcp-url-connect store copy-from`: copy the store at `source_url` into the one at
    `target_url`, any backends `open_store` opens, never undoing a deletion
    (token_store/store_copy.py); `prefix` is both stores' Redis key prefix, and
    `allow_plaintext_redis` is `open_store`'s for both. ValueError for a URL that names no store,
    or a SQLite source file that does not exist (opening would create it)."""
    if check_store_url(source_url) == "sqlite" and not _sqlite_path(source_url).exists():
        raise ValueError("the old store's SQLite file does not exist")
    check_store_url(target_url)
    source = await open_store(
        source_url, keyring, prefix=prefix, clock=clock, allow_plaintext_redis=allow_plaintext_redis
    )
    try:
        target = await open_store(
            target_url, keyring, prefix=prefix, clock=clock, allow_plaintext_redis=allow_plaintext_redis
        )
        try:
            reader, writer = copy_endpoints(source, target)
            return await copy_store(reader, writer, now=clock(), new_window=new_window)
        finally:
            await target.close()
    finally:
        await source.close()


def check_store_url(url: str) -> str:
    """The scheme of `url`, lower-cased, when `open_store` can open it; else ValueError, in one
    line that names the schemes supported and never the rest of the URL (it may hold a password)."""
    supported = ", ".join(STORE_SCHEMES)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parses the port: a ValueError when it is not a number in range
    except ValueError:
        if not url.lower().startswith((SENTINEL_SCHEME + "://", CLUSTER_SCHEME + "://")):
            raise ValueError(f"malformed URL (supported schemes: {supported})") from None
        parts = urlsplit(url)  # several host:port pairs, which `parts.port` cannot read
    # Their ValueErrors name the part that is wrong, never the URL.
    if parts.scheme.lower() == SENTINEL_SCHEME:
        SentinelURL.parse(url)
    elif parts.scheme.lower() == CLUSTER_SCHEME:
        ClusterURL.parse(url)
    scheme = parts.scheme.lower()
    if scheme not in STORE_SCHEMES:
        raise ValueError(f"unsupported store URL scheme {scheme!r} (supported: {supported})")
    if scheme == "sqlite":
        _sqlite_path(url)
    elif scheme in POSTGRES_SCHEMES:
        check_postgres_url(url)
    return scheme


def _sqlite_path(url: str) -> Path:
    """The file a `sqlite:///...` URL names: absolute, or relative to the working directory when the
    path starts with `./` or `../`. Extra leading slashes (`sqlite:////abs`) are accepted."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise ValueError(f"not a sqlite URL (scheme {parts.scheme!r})")
    if parts.netloc or parts.query or parts.fragment:
        raise ValueError("sqlite URL must look like sqlite:///path (no host, query or fragment)")
    path = unquote(parts.path)
    # Three slashes then a path; `./` or `../` right after them means relative to the cwd.
    path = path[1:] if path.startswith(("/./", "/../")) else "/" + path.lstrip("/")
    if path.endswith("/") or Path(path).name in ("", ".", ".."):
        raise ValueError("sqlite URL must name a database file")
    return Path(path)
