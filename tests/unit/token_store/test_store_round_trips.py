"""What one connect flow costs the store: the separate calls vs the batched ones, on both backends.

A 2025-11-25 flow calls the store in this order: the tool call (no connection yet: create an
elicitation), /connect (check it, store the OAuth state, open it, is a refresh token held?),
/callback (take the state, the previous grant, store the connection, complete), the client's
retry (the connection). The batched flow reads no previous grant at /callback: the token response
had a refresh token, and `complete_elicitation` keeps a replaced connection's `connected_at`.
Counted: SQLite statements (`sqlite3.Connection.set_trace_callback`, BEGIN and COMMIT included)
and write transactions (each one an fsync); Redis round trips (socket writes; a MULTI/EXEC
pipeline is one). `pytest -s` prints the table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.store_contract import (
    SQLiteHarness,
)
from tests.support.store_flows import FLOWS, batched_calls
from token_store import KeyRing, Store
from token_store.backends.sqlite import SQLiteStore


@dataclass
class SQLiteCount:
    statements: int
    transactions: int  # autocommit writes and COMMITs


async def count_sqlite(store: SQLiteStore, flow: Callable[[Store], Awaitable[None]]) -> SQLiteCount:
    statements: list[str] = []
    store.trace(statements.append)
    try:
        await flow(store)
    finally:
        store.trace(None)
    # Not the reset, the flow's last call: delete_connection, a transaction of its own (it
    # remembers the deletion too).
    statements = statements[: max(i for i, sql in enumerate(statements) if sql.upper().startswith("BEGIN"))]
    in_transaction = False
    transactions = 0
    for sql in statements:
        verb = sql.split(None, 1)[0].upper()
        if verb == "BEGIN":
            in_transaction = True
        elif verb == "COMMIT":
            in_transaction, transactions = False, transactions + 1
        elif verb != "SELECT" and not in_transaction:
            transactions += 1
    return SQLiteCount(len(statements), transactions)


async def test_sqlite_flow_costs(tmp_path: Path, keyring: KeyRing) -> None:
    harness = SQLiteHarness(tmp_path / "store.sqlite3")
    store = await harness.open(keyring)
    assert isinstance(store, SQLiteStore)
    try:
        counts = {name: await count_sqlite(store, flow) for name, flow in FLOWS.items()}
    finally:
        await store.close()
    print(f"\nSQLite per flow (no purge due): {counts}")
    # 5 reads, 6 single-statement writes, each its own transaction.
    assert counts["separate"] == SQLiteCount(statements=11, transactions=6)
    # 4 reads, 4 writes: create (1 statement), open and complete (BEGIN, 2, COMMIT each), take (1).
    assert counts["batched"] == SQLiteCount(statements=13, transactions=4)


async def test_sqlite_purge_adds_its_statements_at_most_every_interval(
    tmp_path: Path, keyring: KeyRing
) -> None:
    harness = SQLiteHarness(tmp_path / "store.sqlite3")
    store = await harness.open(keyring)
    assert isinstance(store, SQLiteStore)
    try:
        harness.clock.advance(10)  # a purge is due: the flow's first TTL write runs it
        due = await count_sqlite(store, batched_calls)
        not_due = await count_sqlite(store, batched_calls)
    finally:
        await store.close()
    assert due == SQLiteCount(statements=13 + 2 + 5, transactions=4)  # BEGIN, COMMIT, 5 DELETEs
    assert not_due == SQLiteCount(statements=13, transactions=4)
