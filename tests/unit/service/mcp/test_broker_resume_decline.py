"""A 2026-07-28 retry that declines or cancels the connect flow, in process.

A user who completes the flow in the browser and then presses Cancel (or Decline) in the client
is connected: the retry answers with the connection, not "declined". A decline of a flow that has
not finished is honoured: the link stops working.

The broker runs against a real SQLite store with a context standing in for the SDK's (the caller
comes from the verified-token context variable, as in production); the browser leg is the
store's own transitions (opened, then completed with the connection), as /connect and /callback
make them. The connection expires far off, so no provider is called.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types import (
    CallToolResult,
    InputRequiredResult,
)

from mock_providers.demo import build_demo
from service.providers.outbound_http import OutboundHttp
from tests.support.broker import broker_on
from tests.support.modern_retry import ACTIONS, World, ask, connection_of, retry_with, whoami
from token_store import ElicitationStatus, KeyRing, SQLiteStore, UserRef


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    settings = build_demo("127.0.0.1", 9200, 9201, tmp_path).settings
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys))
    outbound = OutboundHttp(1.0)
    issuer = settings.auth_issuer
    # Every call below is Alice's, as her verified access token would say.
    token = AccessToken(token="t", client_id="c", scopes=[], subject="alice", claims={"iss": issuer})
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        yield World(store, broker_on(settings, store, outbound), UserRef(issuer, "alice"))
    finally:
        auth_context_var.reset(reset)
        await store.close()
        await outbound.client.aclose()


@pytest.mark.parametrize("action", ACTIONS)
async def test_cancel_after_the_flow_completed_answers_with_the_connection(world: World, action: str) -> None:
    state, elicitation_id = await ask(world)
    await world.browser_completes(elicitation_id, account="42")
    assert await whoami(world, retry_with(state, action)) == "42"
    # The completed flow stays completed: the dialog's answer changes nothing stored.
    assert await world.status(elicitation_id) is ElicitationStatus.COMPLETE
    assert await world.store.get_connection(world.alice, "mockhub") is not None


@pytest.mark.parametrize("action", ACTIONS)
async def test_cancel_before_the_flow_completed_is_declined(world: World, action: str) -> None:
    state, elicitation_id = await ask(world)
    result = await whoami(world, retry_with(state, action))
    assert isinstance(result, CallToolResult) and result.is_error
    assert "was declined" in result.content[0].text  # type: ignore[union-attr]
    assert await world.status(elicitation_id) is ElicitationStatus.FAILED


async def test_a_connection_from_elsewhere_does_not_overrule_a_decline(world: World) -> None:
    # The flow this state belongs to is still pending; a connection stored by another flow in the
    # meantime is no reason to ignore the user's "no" to this one.
    state, elicitation_id = await ask(world)
    await world.store.put_connection(connection_of(world.alice, "7", updated_at=time.time()))
    result = await whoami(world, retry_with(state, "decline"))
    assert isinstance(result, CallToolResult) and result.is_error
    assert "was declined" in result.content[0].text  # type: ignore[union-attr]
    assert await world.status(elicitation_id) is ElicitationStatus.FAILED


async def test_a_retry_naming_an_account_answers_with_that_account(world: World) -> None:
    # The account named in the call (here a new one) is what the retry answers with, once connected.
    await world.store.put_connection(connection_of(world.alice, "7", updated_at=time.time()))
    state, elicitation_id = await ask(world, account="42")
    await world.browser_completes(elicitation_id, account="42")
    assert await whoami(world, retry_with(state, "accept"), account="42") == "42"


async def test_a_retry_naming_an_account_the_flow_did_not_connect_asks_again(world: World) -> None:
    # The user signed in at the provider as someone else: the flow stored account 99, which is not
    # the account the tool asked for, so the retry must not act as 99 (nor as the older 7).
    await world.store.put_connection(connection_of(world.alice, "7", updated_at=time.time()))
    state, elicitation_id = await ask(world, account="42")
    await world.browser_completes(elicitation_id, account="99")
    answer = await whoami(world, retry_with(state, "accept"), account="42")
    assert isinstance(answer, InputRequiredResult), answer
