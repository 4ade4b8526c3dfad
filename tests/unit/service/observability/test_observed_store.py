"""service/observability/observed_store.py: one store object from the start, an outage until the
backend is open, and every failed operation counted by name."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from service.observability.metrics import Metrics
from service.observability.observed_store import ObservedStore
from token_store import KeyRing, SQLiteStore, Store, StoreUnavailable, UserRef

ALICE = UserRef("https://as.example", "alice")


def keyring() -> KeyRing:
    return KeyRing.parse("k1:" + base64.urlsafe_b64encode(b"K" * 32).decode().rstrip("="))


def errors_counted(metrics: Metrics, operation: str) -> float:
    return metrics.registry.get_sample_value("mcpuc_store_errors_total", {"operation": operation}) or 0.0


async def test_before_the_backend_is_open_every_operation_is_an_outage(tmp_path: Path) -> None:
    metrics = Metrics()
    store: Store = ObservedStore(metrics)  # typed as the protocol: mypy checks every method
    with pytest.raises(StoreUnavailable, match="not open yet"):
        await store.list_connections(ALICE)
    await store.close()  # nothing to close yet
    assert errors_counted(metrics, "list_connections") == 0  # no operation ran


async def test_operations_reach_the_backend_and_failures_are_counted(tmp_path: Path) -> None:
    metrics = Metrics()
    store = ObservedStore(metrics)
    backend = await SQLiteStore.open(tmp_path / "store.sqlite3", keyring())
    store.attach(backend)
    assert store.is_open and store.backend is backend
    assert await store.list_connections(ALICE) == []
    await backend.close()
    with pytest.raises(StoreUnavailable):
        await store.list_connections(ALICE)
    assert errors_counted(metrics, "list_connections") == 1
