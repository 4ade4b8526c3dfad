"""Completion bus, without a server: the one process's LocalBus delivers to its hub, a bus that
cannot publish says the store is unavailable, and which stored records count as finished. The
Redis, Cluster and PostgreSQL buses: tests/integration/service/mcp/completion/test_bus.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service.mcp.completion.bus import LocalBus, RedisBus, require_finished_in_store
from service.mcp.completion.hub import CompletionHub
from tests.support.completion import FakeSession, elicitation
from token_store import ElicitationStatus, StoreUnavailable


async def test_local_bus_delivers_to_the_hub() -> None:
    hub, session = CompletionHub(clock=lambda: 1.0), FakeSession()
    hub.register(elicitation(), session)
    bus = LocalBus(hub)
    async with bus.running():
        await bus.publish(elicitation())
    assert session.sent == ["e" * 43]


async def test_redis_bus_publish_failure_is_store_unavailable() -> None:
    bus = RedisBus("redis://127.0.0.1:1/0", "test-bus-down:", CompletionHub(clock=lambda: 1.0))
    with pytest.raises(StoreUnavailable):
        await bus.publish(elicitation())


def test_require_finished_in_store() -> None:
    live = elicitation()
    assert require_finished_in_store(None) is None
    assert require_finished_in_store(live) is None
    for status in (ElicitationStatus.COMPLETE, ElicitationStatus.FAILED):
        done = replace(live, status=status)
        assert require_finished_in_store(done) == done
