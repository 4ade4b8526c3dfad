"""`mcp-url-connect store copy-from` never undoes a deletion (token_store/store_copy.py), run as an
operator runs a migration, against real servers: a single Redis primary to Redis Cluster, and
SQLite to PostgreSQL (the kit's servers, tests/conftest.py).

Between the first copy and the second, users disconnect and an operator revokes on the new store
(`connections revoke --user`, the incident switch `--provider P --all`), and a replica still on the
old store disconnects one user and connects another. The second copy brings none of the deleted
connections back, carries the old store's disconnect over, and copies everyone else's connection
intact: a refresh, a reconnect and a connection made on the old store meanwhile included.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import pytest

from service.flow.disconnect import disconnect_all, disconnect_one
from service.ops.cli import main
from service.providers.outbound_http import OutboundHttp
from service.settings import load_settings
from tests.needs import ClusterGroup, free_port, redis_prefix
from tests.support.postgres import PostgresSchema, PostgresServer
from tests.support.store_contract import REDIS_URL, make_connection, make_tokens
from token_store import (
    ClientRegistration,
    CopyWindowClosed,
    KeyRing,
    Store,
    UserRef,
    copy_endpoints,
    copy_store,
    open_store,
)
from token_store.store_copy import COPY_WINDOW

ISSUER = "https://as.example.com"
KEY = KeyRing.generate_key()


@dataclass
class Migration:
    old_url: str
    new_url: str
    prefix: str
    config: Path


def user(sub: str) -> UserRef:
    return UserRef(ISSUER, sub)


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replicas' settings, which every command below reads (the store URL comes per test)."""
    monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
    for name, value in {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": ISSUER,
        "MCPUC_LOGIN_CLIENT_ID": "login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        "MCPUC_ENCRYPTION_KEYS": f"k1:{base64.urlsafe_b64encode(KEY).decode()}",
        "MCPUC_REQUEST_STATE_KEYS": base64.urlsafe_b64encode(KeyRing.generate_key()).decode(),
        "MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": "hub-secret",
        "MCPUC_PROVIDER_MOCKSLACK_CLIENT_SECRET": "slack-secret",
    }.items():
        monkeypatch.setenv(name, value)


def providers_file(tmp_path: Path) -> Path:
    """Two OAuth providers: MockHub's revocation endpoint answers nobody (a closed loopback port),
    and MockSlack has none, as GitHub: its grants stay live at the provider, and only the local
    deletion stands between a revoked grant and its use."""
    closed = f"http://127.0.0.1:{free_port()}"
    text = "".join(
        f"""
[providers.{name}]
display_name = "{name}"
authorize_url = "{closed}/{name}/authorize"
token_url = "{closed}/{name}/token"
userinfo_url = "{closed}/{name}/user"
client_id = "mcp-url-connect"
scopes = ["read"]
account_field = "id"
insecure_http = true
{revocation}"""
        for name, revocation in (
            ("mockhub", f'revocation_url = "{closed}/mockhub/revoke"\n'),
            ("mockslack", ""),
        )
    )
    path = tmp_path / "providers.toml"
    path.write_text(text)
    return path


@pytest.fixture
def redis_to_cluster(
    cluster_group: ClusterGroup, tmp_path: Path, environ: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Migration]:
    with redis_prefix() as prefix:  # the single primary's keys under it go afterwards
        monkeypatch.setenv("MCPUC_REDIS_PREFIX", prefix)
        try:
            yield Migration(REDIS_URL, cluster_group.url(), prefix, providers_file(tmp_path))
        finally:
            raw = cluster_group.client()
            try:
                for key in list(raw.scan_iter(match=prefix + "*", count=500)):
                    raw.unlink(key)
            finally:
                raw.close()


@pytest.fixture
def sqlite_to_postgres(postgres_server: PostgresServer, tmp_path: Path, environ: None) -> Iterator[Migration]:
    with PostgresSchema(postgres_server) as schema:
        yield Migration(f"sqlite:///{tmp_path}/old.sqlite3", schema.url, "mcpuc:", providers_file(tmp_path))


async def open_at(migration: Migration, url: str) -> Store:
    return await open_store(url, KeyRing([("k1", KEY)]), prefix=migration.prefix)


async def command(migration: Migration, *argv: str) -> int:
    """`mcp-url-connect ARGV` with the replicas' settings, on the new store (it runs its own event
    loop: in a thread)."""
    return await anyio.to_thread.run_sync(main, [*argv, "--config", str(migration.config)])


async def migrate_with_deletions_between_the_copies(
    migration: Migration, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPUC_STORE_URL", migration.new_url)
    monkeypatch.setenv("MCPUC_OLD_STORE_URL", migration.old_url)
    providers = load_settings(config_file=migration.config).providers
    outbound = OutboundHttp(2.0)
    conns = {
        sub: make_connection(user(sub), provider, account)
        for sub, provider, account in [
            ("alice", "mockhub", "1"),  # disconnects one account, on the new store
            ("amy", "mockhub", "2"),  # disconnects everything at MockHub, on the new store
            ("bob", "mockhub", "3"),  # an operator revokes the user
            ("carol", "mockslack", "4"),  # an operator revokes every connection at MockSlack
            ("dave", "mockhub", "5"),  # disconnects on a replica still on the old store
            ("erin", "mockhub", "6"),  # refreshed on the new store
            ("frank", "mockhub", "7"),  # disconnects, then connects again, on the new store
        ]
    }
    amy_other = make_connection(user("amy"), "mockhub", "8")
    old = await open_at(migration, migration.old_url)
    try:
        for conn in [*conns.values(), amy_other]:
            await old.put_connection(conn)

        assert await command(migration, "store", "copy-from") == 0

        new = await open_at(migration, migration.new_url)
        try:
            assert {c.key for c in await new.find_connections()} == {
                c.key for c in [*conns.values(), amy_other]
            }
            # Between the copies: what users and operators do on the new store ...
            assert await disconnect_one(new, providers["mockhub"], conns["alice"].key, outbound) is not None
            assert len(await disconnect_all(new, providers["mockhub"], user("amy"), outbound)) == 2
            assert await command(migration, "connections", "revoke", "--user", "bob") == 0
            revoke_all = ("connections", "revoke", "--provider", "mockslack", "--all", "--rate", "100")
            assert await command(migration, *revoke_all) == 0
            refreshed = replace(conns["erin"], tokens=make_tokens(), updated_at=time.time())
            assert await new.replace_connection(refreshed, conns["erin"].updated_at)
            assert await disconnect_one(new, None, conns["frank"].key, outbound) is not None
            reconnected = replace(
                conns["frank"], tokens=make_tokens(), connected_at=time.time(), updated_at=time.time()
            )
            await new.put_connection(reconnected)
            # ... and what a replica still on the old store does.
            assert await disconnect_one(old, providers["mockhub"], conns["dave"].key, outbound) is not None
            late = make_connection(user("gina"), "mockslack", "9")
            await old.put_connection(late)

            assert await command(migration, "store", "copy-from") == 0
            assert await command(migration, "store", "copy-from") == 0  # again: nothing changes

            found = await new.find_connections()
            held = {c.key.user.sub: c for c in found}
            # Nothing deleted came back; the old store's disconnect was carried over; everyone
            # else's connection is there and opens, as the new store (or the old, for gina) last had it.
            assert held == {"erin": refreshed, "frank": reconnected, "gina": late}
            assert len(found) == len(held)
        finally:
            await new.close()
    finally:
        await old.close()


async def test_a_second_copy_from_redis_to_cluster_brings_back_no_deletion(
    redis_to_cluster: Migration, monkeypatch: pytest.MonkeyPatch
) -> None:
    await migrate_with_deletions_between_the_copies(redis_to_cluster, monkeypatch)


async def test_a_second_copy_from_sqlite_to_postgres_brings_back_no_deletion(
    sqlite_to_postgres: Migration, monkeypatch: pytest.MonkeyPatch
) -> None:
    await migrate_with_deletions_between_the_copies(sqlite_to_postgres, monkeypatch)


async def test_a_copy_after_the_window_closed_is_refused(sqlite_to_postgres: Migration) -> None:
    """Deletions are remembered COPY_WINDOW: a copy later than that after the first could bring
    back one made early in the window, so it is refused, and changes nothing."""
    old = await open_at(sqlite_to_postgres, sqlite_to_postgres.old_url)
    new = await open_at(sqlite_to_postgres, sqlite_to_postgres.new_url)
    try:
        conn = make_connection(user("hana"), "mockhub", "1")
        await old.put_connection(conn)
        source, target = copy_endpoints(old, new)
        first = time.time()
        await copy_store(source, target, now=first)
        assert await new.delete_connection(conn.key)
        with pytest.raises(CopyWindowClosed, match="copy window"):
            await copy_store(source, target, now=first + COPY_WINDOW + 1)
        assert await new.find_connections() == []
        # A new window, for a store that served until now (the runbook's rule), copies again.
        await copy_store(source, target, now=first + COPY_WINDOW + 1, new_window=True)
    finally:
        await old.close()
        await new.close()


async def test_client_registrations_move_with_the_connections(sqlite_to_postgres: Migration) -> None:
    """A refresh token is bound to the client that obtained it: the dynamic registrations move too,
    and a registration the target made itself meanwhile is kept."""
    old = await open_at(sqlite_to_postgres, sqlite_to_postgres.old_url)
    new = await open_at(sqlite_to_postgres, sqlite_to_postgres.new_url)
    try:
        moved = ClientRegistration(
            "https://as.example", "https://mcp.example/callback/a", "old-a", "s", "client_secret_basic", 1.0
        )
        theirs = ClientRegistration(
            "https://as.example", "https://mcp.example/callback/b", "old-b", "s", "client_secret_basic", 1.0
        )
        kept = ClientRegistration(
            "https://as.example", "https://mcp.example/callback/b", "new-b", None, "none", 2.0
        )
        for registration in (moved, theirs):
            await old.add_client_registration(registration)
        await new.add_client_registration(kept)
        source, target = copy_endpoints(old, new)
        report = await copy_store(source, target, now=time.time())
        assert report.client_registrations == 2
        assert await new.get_client_registration(moved.issuer, moved.redirect_uri) == moved
        assert await new.get_client_registration(kept.issuer, kept.redirect_uri) == kept
    finally:
        await old.close()
        await new.close()
