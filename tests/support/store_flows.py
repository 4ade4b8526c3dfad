"""One connect flow's store calls, made as separate calls or batched, for counting what each
costs (SQLite: tests/unit/token_store/test_store_round_trips.py; Redis:
tests/integration/token_store/backends/redis/test_store_round_trips.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from tests.support.store_contract import (
    ALICE,
    make_connection,
    make_elicitation,
    make_state,
)
from token_store import ElicitationStatus, Store

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
