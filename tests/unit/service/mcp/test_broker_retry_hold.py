"""How long a 2026-07-28 retry is held while its flow is pending (`retry_wait_seconds`), in process.

The broker's clock is injected and frozen, so the hold never ends by time here: only the flow's
completion or a stopping replica ends it (the harness: tests/support/modern_retry.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types import InputRequiredResult

from mock_providers.demo import build_demo
from service.flow.connect import ConnectFlow
from service.flow.lifecycle import TokenLifecycle
from service.mcp.broker import ConnectionBroker
from service.mcp.completion.hub import CompletionHub
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings
from tests.support.modern_retry import World, ask, retry_with, whoami
from token_store import KeyRing, SQLiteStore, UserRef

GUARD = 20.0  # seconds; only a broken hold gets near it


def test_the_default_hold_fits_the_proxies_and_the_ts_client() -> None:
    """25 s: under GCP's 30 s backend timeout, nginx's and AWS ALB's 60 s; the TypeScript SDK's
    10 legs then span over 4 minutes (docs/clients.md, "Budgets")."""
    hold = Settings.model_fields["retry_wait_seconds"].default
    assert hold < 30
    assert 10 * (hold + 0.25) > 180


@pytest.fixture
async def frozen(tmp_path: Path) -> AsyncIterator[World]:
    settings = build_demo("127.0.0.1", 9200, 9201, tmp_path).settings
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys))
    outbound = OutboundHttp(1.0)
    issuer = settings.auth_issuer
    token = AccessToken(token="t", client_id="c", scopes=[], subject="alice", claims={"iss": issuer})
    reset = auth_context_var.set(AuthenticatedUser(token))
    broker = ConnectionBroker(
        settings,
        store,
        CompletionHub(),
        TokenLifecycle(store, outbound, timeout_seconds=1),
        ConnectFlow(settings, store, outbound, clock=time.time),
        outbound.client,
        clock=lambda: 1_000.0,  # the hold's deadline never comes
    )
    try:
        yield World(store, broker, UserRef(issuer, "alice"))
    finally:
        auth_context_var.reset(reset)
        await store.close()
        await outbound.client.aclose()


async def test_a_held_retry_answers_once_the_flow_completes(frozen: World) -> None:
    state, elicitation_id = await ask(frozen)

    async def user_finishes() -> None:
        await anyio.sleep(0.6)  # a poll or two into the hold
        await frozen.browser_completes(elicitation_id, account="42")

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(user_finishes)
            assert await whoami(frozen, retry_with(state, "accept")) == "42"


async def test_a_stopping_replica_answers_a_held_retry_at_once(frozen: World) -> None:
    """Draining: the retry gets a state-only InputRequiredResult for the same flow, which the
    client re-sends (to a replica still serving); the flow stays pending."""
    state, elicitation_id = await ask(frozen)
    polls = 0

    def draining() -> bool:
        nonlocal polls
        polls += 1
        return polls > 2  # SIGTERM arrives while the retry is held

    frozen.broker.stop_holding_when(draining)
    with anyio.fail_after(GUARD):
        answer = await whoami(frozen, retry_with(state, "accept"))
    assert isinstance(answer, InputRequiredResult) and answer.request_state, answer
    assert not answer.input_requests
    assert (await frozen.status(elicitation_id)).is_live
