"""The PostgreSQL completion bus against a forger: PostgreSQL checks no privilege on NOTIFY, so any
role that can connect to the database can send a notice on the replicas' channel. A notice only
names an elicitation; the session hears `notifications/elicitation/complete` only once the store
says the flow ended (`require_finished_in_store`). The bus exists on 2025-11-25 sessions only
(2026-07-28 has no completion notification)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import asyncpg
import pytest

from service.mcp.completion.bus import PostgresBus
from service.mcp.completion.hub import CompletionHub
from tests.support.completion import FakeSession, elicitation
from tests.support.postgres import PostgresSchema, PostgresServer
from token_store import ElicitationStatus, KeyRing, PendingElicitation, PostgresStore, UserRef

pytestmark = pytest.mark.security


class Session(FakeSession):
    def __init__(self) -> None:
        super().__init__()
        self.notified = anyio.Event()

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        await super().send_elicit_complete(elicitation_id)
        self.notified.set()


@pytest.fixture
async def store(postgres_server: PostgresServer) -> AsyncIterator[tuple[PostgresSchema, PostgresStore]]:
    with PostgresSchema(postgres_server) as schema:
        opened = await PostgresStore.open(
            schema.url, KeyRing([("k1", KeyRing.generate_key())]), clock=lambda: 1.0
        )
        try:
            yield schema, opened
        finally:
            await opened.close()


async def stored(store: PostgresStore, user: str) -> PendingElicitation:
    record = replace(
        elicitation(f"session-{user}"), id=secrets.token_urlsafe(32), user=UserRef("https://as", user)
    )
    await store.create_elicitation(record, max_live_per_user=5)
    opened = await store.transition_elicitation(
        record.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED
    )
    assert opened is not None
    return opened


async def test_a_forged_notice_for_a_live_flow_reaches_no_session(
    store: tuple[PostgresSchema, PostgresStore], postgres_server: PostgresServer
) -> None:
    schema, pg = store
    channel = f"test_{secrets.token_hex(6)}"
    alice_flow, bob_flow = await stored(pg, "alice"), await stored(pg, "bob")
    hub, alice, bob = CompletionHub(clock=lambda: 1.0), Session(), Session()
    hub.register(alice_flow, alice)
    hub.register(bob_flow, bob)
    bus = PostgresBus(schema.url, hub, pg.get_elicitation, channel=channel)

    # A role with no privilege on the store's tables, only CONNECT (which PUBLIC has by default).
    intruder, password = f"intruder_{secrets.token_hex(4)}", secrets.token_hex(16)
    postgres_server.psql(f"CREATE ROLE {intruder} LOGIN PASSWORD '{password}'")
    try:
        forger = await asyncpg.connect(postgres_server.url(user=intruder, password=password))
        try:
            async with bus.running():
                with anyio.fail_after(5):
                    await bus.subscribed.wait()
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await forger.fetch(f"SELECT record FROM {schema.name}.elicitations")  # noqa: S608
                for _ in range(3):
                    await forger.execute("SELECT pg_notify($1, $2)", channel, alice_flow.id)
                # Bob's flow, really completed and published afterwards, is delivered: the forged
                # notices (sent first, on the same channel) have been handled by then.
                done = await pg.transition_elicitation(
                    bob_flow.id, ElicitationStatus.OPENED, ElicitationStatus.COMPLETE
                )
                assert done is not None
                await bus.publish(done)
                with anyio.fail_after(5):
                    await bob.notified.wait()
                assert alice.sent == []  # the store says alice's flow is still OPENED

                # Alice's flow, once really completed, still reaches her session, once.
                done = await pg.transition_elicitation(
                    alice_flow.id, ElicitationStatus.OPENED, ElicitationStatus.COMPLETE
                )
                assert done is not None
                await bus.publish(done)
                with anyio.fail_after(5):
                    await alice.notified.wait()
                await forger.execute("SELECT pg_notify($1, $2)", channel, alice_flow.id)
                await bus.publish(done)
            assert alice.sent == [alice_flow.id]
            assert bob.sent == [bob_flow.id]
        finally:
            await forger.close()
    finally:
        postgres_server.psql(f"DROP ROLE {intruder}")
