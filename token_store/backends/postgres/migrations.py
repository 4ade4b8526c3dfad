"""Versioned schema of the PostgreSQL store: `schema/NNNN_*.sql`, applied in order.

The version sits in `mcpuc_schema_version` (one row). `migrate` brings a database up to
`SCHEMA_VERSION` in one transaction, under an advisory lock, so replicas starting together apply
each file once; a database newer than this code is refused. The server migrates when it opens the
store; a role without CREATE on the schema instead needs `mcp-url-connect store migrate` run once,
as the schema's owner, before the new version starts (docs/postgres.md).
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from token_store.base import StoreUnavailable

_FILE = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")
# pg_advisory_lock key of the migration: any constant unique to this application.
_MIGRATION_LOCK = 0x6D637563  # "mcuc"
VERSION_TABLE = "mcpuc_schema_version"


def _migrations() -> list[tuple[int, str]]:
    found = []
    for entry in resources.files("token_store.backends.postgres").joinpath("schema").iterdir():
        match = _FILE.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    # Versions are 1..n with no gap: a missing file would silently skip a step.
    if [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(
            "token_store/backends/postgres/schema: migration files must be numbered 0001, 0002, ..."
        )
    return found


MIGRATIONS = _migrations()
SCHEMA_VERSION = len(MIGRATIONS)


class SchemaBehind(StoreUnavailable):
    """The database's schema is older than this code and this role may not upgrade it."""


async def stored_version(conn: Any) -> int:
    """The schema version of the database `conn` reaches (0: no schema yet)."""
    if await conn.fetchval("SELECT to_regclass($1)", VERSION_TABLE) is None:
        return 0
    version = await conn.fetchval(f"SELECT version FROM {VERSION_TABLE}")  # noqa: S608 - constant
    return int(version or 0)


def check_not_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreUnavailable(
            f"postgres store: database schema version {version} is newer than this code supports "
            f"({SCHEMA_VERSION})"
        )


async def migrate(conn: Any) -> int:
    """Apply every missing migration in one transaction; the number applied.

    Reads the version first without DDL, so a current database needs no privilege beyond the
    store's own (a least-privilege role can open it). The lock is session-level and taken before
    the transaction: a replica that waited for another's migration then starts its transaction
    after that one committed, and sees its tables.
    """
    version = await stored_version(conn)
    check_not_newer(version)
    if version == SCHEMA_VERSION:
        return 0
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
    try:
        version = await stored_version(conn)  # again, under the lock: another replica may have won
        check_not_newer(version)
        async with conn.transaction():
            if version == 0:
                await conn.execute(f"CREATE TABLE {VERSION_TABLE} (version integer NOT NULL)")
                await conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (0)")  # noqa: S608 - constant
            for number, sql in MIGRATIONS[version:]:
                await conn.execute(sql)
                await conn.execute(f"UPDATE {VERSION_TABLE} SET version = $1", number)  # noqa: S608
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)
    return SCHEMA_VERSION - version
