"""service/flow/connections.py: the user's connections by id or label, and the default account that
the broker and the connections page both remember through `Connections.remember_default`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mock_providers.demo import build_demo
from service.errors import InvalidRequest
from service.flow.connections import Connections
from tests.support.store_contract import FakeClock
from token_store import Connection, ConnectionKey, KeyRing, SQLiteStore, TokenSet, UserRef

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
ALICE = UserRef("https://as.example", "alice")
BOB = UserRef("https://as.example", "bob")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    settings = build_demo("127.0.0.1", 9500, 9501, tmp_path).settings
    opened = await SQLiteStore.open(
        tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys), clock=FakeClock()
    )
    try:
        yield opened
    finally:
        await opened.close()


async def put(store: SQLiteStore, user: UserRef, account: str, label: str, at: float) -> Connection:
    connection = Connection(ConnectionKey(user, "mockhub", account), TokenSet("t"), label, at, at)
    await store.put_connection(connection)
    return connection


async def test_a_named_account_is_found_by_id_then_by_its_newest_label(store: SQLiteStore) -> None:
    connections = Connections(store)
    first = await put(store, ALICE, "1", "work", 10.0)
    second = await put(store, ALICE, "2", "work", 20.0)
    await put(store, BOB, "3", "bob", 30.0)
    assert (await connections.named(ALICE, "mockhub", "1")) == first
    assert (await connections.named(ALICE, "mockhub", "work")) == second
    assert await connections.named(ALICE, "mockhub", "bob") is None  # Bob's label names nothing of Alice's
    assert await connections.named(ALICE, "mockhub", "3") is None
    newest = await connections.newest(ALICE, "mockhub")
    assert newest is not None and newest.key.account == "2"


async def test_the_default_is_remembered_and_forgotten_per_user(store: SQLiteStore) -> None:
    connections = Connections(store)
    chosen = await put(store, ALICE, "1", "alice", 10.0)
    await put(store, BOB, "2", "bob", 10.0)
    await connections.remember_default(ALICE, "mockhub", chosen)
    assert await connections.default_accounts(ALICE, ["mockhub", "mockhub"]) == {"mockhub": "1"}
    assert await connections.default_account(BOB, "mockhub") is None
    await connections.remember_default(ALICE, "mockhub", None)
    assert await connections.default_account(ALICE, "mockhub") is None


async def test_only_the_users_own_account_can_be_chosen(store: SQLiteStore) -> None:
    connections = Connections(store)
    mine = await put(store, ALICE, "1", "alice", 10.0)
    await put(store, BOB, "2", "bob", 10.0)
    assert await connections.own_account(ALICE, "mockhub", "1") == mine
    with pytest.raises(InvalidRequest):
        await connections.own_account(ALICE, "mockhub", "2")
    with pytest.raises(InvalidRequest):
        await connections.own_account(ALICE, "github", "1")


def test_the_default_account_is_read_and_written_only_here() -> None:
    """One owner: outside the store itself (and its observed face, which forwards every operation),
    only service/flow/connections.py touches the default."""
    store = ROOT / "service/observability/observed_store.py"
    production = [*(p for p in ROOT.glob("service/**/*.py") if p != store), *ROOT.glob("connect_routes/*.py")]
    users = sorted(
        str(p.relative_to(ROOT))
        for p in production
        if re.search(r"\b(get|set)_default_account\(", p.read_text())
    )
    assert users == ["service/flow/connections.py"]
