"""Single-flight refresh in one process: one provider refresh for a storm of callers, and the
waiters are woken when it lands rather than at their next poll of the store."""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import pytest

import service.lifecycle
from service.lifecycle import TokenLifecycle
from service.outbound_http import OutboundHttp
from service.providers import ProviderConfig, build_provider
from token_store import Connection, ConnectionKey, KeyRing, Store, TokenSet, UserRef, open_store

CALLERS = 20


def provider() -> ProviderConfig:
    return build_provider(
        "github", {"preset": "github", "client_id": "c"}, {"MCPUC_PROVIDER_GITHUB_CLIENT_SECRET": "s"}
    )


async def test_a_storm_in_one_process_sends_one_refresh_and_wakes_every_waiter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = base64.urlsafe_b64encode(KeyRing.generate_key()).rstrip(b"=").decode()
    store: Store = await open_store(f"sqlite:///{tmp_path / 'store.sqlite3'}", KeyRing.parse(f"k1:{key}"))
    stale = Connection(
        ConnectionKey(UserRef("https://as", "alice"), "github", "1"),
        TokenSet("old-access", refresh_token="old-refresh", expires_at=1.0),
        "octocat",
        1.0,
        1.0,
    )
    await store.put_connection(stale)
    calls: list[str] = []
    landed, all_waiting = anyio.Event(), anyio.Event()
    refused: list[str] = []
    acquire_lock = store.acquire_lock

    async def counting_acquire_lock(name: str, ttl: float) -> str | None:
        owner = await acquire_lock(name, ttl)
        if owner is None and not name.endswith(":failed"):
            refused.append(name)
            if len(refused) == CALLERS - 1:
                all_waiting.set()  # every caller but the refresher found the lock taken
        return owner

    store.acquire_lock = counting_acquire_lock  # type: ignore[method-assign]

    async def refresh(provider: ProviderConfig, tokens: TokenSet, **_: object) -> TokenSet:
        calls.append(tokens.refresh_token or "")
        await landed.wait()
        return TokenSet("new-access", refresh_token="new-refresh", expires_at=9e9)

    monkeypatch.setattr(service.lifecycle, "refresh", refresh)
    # Waiters that only polled would sleep this long: the test would time out.
    monkeypatch.setattr(service.lifecycle, "WAIT_INTERVAL", 60.0)
    lifecycle = TokenLifecycle(lambda: store, OutboundHttp(1.0), timeout_seconds=5)
    results: list[Connection] = []

    async def caller() -> None:
        results.append(await lifecycle.fresh(stale, provider()))

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                for _ in range(CALLERS):
                    tasks.start_soon(caller)
                await all_waiting.wait()
                landed.set()
    finally:
        await store.close()
    assert calls == ["old-refresh"]
    assert len(results) == CALLERS
    assert {r.tokens.access_token for r in results} == {"new-access"}
