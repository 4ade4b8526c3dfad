"""service/observability/webhooks.py: events go through the store's outbox to a receiver that verifies them
with
the Standard Webhooks library (tests/support/webhook_receiver.py, in process); refused deliveries
come again with the same id after a backoff; a replica that dies holding a message loses nothing;
a message is never sent with less of its lease left than an attempt may take (two replicas
against a slow receiver: tests/integration/service/observability/test_webhooks.py). The clock is
moved, never slept on (real time plus an offset: the receiver checks timestamps)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.observability.metrics import Metrics
from service.observability.webhooks import (
    CREATED,
    DELETED,
    LEASE_MARGIN_SECONDS,
    MAX_ATTEMPTS,
    ConnectionEvents,
    WebhookSender,
    retry_delay,
    signing_key,
)
from tests.support.clock import MovableClock
from tests.support.webhook_receiver import Receiver, new_secret
from token_store import ConnectionKey, ConnectionStatus, KeyRing, SQLiteStore, Store, UserRef, WebhookMessage

URL = "http://127.0.0.1:9/hooks"  # never dialled: the transport is the receiver app itself
KEY = ConnectionKey(UserRef("https://as.example", "alice"), "mockhub", "42")
TIMEOUT = 5.0  # the sender's timeout per attempt


def sender_for(
    store: Store, receiver: Receiver, clock: MovableClock, secret: str | None = None
) -> WebhookSender:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=receiver.app()))
    return WebhookSender(
        store,
        http,
        URL,
        secret or receiver.secret,
        timeout_seconds=TIMEOUT,
        metrics=Metrics(),
        clock=clock,
    )


async def emit(
    store: Store, clock: MovableClock, event: str = CREATED, key: ConnectionKey = KEY, **extra: str
) -> None:
    events = ConnectionEvents(store, enabled=True, clock=clock)
    await events.emit(event, key, account_label="octocat", status=ConnectionStatus.OK, **extra)


async def test_a_webhook_is_signed_verifiable_and_names_no_secret(store: Store) -> None:
    clock, receiver = MovableClock(), Receiver()
    await emit(store, clock)
    await emit(store, clock, DELETED, reason="operator")
    sender = sender_for(store, receiver, clock)
    assert await sender.send_due() == 2
    created, deleted = receiver.accepted
    assert created["type"] == CREATED and deleted["data"]["reason"] == "operator"
    assert created["data"] == {
        "iss": KEY.user.iss,
        "sub": "alice",
        "provider": "mockhub",
        "account": "42",
        "account_label": "octocat",
        "status": "ok",
    }
    assert set(created) == {"type", "timestamp", "data"}
    assert receiver.refused == 0
    assert await sender.send_due() == 0  # delivered messages leave the outbox


async def test_a_wrong_signature_is_refused_by_the_receiver(store: Store) -> None:
    clock, receiver = MovableClock(), Receiver()
    await emit(store, clock)
    assert await sender_for(store, receiver, clock, secret=new_secret()).send_due() == 0
    assert (receiver.refused, receiver.accepted) == (1, [])


async def test_a_refused_delivery_comes_again_with_the_same_id_after_a_backoff(store: Store) -> None:
    clock, receiver = MovableClock(), Receiver(fail_next=2)
    await emit(store, clock)
    sender = sender_for(store, receiver, clock)
    assert await sender.send_due() == 0  # 500
    assert await sender.send_due() == 0  # not due yet: nothing sent
    assert receiver.fail_next == 1
    clock.advance(retry_delay(1))
    assert await sender.send_due() == 0  # 500 again
    clock.advance(retry_delay(2) - 1)
    assert await sender.send_due() == 0 and receiver.fail_next == 0  # still backing off
    clock.advance(1)
    assert await sender.send_due() == 1
    assert len(receiver.ids) == 1 and receiver.accepted[0]["type"] == CREATED
    assert [retry_delay(n) for n in (1, 2, 3)] == [5.0, 10.0, 20.0] and retry_delay(40) == 3600.0


async def test_a_message_is_given_up_after_max_attempts(store: Store) -> None:
    clock, receiver = MovableClock(), Receiver(fail_next=MAX_ATTEMPTS)
    await emit(store, clock)
    sender = sender_for(store, receiver, clock)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert await sender.send_due() == 0
        clock.advance(retry_delay(attempt))
    assert await store.claim_webhooks(clock() + 10**6, 1, 10) == []


async def test_a_replica_that_dies_holding_a_message_loses_nothing(tmp_path: Path) -> None:
    clock, receiver = MovableClock(), Receiver()
    keyring = KeyRing([("k1", KeyRing.generate_key())])
    dying = await SQLiteStore.open(tmp_path / "store.sqlite3", keyring)
    await emit(dying, clock)
    survivor = await SQLiteStore.open(tmp_path / "store.sqlite3", keyring)
    sender = sender_for(survivor, receiver, clock)
    [claimed] = await dying.claim_webhooks(clock(), sender.lease_seconds, 1)  # then the replica dies
    await dying.close()
    try:
        assert await sender.send_due() == 0  # the dead replica's lease still holds it
        clock.advance(sender.lease_seconds)
        assert await sender.send_due() == 1
        assert receiver.ids == [claimed.id]
    finally:
        await survivor.close()


async def test_events_are_not_queued_without_a_receiver(store: Store) -> None:
    clock = MovableClock()
    await ConnectionEvents(store, enabled=False, clock=clock).emit(
        CREATED, KEY, account_label="x", status=ConnectionStatus.OK
    )
    assert await store.claim_webhooks(clock() + 1, 1, 10) == []


def test_a_malformed_secret_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="MCPUC_WEBHOOK_SECRET"):
        signing_key("whsec_")


class SlowClaims:
    """A store whose claims take longer than a lease's margin to come back (a stalled store)."""

    def __init__(self, store: Store, clock: MovableClock) -> None:
        self._store, self._clock = store, clock

    async def claim_webhooks(self, now: float, lease_seconds: float, limit: int) -> list[WebhookMessage]:
        claimed = await self._store.claim_webhooks(now, lease_seconds, limit)
        if claimed:
            self._clock.advance(LEASE_MARGIN_SECONDS + 1)
        return claimed

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


async def test_a_message_claimed_too_late_for_its_lease_waits_for_the_lease_to_end(store: Store) -> None:
    """A claim that came back with less of its lease left than an attempt may take sends
    nothing (another replica may claim the message the moment the lease ends); the message goes
    out once, after the lease, and another user's message claimed in time is sent as usual."""
    clock, receiver = MovableClock(), Receiver()
    await emit(store, clock)
    slow = sender_for(SlowClaims(store, clock), receiver, clock)  # type: ignore[arg-type]
    assert await slow.send_due() == 0 and receiver.ids == []
    await emit(store, clock, key=ConnectionKey(UserRef("https://as.example", "bob"), "mockhub", "7"))
    assert await sender_for(store, receiver, clock).send_due() == 1  # bob's, claimed in time
    clock.advance(slow.lease_seconds)
    assert await sender_for(store, receiver, clock).send_due() == 1  # alice's, once its lease ended
    assert sorted(p["data"]["sub"] for p in receiver.accepted) == ["alice", "bob"]
