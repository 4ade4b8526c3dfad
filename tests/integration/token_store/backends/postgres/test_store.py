"""PostgreSQL-only behaviour of the store: the versioned schema (created, upgraded once by several
replicas starting together, a newer one refused), the least-privilege role docs/postgres.md
recommends, expiry without a job outside the server, connection failures that name no credential,
reads that survive a server restart, and `mcp-url-connect store migrate`. The backend-independent
contract is in test_store_contract.py. Each test runs in a schema of its own on a private server."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import asyncpg
import pytest

from mock_providers.testing import store_servers
from service.ops.cli import main
from tests.support import postgres as postgres_support
from tests.support.postgres import PostgresSchema, PostgresServer, terminate_clients
from tests.support.store_contract import ALICE, FakeClock, make_connection, make_elicitation, make_state
from token_store import KeyRing, PostgresStore, StoreUnavailable, open_store
from token_store.backends.postgres import migrations
from token_store.backends.postgres.migrations import SCHEMA_VERSION, VERSION_TABLE, SchemaBehind

# The grants docs/postgres.md gives the replicas' role ("Least privilege"); keep the two in sync.
# `{schema}` and `{role}` are filled in.
LEAST_PRIVILEGE_GRANTS = (
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
)


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[PostgresSchema]:
    with PostgresSchema(postgres_server) as made:
        yield made


@pytest.fixture
async def store(schema: PostgresSchema, keyring: KeyRing) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(schema.url, keyring, clock=FakeClock())
    yield opened
    await opened.close()


async def sql(schema: PostgresSchema, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(schema.url)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def test_a_new_database_gets_the_current_schema_and_a_reopen_changes_nothing(
    schema: PostgresSchema, keyring: KeyRing
) -> None:
    for _ in range(2):
        store = await PostgresStore.open(schema.url, keyring)
        await store.close()
        rows = await sql(schema, f"SELECT version FROM {VERSION_TABLE}")  # noqa: S608
        assert [tuple(r) for r in rows] == [(SCHEMA_VERSION,)]


async def test_replicas_starting_together_migrate_once(schema: PostgresSchema, keyring: KeyRing) -> None:
    stores = await asyncio.gather(*(PostgresStore.open(schema.url, keyring) for _ in range(4)))
    for store in stores:
        await store.ping()
        await store.close()
    assert len(await sql(schema, f"SELECT version FROM {VERSION_TABLE}")) == 1  # noqa: S608


async def test_an_older_schema_is_upgraded_in_place_keeping_its_rows(
    schema: PostgresSchema, keyring: KeyRing, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await PostgresStore.open(schema.url, keyring)
    conn = make_connection()
    await store.put_connection(conn)
    await store.close()
    # The next release adds a file; replicas of it start together on the old schema.
    step = "ALTER TABLE connections ADD COLUMN note text; CREATE TABLE upgraded (n integer);"
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, (SCHEMA_VERSION + 1, step)])
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    stores = await asyncio.gather(*(PostgresStore.open(schema.url, keyring) for _ in range(3)))
    try:
        assert await stores[0].get_connection(ALICE, "github") == conn
    finally:
        for opened in stores:
            await opened.close()
    rows = await sql(schema, f"SELECT version FROM {VERSION_TABLE}")  # noqa: S608
    assert [tuple(r) for r in rows] == [(SCHEMA_VERSION + 1,)]
    assert await sql(schema, "SELECT note FROM connections") != []


async def test_a_newer_schema_is_refused(schema: PostgresSchema, keyring: KeyRing) -> None:
    store = await PostgresStore.open(schema.url, keyring)
    await store.close()
    await sql(schema, f"UPDATE {VERSION_TABLE} SET version = $1", SCHEMA_VERSION + 1)  # noqa: S608
    with pytest.raises(StoreUnavailable, match="newer than this code supports"):
        await PostgresStore.open(schema.url, keyring)


@pytest.fixture
def least_privileged(postgres_server: PostgresServer) -> Iterator[tuple[str, str]]:
    role, password = f"mcpuc_{secrets.token_hex(4)}", secrets.token_hex(16)
    postgres_server.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    yield role, password
    postgres_server.psql(f"DROP OWNED BY {role}; DROP ROLE {role}")


async def test_the_least_privileged_role_serves_but_cannot_change_the_schema(
    schema: PostgresSchema,
    postgres_server: PostgresServer,
    least_privileged: tuple[str, str],
    keyring: KeyRing,
) -> None:
    role, password = least_privileged
    url = f"{postgres_server.url(user=role, password=password)}?search_path={schema.name}"
    postgres_server.psql(LEAST_PRIVILEGE_GRANTS[0].format(schema=schema.name, role=role))
    with pytest.raises(SchemaBehind, match="mcp-url-connect store migrate") as info:
        await PostgresStore.open(url, keyring)  # nothing there yet, and it may not create it
    assert password not in str(info.value)

    owner = await PostgresStore.open(schema.url, keyring)  # the schema's owner migrates
    await owner.close()
    for grant in LEAST_PRIVILEGE_GRANTS:
        postgres_server.psql(grant.format(schema=schema.name, role=role))
    clock = FakeClock()
    store = await PostgresStore.open(url, keyring, clock=clock)
    try:
        conn, elicitation = make_connection(), make_elicitation()
        await store.put_connection(conn)
        assert await store.get_connection(ALICE, "github") == conn
        await store.create_elicitation(elicitation, max_live_per_user=5)
        owner_token = await store.acquire_lock("refresh:x", 30)
        assert owner_token is not None and await store.release_lock("refresh:x", owner_token)
        state = make_state()
        await store.put_oauth_state(state)
        assert await store.take_oauth_state(state.state) == state
        clock.advance(3600)
        assert await store.purge_expired() >= 1  # the elicitation, by this role too
    finally:
        await store.close()


async def test_expired_rows_are_deleted_by_the_server_itself(
    schema: PostgresSchema, keyring: KeyRing
) -> None:
    clock = FakeClock()
    store = await PostgresStore.open(schema.url, keyring, clock=clock)
    try:
        await store.create_elicitation(make_elicitation(ttl=60), max_live_per_user=5)
        await store.put_oauth_state(make_state(ttl=60))
        await store.put_nonce("n-" + secrets.token_hex(8), ttl_seconds=60)
        clock.advance(120)
        await store.put_nonce("n-" + secrets.token_hex(8), ttl_seconds=600)  # a TTL write purges
        for table in ("elicitations", "oauth_states"):
            assert await sql(schema, f"SELECT 1 FROM {table}") == []  # noqa: S608
        assert len(await sql(schema, "SELECT 1 FROM nonces")) == 1  # the fresh one
    finally:
        await store.close()


@pytest.mark.parametrize("reason", ["password", "sslmode"])
async def test_a_failed_connection_is_store_unavailable_naming_no_credential(
    postgres_server: PostgresServer, keyring: KeyRing, reason: str
) -> None:
    secret = "pw-" + secrets.token_hex(8)
    url = postgres_server.url(password=secret)
    if reason == "sslmode":
        url = postgres_server.url() + "?sslmode=require"  # the private server has no TLS: refused
    with pytest.raises(StoreUnavailable) as info:
        await open_store(url, keyring)
    for value in (secret, postgres_server.password, "mcpuc_admin"):
        assert value not in str(info.value)


async def test_reads_survive_a_server_side_disconnect(
    store: PostgresStore, postgres_server: PostgresServer
) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    terminate_clients(postgres_server)  # as a restart or a failover would
    assert await store.get_connection(ALICE, "github") == conn
    await store.put_connection(conn)  # the pool has replaced its connections by now


def test_store_migrate_command_creates_the_schema(
    schema: PostgresSchema, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        "MCPUC_ENCRYPTION_KEYS": f"k1:{base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip('=')}",
        "MCPUC_REQUEST_STATE_KEYS": base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="),
        "MCPUC_STORE_URL": schema.url,
    }
    monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["store", "migrate"]) == 0
    assert capsys.readouterr().out == "store schema is up to date\n"
    rows = asyncio.run(sql(schema, f"SELECT version FROM {VERSION_TABLE}"))  # noqa: S608
    assert [tuple(r) for r in rows] == [(SCHEMA_VERSION,)]
    monkeypatch.setenv("MCPUC_STORE_URL", schema.url.replace(quote(schema.server.password), "wrong"))
    assert main(["store", "migrate"]) == 1
    assert "wrong" not in capsys.readouterr().err


@pytest.mark.parametrize("ci", ["", "true"])
def test_missing_postgresql_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(store_servers, "postgres_bin_dir", lambda: None)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected) as info:
        postgres_support.PostgresServer()
    assert "PostgreSQL (initdb)" in str(info.value)
    assert "apt install postgresql" in str(info.value) or ci
