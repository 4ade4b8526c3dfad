"""service/observability/webhooks.py with the stores several replicas share (Redis, PostgreSQL):
two replicas' senders against a slow receiver deliver each message once. The receiver takes its
time on the clock every lease is judged by (tests/support/webhook_receiver.py, in process), so a
slow receiver costs no real time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from service.observability.metrics import Metrics
from service.observability.webhooks import CREATED, ConnectionEvents, WebhookSender
from tests.support.clock import MovableClock
from tests.support.postgres import PostgresSchema
from tests.support.settle import wait_until
from tests.support.store_contract import REDIS_URL, redis_prefix
from tests.support.webhook_receiver import Receiver
from token_store import ConnectionKey, ConnectionStatus, KeyRing, Store, UserRef, open_store

USERS = [ConnectionKey(UserRef("https://as.example", f"user-{n}"), "mockhub", str(n)) for n in range(40)]
TIMEOUT = 5.0  # each sender's timeout per attempt
RECEIVER_SECONDS = 2.0  # what each delivery takes: 40 of them outlast a 60 s lease over one batch


Replicas = tuple[list[Store], MovableClock]


@pytest.fixture(params=["redis", "postgres"])
async def replicas(request: pytest.FixtureRequest, keyring: KeyRing) -> AsyncIterator[Replicas]:
    """Two replicas' stores, each with its own connection to one shared backend, and their clock."""
    clock = MovableClock()
    stores: list[Store] = []
    try:
        if request.param == "redis":
            with redis_prefix() as prefix:
                stores = [await open_store(REDIS_URL, keyring, prefix=prefix, clock=clock) for _ in range(2)]
                yield stores, clock
        else:
            with PostgresSchema(request.getfixturevalue("postgres_server")) as schema:
                stores = [await open_store(schema.url, keyring, clock=clock) for _ in range(2)]
                yield stores, clock
    finally:
        for store in stores:
            await store.close()


def sender(store: Store, receiver: Receiver, clock: MovableClock) -> WebhookSender:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=receiver.app()))
    return WebhookSender(
        store,
        http,
        "http://127.0.0.1:9/hooks",  # never dialled: the transport is the receiver app itself
        receiver.secret,
        timeout_seconds=TIMEOUT,
        metrics=Metrics(),
        clock=clock,
    )


def settled(senders: list[WebhookSender], outcome: str) -> float:
    """How many attempts the senders recorded with `outcome` (their metrics)."""
    labels = {"type": CREATED, "outcome": outcome}
    return sum(s._metrics.registry.get_sample_value("mcpuc_webhooks_total", labels) or 0 for s in senders)


async def test_two_replicas_against_a_slow_receiver_deliver_each_message_once(replicas: Replicas) -> None:
    """Two replicas run their senders' loops against a receiver that takes 2 s per delivery:
    each of 40 users' events arrives once, each delivery is recorded once, and none is recorded
    over another replica's lease (with a 60 s lease over a batch of 50, the messages still unsent
    when the lease ended went out a second time, from the other replica)."""
    stores, clock = replicas
    events = ConnectionEvents(stores[0], enabled=True, clock=clock)
    for key in USERS:
        await events.emit(CREATED, key, account_label="octocat", status=ConnectionStatus.OK)
    receiver = Receiver(taking=(clock, RECEIVER_SECONDS))
    senders = [sender(store, receiver, clock) for store in stores]
    async with anyio.create_task_group() as running:
        for each in senders:
            running.start_soon(each.run, 0.01)
        await wait_until(lambda: settled(senders, "delivered") >= len(USERS), "every delivery recorded")
        running.cancel_scope.cancel()
    assert sorted(p["data"]["sub"] for p in receiver.accepted) == sorted(k.user.sub for k in USERS)
    assert len(set(receiver.ids)) == len(receiver.ids) == len(USERS) and receiver.refused == 0
    assert settled(senders, "lease_lost") == 0
    assert await stores[1].claim_webhooks(clock() + 10**6, 1, 100) == []  # none left, none leased
