"""The keep-alive sweep end to end: two replicas sweep the same Redis at once, each due grant is
refreshed exactly once at MockHub, a grant the provider refuses becomes needs_reauthorization and
its webhook reaches a real receiver, and a grant that is not due is left as it was.

The sweeping replicas are two runtimes in the test's own loop; the stack's two servers send the
webhooks. Grants are made due by writing them back as connected `2 * KEEPALIVE` seconds ago."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import anyio
import pytest

from mock_providers.testing.replicas import LifecycleStack, connect
from service.runtime import Runtime
from tests.support.lifecycle import running
from tests.support.settle import wait_until
from tests.support.webhook_receiver import Receiver
from token_store import Connection, ConnectionStatus, Store, UserRef

pytestmark = pytest.mark.e2e

KEEPALIVE = 1000  # seconds


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[LifecycleStack]:
    overrides = {"webhook_url": receiver.url, "webhook_secret": receiver.secret}
    yield from running(LifecycleStack(tmp_path_factory.mktemp("keepalive"), settings_overrides=overrides))


async def age(store: Store, user: UserRef, seconds: float) -> Connection:
    """Rewrite the user's connection as connected `seconds` ago and never refreshed."""
    current = await store.get_connection(user, "mockhub")
    assert current is not None
    aged = replace(
        current, connected_at=current.connected_at - seconds, refreshed_at=None, updated_at=time.time()
    )
    assert await store.replace_connection(aged, expected_updated_at=current.updated_at)
    return aged


def sweeping_replica(stack: LifecycleStack) -> Runtime:
    hub = stack.settings.providers["mockhub"].model_copy(
        update={"refresh_keepalive": KEEPALIVE, "keepalive_rate": 50.0}
    )
    settings = stack.settings.replace(providers={**stack.settings.providers, "mockhub": hub})
    runtime = Runtime(settings)
    runtime.run_sweeps = False  # swept by the test, at once on both
    return runtime


async def test_two_replicas_sweeping_refresh_each_due_grant_once(
    stack: LifecycleStack, store: Store, receiver: Receiver
) -> None:
    hub = stack.mockhub
    due = [f"keepalive-{i}" for i in range(4)]
    fresh, dying = "keepalive-fresh", "keepalive-dying"
    for i, user in enumerate([*due, fresh, dying]):
        await connect(stack.instances[i % 2], user, login=f"{user}-login")
    before = {u: await age(store, stack.user(u), 2 * KEEPALIVE) for u in due}
    await age(store, stack.user(dying), 2 * KEEPALIVE)
    kept = await age(store, stack.user(fresh), KEEPALIVE / 2)  # not due yet
    hub.revoke_grant(f"{dying}-login")
    mark, reuse = len(hub.token_requests), hub.reuse_detections

    first, second = sweeping_replica(stack), sweeping_replica(stack)
    async with first.running(), second.running():
        reports = []

        async def sweep(runtime: Runtime) -> None:
            reports.append(await runtime.keepalive.sweep_once())

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(sweep, first)
            tasks.start_soon(sweep, second)
        again = await first.keepalive.sweep_once()

    refreshes = [r for r in hub.token_requests[mark:] if r.grant_type == "refresh_token"]
    assert len(hub.token_requests[mark:]) == len(refreshes)
    assert sum(r.ok for r in refreshes) == len(due)  # one refresh per due grant, whoever swept it
    assert [r.error for r in refreshes if not r.ok] == ["invalid_grant"]  # the dying grant, once
    assert hub.reuse_detections == reuse
    for report in reports:
        assert report.due["mockhub"] >= len(due)
    assert again.due.get("mockhub", 0) == 0  # nothing due any more
    for user in due:
        after = await store.get_connection(stack.user(user), "mockhub")
        previous = before[user]
        assert after is not None
        assert after.tokens.refresh_token != previous.tokens.refresh_token and after.refreshed_at
    untouched = await store.get_connection(stack.user(fresh), "mockhub")
    assert untouched is not None and untouched.tokens == kept.tokens
    dead = await store.get_connection(stack.user(dying), "mockhub")
    assert dead is not None and dead.status is ConnectionStatus.NEEDS_REAUTHORIZATION
    await wait_until(
        lambda: bool(receiver.of("connection.needs_reauthorization", dying)), "the dying grant's webhook"
    )
    assert len(receiver.of("connection.needs_reauthorization", dying)) == 1
    assert first.metrics.keepalive.labels(provider="mockhub", outcome="ok")._value.get() >= 1
