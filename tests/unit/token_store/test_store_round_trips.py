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
from dataclasses import dataclass, replace
from pathlib import Path

from tests.support.store_contract import (
    ALICE,
    SQLiteHarness,
    make_connection,
    make_elicitation,
    make_state,
)
from token_store import ElicitationStatus, KeyRing, Store
from token_store.sqlite import SQLiteStore

PENDING, OPENED, COMPLETE = ElicitationStatus.PENDING, ElicitationStatus.OPENED, ElicitationStatus.COMPLETE


async def separate_calls(store: Store) -> None:
    """The flow as the callers make it with the original methods."""
    e, conn = make_elicitation(), make_connection()
    state = replace(make_state(), elicitation=e)
    assert await store.get_connection(ALICE, "github") is None
    await store.create_elicitation(e, max_live_per_user=5)
    assert await store.get_elicitation(e.id) == e
    await store.put_oauth_state(state)
    assert await store.transition_elicitation(e.id, PENDING, OPENED) is not None
    assert await store.get_connection(ALICE, "github") is None
    assert await store.take_oauth_state(state.state) == state
    assert await store.get_connection(ALICE, "github", "1") is None
    await store.put_connection(conn)
    assert await store.transition_elicitation(e.id, OPENED, COMPLETE) is not None
    assert await store.get_connection(ALICE, "github") == conn
    await store.delete_connection(conn.key)  # not part of the flow: reset for the next run


async def batched_calls(store: Store) -> None:
    """The same flow with get_elicitation_with_connection, open_elicitation, complete_elicitation,
    and no read of the previous grant (the token set has a refresh token)."""
    e, conn = make_elicitation(), make_connection()
    assert conn.tokens.refresh_token
    state = replace(make_state(), elicitation=e)
    assert await store.get_connection(ALICE, "github") is None
    await store.create_elicitation(e, max_live_per_user=5)
    assert await store.get_elicitation_with_connection(e.id) == (e, None)
    assert await store.open_elicitation(state) is not None
    assert await store.take_oauth_state(state.state) == state
    assert await store.complete_elicitation(conn, e.id) is not None
    assert await store.get_connection(ALICE, "github") == conn
    await store.delete_connection(conn.key)


FLOWS: dict[str, Callable[[Store], Awaitable[None]]] = {"separate": separate_calls, "batched": batched_calls}


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
    statements = statements[:-1]  # the reset
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
    assert due == SQLiteCount(statements=13 + 2 + 4, transactions=4)  # BEGIN, COMMIT, 4 DELETEs
    assert not_due == SQLiteCount(statements=13, transactions=4)
