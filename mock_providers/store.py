"""The mock providers' durable state: one SQLite file under the data dir, or memory.

What a connection stored at an MCP server needs to keep working across a restart of
``mcp-url-connect demo`` / ``mock-providers`` lives here: authorization codes, access and refresh
tokens (MockHub's grant families and retired refresh tokens too), MockGoogle's offline consents
and signing key, MockSlack's tokens, MockKeys' keys, the dev AS's registered clients, codes and
refresh tokens. Counters (``token_requests``, ``issued_*``, ...) stay in memory: they are one
run's observations.

**Secrets are stored as SHA-256 digests.** A row is found by the digest of the secret that names
it (a token, a code, an API key), and a secret field inside a record (a refresh token, a client
secret) is stored as ``sha256:<hex>``; the secret itself is never written. This process remembers
the secrets it issued or was shown (memory only), so records read back carry them where known;
a record stored by an earlier run carries a :class:`SecretDigest` instead. A request's token is a
plain ``str`` and is always hashed before lookup, so a digest is never accepted as the secret.

The file (``mock-providers.sqlite3``, created mode 0600; SQLite gives its ``-wal``/``-shm``
companions the same mode) holds one table of JSON records, keyed by kind and digest, and a small
table of named values (MockGoogle's signing key, which, like the dev AS's in ``dev-as.json``, is
stored as is). Every write commits at once (WAL, ``synchronous=NORMAL``): a crash loses at most
the last writes, which is fine for a development fixture.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, MutableMapping, MutableSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

STATE_FILENAME = "mock-providers.sqlite3"
DIGEST_PREFIX = "sha256:"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS records ("
    " kind TEXT NOT NULL, key TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (kind, key)"
    ") WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS named (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
)
_SELECT = "SELECT data FROM records WHERE kind = ? AND key = ?"
_UPSERT = "INSERT OR REPLACE INTO records (kind, key, data) VALUES (?, ?, ?)"

R = TypeVar("R")


def sha256_hex(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class SecretDigest(str):
    """A secret this process knows only by its SHA-256 (stored by an earlier run): ``sha256:<hex>``.

    Only the store makes these; as a lookup key it is matched by digest, whereas any plain
    ``str`` is hashed first, so the digest of a token never stands in for the token.
    """

    @classmethod
    def of(cls, hex_digest: str) -> SecretDigest:
        return cls(DIGEST_PREFIX + hex_digest)

    @property
    def hex_digest(self) -> str:
        return self[len(DIGEST_PREFIX) :]

    def matches(self, secret: str) -> bool:
        """Whether ``secret`` is the secret this is the digest of (constant-time compare)."""
        return hmac.compare_digest(sha256_hex(secret), self.hex_digest)


def state_path(data_dir: Path) -> Path:
    return Path(data_dir) / STATE_FILENAME


def delete_state(data_dir: Path) -> None:
    """Forget every mock provider's durable state in ``data_dir`` (run it while they are stopped)."""
    path = state_path(data_dir)
    for name in (path.name, path.name + "-wal", path.name + "-shm", path.name + "-journal"):
        with contextlib.suppress(FileNotFoundError):
            (path.parent / name).unlink()


class MockStore:
    """One SQLite database (file or memory) and the secrets this process has seen.

    Thread-safe: the kit serves the app from a background thread while a test's thread turns
    knobs (e.g. ``hub.revoke_grant``), so every statement runs under one lock.
    """

    def __init__(self, connection: sqlite3.Connection, path: Path | None) -> None:
        self._db = connection
        self.path = path
        self._lock = threading.Lock()
        self._known: dict[str, str] = {}  # digest -> secret, for secrets issued or shown this run
        with self._lock:
            for statement in _SCHEMA:
                self._db.execute(statement)

    @classmethod
    def open(cls, data_dir: Path) -> MockStore:
        """The store in ``<data_dir>/mock-providers.sqlite3``, created (mode 0600) if absent."""
        data_dir = Path(data_dir)
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = state_path(data_dir)
        # Created here with 0600 before SQLite opens it; SQLite's companion files copy the mode.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        connection = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        return cls(connection, path)

    @classmethod
    def in_memory(cls) -> MockStore:
        """A store that lives as long as this object (what a provider built without one gets)."""
        connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        return cls(connection, None)

    @classmethod
    def for_data_dir(cls, data_dir: Path, *, persist: bool) -> MockStore:
        return cls.open(data_dir) if persist else cls.in_memory()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- secrets ---------------------------------------------------------------------------------

    def digest(self, secret: str) -> str:
        """The hex digest a secret is stored under (a :class:`SecretDigest` is one already)."""
        return secret.hex_digest if isinstance(secret, SecretDigest) else sha256_hex(secret)

    def remember(self, secret: str, hex_digest: str) -> None:
        """Keep ``secret`` (in memory) so records read back this run carry it, not its digest."""
        if not isinstance(secret, SecretDigest):
            self._known[hex_digest] = secret

    def reveal(self, hex_digest: str) -> str:
        """The secret of ``hex_digest`` if this process has seen it, else a :class:`SecretDigest`."""
        return self._known.get(hex_digest) or SecretDigest.of(hex_digest)

    # -- rows ------------------------------------------------------------------------------------

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(_SELECT, (kind, key)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def put(self, kind: str, key: str, data: dict[str, Any]) -> None:
        text = json.dumps(data, separators=(",", ":"))
        with self._lock:
            self._db.execute(_UPSERT, (kind, key, text))

    def delete(self, kind: str, key: str) -> bool:
        with self._lock:
            cursor = self._db.execute("DELETE FROM records WHERE kind = ? AND key = ?", (kind, key))
        return cursor.rowcount > 0

    def keys(self, kind: str) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT key FROM records WHERE kind = ?", (kind,)).fetchall()
        return [str(row[0]) for row in rows]

    def count(self, kind: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT count(*) FROM records WHERE kind = ?", (kind,)).fetchone()
        return int(row[0])

    def named(self, name: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM named WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def set_named(self, name: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO named (name, value) VALUES (?, ?)", (name, value))


@dataclass(frozen=True)
class RecordCodec(Generic[R]):
    """How a dataclass record is stored: ``key_field`` names it (and is a secret; ``None``: the
    record does not hold the secret naming it); the
    ``secret_fields`` are stored as digests; ``skip`` fields are not stored (``build`` supplies
    them again, e.g. a provider's clock). Lists read back as tuples."""

    build: Callable[..., R]
    key_field: str | None
    secret_fields: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()

    def encode(self, record: R, store: MockStore) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for item in dataclasses.fields(record):  # type: ignore[arg-type]  # R is a dataclass
            if item.name in self.skip:
                continue
            value = getattr(record, item.name)
            if item.name in (self.key_field, *self.secret_fields) and value is not None:
                hex_digest = store.digest(value)
                store.remember(value, hex_digest)
                value = DIGEST_PREFIX + hex_digest
            data[item.name] = value
        return data

    def decode(self, data: dict[str, Any], store: MockStore) -> R:
        values: dict[str, Any] = {}
        for name, value in data.items():
            if name in (self.key_field, *self.secret_fields) and isinstance(value, str):
                value = store.reveal(value.removeprefix(DIGEST_PREFIX))
            values[name] = tuple(value) if isinstance(value, list) else value
        return self.build(**values)


class _SecretKeyed(MutableMapping[str, R]):
    """What both mappings below share: rows of ``kind`` keyed by the digest of a secret."""

    store: MockStore
    kind: str

    def __delitem__(self, key: str) -> None:
        if not self.store.delete(self.kind, self.store.digest(key)):
            raise KeyError(self.kind)

    def __iter__(self) -> Iterator[str]:
        return iter([self.store.reveal(hex_digest) for hex_digest in self.store.keys(self.kind)])

    def __len__(self) -> int:
        return self.store.count(self.kind)


class DurableMap(_SecretKeyed[R]):
    """A dict of records named by a secret, stored in a :class:`MockStore` under ``kind``.

    Records read back are new objects: a change to one is kept by assigning it again
    (``tokens[key] = record``), as a provider does after revoking or expiring a token.
    """

    def __init__(self, store: MockStore, kind: str, codec: RecordCodec[R]) -> None:
        self.store = store
        self.kind = kind
        self.codec = codec

    def key_digest(self, record: R) -> str:
        assert self.codec.key_field is not None, "an index needs records that hold their key"
        return self.store.digest(getattr(record, self.codec.key_field))

    def __getitem__(self, key: str) -> R:
        hex_digest = self.store.digest(key)
        data = self.store.get(self.kind, hex_digest)
        if data is None:
            raise KeyError(self.kind)  # never the key: it is a secret
        self.store.remember(key, hex_digest)
        return self.codec.decode(data, self.store)

    def __setitem__(self, key: str, record: R) -> None:
        hex_digest = self.store.digest(key)
        self.store.remember(key, hex_digest)
        self.store.put(self.kind, hex_digest, self.codec.encode(record, self.store))

    def __repr__(self) -> str:
        return f"<DurableMap {self.kind} ({len(self)} records)>"


class DurableIndex(_SecretKeyed[R]):
    """A second secret naming records of a :class:`DurableMap` (MockHub's refresh tokens name
    the record of their access token): stores only digest -> digest."""

    def __init__(self, store: MockStore, kind: str, target: DurableMap[R]) -> None:
        self.store = store
        self.kind = kind
        self.target = target

    def __getitem__(self, key: str) -> R:
        hex_digest = self.store.digest(key)
        row = self.store.get(self.kind, hex_digest)
        if row is None:
            raise KeyError(self.kind)
        # Before the record is decoded: a record naming this secret then carries it, not its
        # digest (a revocation compares the presented refresh token with the record's).
        self.store.remember(key, hex_digest)
        record = self.target.get(SecretDigest.of(row["ref"]))
        if record is None:
            raise KeyError(self.kind)
        return record

    def __setitem__(self, key: str, record: R) -> None:
        hex_digest = self.store.digest(key)
        self.store.remember(key, hex_digest)
        self.store.put(self.kind, hex_digest, {"ref": self.target.key_digest(record)})


class DurableSet(MutableSet[tuple[str, ...]]):
    """A set of tuples of non-secret strings (MockGoogle's ``(client_id, sub)`` consents)."""

    def __init__(self, store: MockStore, kind: str) -> None:
        self.store = store
        self.kind = kind

    @staticmethod
    def _key(item: object) -> str:
        return json.dumps(list(item) if isinstance(item, tuple) else item)

    def __contains__(self, item: object) -> bool:
        return self.store.get(self.kind, self._key(item)) is not None

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return iter([tuple(json.loads(key)) for key in self.store.keys(self.kind)])

    def __len__(self) -> int:
        return self.store.count(self.kind)

    def add(self, value: tuple[str, ...]) -> None:
        self.store.put(self.kind, self._key(value), {})

    def discard(self, value: tuple[str, ...]) -> None:
        self.store.delete(self.kind, self._key(value))

    def __repr__(self) -> str:
        return f"<DurableSet {self.kind} {set(self)!r}>"
