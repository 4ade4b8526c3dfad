"""Redis round trips of one connect flow, separate calls vs batched ones, against the shared Redis
(the flows, and the SQLite counts: tests/unit/token_store/test_store_round_trips.py). `pytest -s`
prints the counts."""

from __future__ import annotations

import pytest

from tests.support.store_contract import (
    REDIS_URL,
    RedisHarness,
    record_wire,
    redis_prefix,
)
from tests.support.store_flows import FLOWS
from token_store import KeyRing


@pytest.mark.parametrize("name", FLOWS)
async def test_redis_flow_round_trips(monkeypatch: pytest.MonkeyPatch, keyring: KeyRing, name: str) -> None:
    with redis_prefix() as prefix:
        harness = RedisHarness(REDIS_URL, prefix)
        store = await harness.open(keyring)
        try:
            await FLOWS[name](store)  # warm the pool and the script cache
            wire = record_wire(monkeypatch)
            await FLOWS[name](store)
        finally:
            await store.close()
            harness.cleanup()
    trips = len(wire.writes) - 1  # the reset
    print(f"\nRedis per flow ({name}): {trips} round trips: {wire.commands()[:-1]}")
    assert trips == {"separate": 11, "batched": 7}[name]
