"""Single-flight refresh across replicas on PostgreSQL alone: one refresh through the database's
lock table (in one process: tests/unit/service/flow/test_lifecycle.py)."""

from __future__ import annotations

import base64
from collections.abc import Awaitable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import service.flow.lifecycle
from service.flow.lifecycle import TokenLifecycle
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from tests.support.lifecycle import CALLERS, provider, stale_connection
from tests.support.postgres import PostgresSchema, PostgresServer
from token_store import (
    Connection,
    KeyRing,
    TokenSet,
    open_store,
)


async def test_replicas_sharing_postgres_send_one_refresh(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas (two stores, two lifecycles) on one PostgreSQL database alone: the lock table
    lets one refresh through; the other replica's callers find the lock taken and read the result."""
    key = base64.urlsafe_b64encode(KeyRing.generate_key()).rstrip(b"=").decode()
    calls: list[str] = []
    landed, all_waiting = anyio.Event(), anyio.Event()
    refused: list[str] = []

    async def refresh(provider: ProviderConfig, tokens: TokenSet, **_: object) -> TokenSet:
        calls.append(tokens.refresh_token or "")
        await landed.wait()
        return TokenSet("new-access", refresh_token="new-refresh", expires_at=9e9)

    monkeypatch.setattr(service.flow.lifecycle, "refresh", refresh)
    with PostgresSchema(postgres_server) as schema:
        stores = [await open_store(schema.url, KeyRing.parse(f"k1:{key}")) for _ in range(2)]
        stale = stale_connection()
        await stores[0].put_connection(stale)
        for store in stores:
            acquire_lock = store.acquire_lock

            async def counting_acquire_lock(name: str, ttl: float, acquire: Any = acquire_lock) -> str | None:
                owner = await acquire(name, ttl)
                if owner is None and not name.endswith(":failed"):
                    refused.append(name)
                    if len(refused) >= 2 * CALLERS - 1:
                        all_waiting.set()  # every caller of both replicas but one found it taken
                return owner

            store.acquire_lock = counting_acquire_lock  # type: ignore[method-assign]
        results: list[Connection] = []
        try:
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tasks:
                    for store in stores:
                        lifecycle = TokenLifecycle(store, OutboundHttp(1.0), timeout_seconds=5)
                        for _ in range(CALLERS):
                            tasks.start_soon(
                                lambda lc=lifecycle: _append(results, lc.fresh(stale, provider()))
                            )
                    await all_waiting.wait()
                    landed.set()
        finally:
            for store in stores:
                await store.close()
    assert calls == ["old-refresh"]
    assert len(results) == 2 * CALLERS
    assert {r.tokens.access_token for r in results} == {"new-access"}


async def _append(results: list[Connection], pending: Awaitable[Connection]) -> None:
    results.append(await pending)
