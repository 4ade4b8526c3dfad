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
from token_store.base import Store, StoreError, StoreUnavailable, TooManyPending
from token_store.crypto import DecryptError, KeyRing
from token_store.models import (
    LIVE_STATUSES,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    TokenSet,
    UserRef,
)
from token_store.redis_store import DEFAULT_PREFIX as DEFAULT_REDIS_PREFIX
from token_store.redis_store import RedisStore
from token_store.sqlite import SQLiteStore

__all__ = [
    "DEFAULT_REDIS_PREFIX",
    "LIVE_STATUSES",
    "Connection",
    "ConnectionKey",
    "ConnectionStatus",
    "DecryptError",
    "ElicitationStatus",
    "KeyRing",
    "OAuthState",
    "PendingElicitation",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TokenSet",
    "TooManyPending",
    "UserRef",
    "models",
    "open_store",
]


async def open_store(
    url: str,
    keyring: KeyRing,
    *,
    prefix: str = DEFAULT_REDIS_PREFIX,
    clock: Callable[[], float] = time.time,
) -> Store:
    """Open the backend `url` names.

    Supported: `sqlite:///absolute/path.db`, `sqlite:///./relative.db`, and
    `redis://[[user]:password@]host[:port][/db]` or `rediss://...` (TLS; see docs/redis.md).
    `prefix` namespaces the Redis keys (`DEFAULT_REDIS_PREFIX` unless given); SQLite ignores it.
    `clock` judges every TTL of both backends (Redis locks excepted: they expire by the server's clock).
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        return await SQLiteStore.open(_sqlite_path(url), keyring, clock=clock)
    if scheme in ("redis", "rediss"):
        return await RedisStore.open(url, keyring, prefix=prefix, clock=clock)
    # Name only the scheme: a store URL may carry a password.
    raise ValueError(f"unsupported store URL scheme {scheme!r} (supported: 'sqlite', 'redis', 'rediss')")


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
