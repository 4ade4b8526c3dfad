"""Completion bus: a completed flow reaches the hub of every replica (Redis pub/sub) or of the one
process (LocalBus); a malformed message is skipped, not fatal."""

from __future__ import annotations

import secrets

import anyio
import pytest
import redis.asyncio as redis

from service.completion import CompletionHub
from service.completion_bus import LocalBus, RedisBus
from tests.support.completion import FakeSession, elicitation
from token_store import StoreUnavailable

REDIS_URL = "redis://127.0.0.1:6379/0"


class WakingSession(FakeSession):
    def __init__(self) -> None:
        super().__init__()
        self.notified = anyio.Event()

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        await super().send_elicit_complete(elicitation_id)
        self.notified.set()


async def test_local_bus_delivers_to_the_hub() -> None:
    hub, session = CompletionHub(clock=lambda: 1.0), FakeSession()
    hub.register(elicitation(), session)
    bus = LocalBus(hub)
    async with bus.running():
        await bus.publish(elicitation())
    assert session.sent == ["e" * 43]


async def test_redis_bus_delivers_to_the_replica_that_holds_the_session() -> None:
    prefix = f"test-bus-{secrets.token_hex(6)}:"
    holder_hub, session = CompletionHub(clock=lambda: 1.0), WakingSession()
    holder_hub.register(elicitation(), session)
    holder = RedisBus(REDIS_URL, prefix, holder_hub)
    other = RedisBus(REDIS_URL, prefix, CompletionHub(clock=lambda: 1.0))
    async with holder.running(), other.running():
        with anyio.fail_after(5):
            await holder.subscribed.wait()
            await other.subscribed.wait()
        raw = redis.from_url(REDIS_URL)
        await raw.publish(f"{prefix}completions", b"not json")  # skipped, the listener goes on
        await raw.aclose()
        await other.publish(elicitation())  # published by the replica that got the callback
        with anyio.fail_after(5):
            await session.notified.wait()
    assert session.sent == ["e" * 43]


async def test_redis_bus_publish_failure_is_store_unavailable() -> None:
    bus = RedisBus("redis://127.0.0.1:1/0", "test-bus-down:", CompletionHub(clock=lambda: 1.0))
    with pytest.raises(StoreUnavailable):
        await bus.publish(elicitation())
