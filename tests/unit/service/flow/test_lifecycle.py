"""Single-flight refresh: in one process, one provider refresh for a storm of callers, the
waiters woken when it lands rather than at their next poll of the store, and the refresh token
sent once however slow the provider is (the lock outlives the holder's deadline); across replicas
on PostgreSQL alone, one refresh through the database's lock table."""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import service.flow.lifecycle
from service.errors import NeedsReauthorization, ProviderApiError
from service.flow.lifecycle import TokenLifecycle
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from tests.support.lifecycle import CALLERS, provider, stale_connection
from tests.support.store_contract import T0, FakeClock
from token_store import (
    Connection,
    ConnectionStatus,
    KeyRing,
    SQLiteStore,
    Store,
    TokenSet,
    open_store,
)

TEST_KEYS = "k1:" + base64.urlsafe_b64encode(KeyRing.generate_key()).rstrip(b"=").decode()


async def open_test_store(tmp_path: Path) -> Store:
    return await open_store(f"sqlite:///{tmp_path / 'store.sqlite3'}", KeyRing.parse(TEST_KEYS))


async def test_a_storm_in_one_process_sends_one_refresh_and_wakes_every_waiter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_test_store(tmp_path)
    stale = stale_connection()
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

    monkeypatch.setattr(service.flow.lifecycle, "refresh", refresh)
    # Waiters that only polled would sleep this long: the test would time out.
    monkeypatch.setattr(service.flow.lifecycle, "WAIT_INTERVAL", 60.0)
    lifecycle = TokenLifecycle(store, OutboundHttp(1.0), timeout_seconds=5)
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


async def test_a_refresh_taking_the_lock_while_the_last_one_releases_it_ends_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first holder's wake-up bookkeeping must not remove the next holder's (a KeyError at
    the end of the second refresh, an error for its caller)."""
    store = await open_test_store(tmp_path)
    stale = stale_connection()
    await store.put_connection(stale)
    second_refreshing = anyio.Event()
    refreshes: list[str] = []

    async def refresh(provider: ProviderConfig, tokens: TokenSet, **_: object) -> TokenSet:
        refreshes.append(tokens.access_token)
        if len(refreshes) == 2:
            second_refreshing.set()
        await anyio.lowlevel.checkpoint()
        return TokenSet(f"access-{len(refreshes)}", refresh_token=f"refresh-{len(refreshes)}", expires_at=9e9)

    monkeypatch.setattr(service.flow.lifecycle, "refresh", refresh)
    lifecycle = TokenLifecycle(store, OutboundHttp(1.0), timeout_seconds=5)
    release_lock = store.release_lock
    results: list[Connection] = []

    async def second() -> None:  # a 401 with the new token: a forced refresh
        latest = await store.get_connection(stale.key.user, "github", "1")
        assert latest is not None
        results.append(await lifecycle.fresh(latest, provider(), force=True))

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:

                async def first_release(name: str, owner: str) -> bool:
                    released = await release_lock(name, owner)
                    if not refreshes[1:]:
                        tasks.start_soon(second)
                        await second_refreshing.wait()  # the second holder is refreshing now
                    return released

                store.release_lock = first_release  # type: ignore[method-assign]
                results.append(await lifecycle.fresh(stale, provider()))
    finally:
        await store.close()
    assert refreshes == ["old-access", "access-1"]
    assert sorted(r.tokens.access_token for r in results) == ["access-1", "access-2"]


async def test_the_lock_outlives_the_holders_deadline_so_the_refresh_token_is_sent_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second caller arriving when the holder's call reaches its deadline (the store's clock
    advanced by `timeout_seconds`) finds the lock still held and waits for the holder's result;
    it never sends the refresh token the holder is sending."""
    clock = FakeClock(T0)
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", KeyRing.parse(TEST_KEYS), clock=clock)
    stale = stale_connection()
    await store.put_connection(stale)
    calls: list[str] = []
    in_flight, answer, second_tried = anyio.Event(), anyio.Event(), anyio.Event()
    acquire_lock = store.acquire_lock

    async def watched_acquire_lock(name: str, ttl: float) -> str | None:
        owner = await acquire_lock(name, ttl)
        if in_flight.is_set() and not name.endswith(":failed"):
            second_tried.set()
        return owner

    store.acquire_lock = watched_acquire_lock  # type: ignore[method-assign]

    async def refresh(provider: ProviderConfig, tokens: TokenSet, **_: object) -> TokenSet:
        calls.append(tokens.refresh_token or "")
        in_flight.set()
        await answer.wait()
        return TokenSet("new-access", refresh_token="new-refresh", expires_at=9e9)

    monkeypatch.setattr(service.flow.lifecycle, "refresh", refresh)
    monkeypatch.setattr(service.flow.lifecycle, "WAIT_INTERVAL", 0.01)
    # A timeout far beyond the test's own: only the store's (injected) clock moves.
    lifecycle = TokenLifecycle(store, OutboundHttp(1.0), timeout_seconds=60, clock=clock)
    results: list[Connection] = []

    async def caller() -> None:
        results.append(await lifecycle.fresh(stale, provider()))

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(caller)
                await in_flight.wait()
                clock.advance(60)  # the holder's call is at its deadline
                tasks.start_soon(caller)
                await second_tried.wait()
                await anyio.sleep(0.05)  # a few of the waiter's polls
                answer.set()
    finally:
        await store.close()
    assert calls == ["old-refresh"]
    assert [r.tokens.access_token for r in results] == ["new-access", "new-access"]


async def test_a_refresh_the_provider_never_answers_is_abandoned_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However the HTTP client behaves, the holder gives up at its deadline (well before its lock
    expires); the waiter shares the failure instead of sending the refresh token again."""
    store = await open_test_store(tmp_path)
    stale = stale_connection()
    await store.put_connection(stale)
    calls: list[str] = []

    async def refresh(provider: ProviderConfig, tokens: TokenSet, **_: object) -> TokenSet:
        calls.append(tokens.refresh_token or "")
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    monkeypatch.setattr(service.flow.lifecycle, "refresh", refresh)
    lifecycle = TokenLifecycle(store, OutboundHttp(1.0), timeout_seconds=0.2)
    failures: list[str] = []

    async def caller() -> None:
        with pytest.raises(ProviderApiError) as failed:
            await lifecycle.fresh(stale, provider())
        failures.append(str(failed.value))

    try:
        with anyio.fail_after(4):  # the lock (5.2 s) would outlast this: only the deadline ends it
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(caller)
                tasks.start_soon(caller)
    finally:
        await store.close()
    assert calls == ["old-refresh"]
    assert len(failures) == 2


@pytest.mark.parametrize("force", [False, True])
async def test_a_grant_of_another_authorization_server_is_never_refreshed_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool
) -> None:
    """A remote MCP server moved to another authorization server (docs/gateway.md): the grant the
    old one issued is marked for reauthorization, and its refresh token never reaches the new one."""
    store = await open_test_store(tmp_path)
    stale = stale_connection()
    old_grant = replace(stale, tokens=replace(stale.tokens, issuer="https://old-as.example"))
    await store.put_connection(old_grant)
    sent: list[str] = []

    async def refresh(provider: ProviderConfig, tokens: TokenSet, **_: object) -> TokenSet:
        sent.append(tokens.refresh_token or "")
        return TokenSet("new-access", refresh_token="new-refresh", expires_at=9e9)

    monkeypatch.setattr(service.flow.lifecycle, "refresh", refresh)
    moved = provider().model_copy(update={"issuer": "https://new-as.example"})
    lifecycle = TokenLifecycle(store, OutboundHttp(1.0), timeout_seconds=5)
    with pytest.raises(NeedsReauthorization):
        await lifecycle.fresh(old_grant, moved, force=force)
    assert sent == []
    marked = await store.get_connection(old_grant.key.user, old_grant.key.provider, old_grant.key.account)
    assert marked is not None and marked.status is ConnectionStatus.NEEDS_REAUTHORIZATION
    # The grant of the provider's own server is refreshed as before.
    current = replace(stale, tokens=replace(stale.tokens, issuer="https://new-as.example"))
    await store.put_connection(current)
    refreshed = await lifecycle.fresh(current, moved, force=True)
    assert sent == ["old-refresh"] and refreshed.tokens.access_token == "new-access"
    await store.close()
