"""service/mcp/revisions/v2026_07_28.py: a question is an InputRequiredResult whose requestState names it and
carries a nonce good for one retry; a retry of another user's flow finds nothing of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp_types import ElicitRequestURLParams, ElicitResult, InputRequiredResult

from mock_providers.demo import build_demo
from service.errors import InvalidRequestState
from service.flow.connect import ConnectFlow
from service.mcp.completion.hub import CompletionHub
from service.mcp.errors import ConnectionNeeded
from service.mcp.identity import Caller
from service.mcp.revisions.answers import AccountAnswered, ConnectAnew
from service.mcp.revisions.capabilities import STATELESS_REVISION
from service.mcp.revisions.v2026_07_28 import (
    ACCOUNT_INPUT_KEY,
    CONNECT_INPUT_KEY,
    RequestState,
    StatelessAnswers,
    one_open_account_question,
)
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from tests.support.store_contract import FakeClock
from token_store import Connection, ElicitationStatus, KeyRing, SQLiteStore, UserRef

ALICE = UserRef("https://as.example", "alice")
BOB = UserRef("https://as.example", "bob")
URL = "https://mcp.example/connect?elicitationId=x"


@dataclass
class World:
    answers: StatelessAnswers
    flow: ConnectFlow
    store: SQLiteStore
    config: ProviderConfig


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    settings = build_demo("127.0.0.1", 9500, 9501, tmp_path).settings
    settings = settings.model_copy(update={"retry_wait_seconds": 0.0})  # answer a retry at once
    clock = FakeClock()
    store = await SQLiteStore.open(
        tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys), clock=clock
    )
    outbound = OutboundHttp(1.0)
    flow = ConnectFlow(settings, store, outbound, clock=clock)
    answers = StatelessAnswers(settings, store, CompletionHub(clock), flow, clock)
    try:
        yield World(answers, flow, store, settings.providers["mockhub"])
    finally:
        await store.close()
        await outbound.client.aclose()


def retry(state: str | None, responses: dict[str, ElicitResult] | None = None) -> Any:
    return SimpleNamespace(request_state=state, input_responses=responses)


def caller(user: UserRef = ALICE) -> Caller:
    return Caller(user, "client", None)


async def nothing_connected() -> Connection | None:
    return None


async def test_a_connect_question_carries_a_single_use_state(world: World) -> None:
    elicitation = await world.flow.create(ALICE, "client", None, world.config, ("read:user",))
    asked = await world.answers.ask_connect(retry(None), elicitation, "Connect", URL)
    params = (asked.input_requests or {})[CONNECT_INPUT_KEY].params
    assert isinstance(params, ElicitRequestURLParams) and params.url == URL
    assert asked.request_state is not None
    state = RequestState.loads(asked.request_state)
    assert (state.elicitation_id, state.provider, state.kind) == (elicitation.id, "mockhub", "connect")
    assert world.answers.revision == STATELESS_REVISION
    assert world.answers.session_of(Caller(ALICE, "client", "session")) is None
    # Still pending, not held: state only, so the client does not prompt twice.
    with pytest.raises(ConnectionNeeded) as again:
        await world.answers.resume(retry(asked.request_state), caller(), world.config, nothing_connected)
    assert isinstance(again.value.outcome, InputRequiredResult)
    assert again.value.outcome.input_requests is None
    with pytest.raises(InvalidRequestState):
        await world.answers.resume(retry(asked.request_state), caller(), world.config, nothing_connected)


async def test_another_users_flow_is_no_answer_to_a_retry(world: World) -> None:
    """A state naming Bob's flow (which the SDK's sealing never lets Alice hold) finds nothing:
    Alice is asked anew, and Bob's flow is left as it is."""
    bobs = await world.flow.create(BOB, "client", None, world.config, ("read:user",))
    asked = await world.answers.ask_connect(retry(None), bobs, "Connect", URL)
    resumed = await world.answers.resume(
        retry(asked.request_state), caller(), world.config, nothing_connected
    )
    assert resumed == ConnectAnew()
    still = await world.flow.elicitation(bobs.id)
    assert still is not None and still.status is ElicitationStatus.PENDING


async def test_a_decline_naming_another_users_flow_leaves_it_pending(world: World) -> None:
    """Declining answers only the caller's own flow: a state naming Bob's (which the SDK's sealing
    never lets Alice hold) must not end it."""
    bobs = await world.flow.create(BOB, "client", None, world.config, ("read:user",))
    asked = await world.answers.ask_connect(retry(None), bobs, "Connect", URL)
    declined = {CONNECT_INPUT_KEY: ElicitResult(action="decline")}
    with pytest.raises(ConnectionNeeded):
        await world.answers.resume(
            retry(asked.request_state, declined), caller(), world.config, nothing_connected
        )
    still = await world.flow.elicitation(bobs.id)
    assert still is not None and still.status is ElicitationStatus.PENDING


async def test_an_account_answer_goes_back_as_it_came(world: World) -> None:
    nonce = "n" * 43
    await world.store.put_nonce(nonce, 600, one_open_account_question(ALICE, "mockhub"))
    answer = ElicitResult(action="accept", content={"account": "account:1"})
    state = RequestState("", nonce, "mockhub", "account").dumps()
    resumed = await world.answers.resume(
        retry(state, {ACCOUNT_INPUT_KEY: answer}), caller(), world.config, nothing_connected
    )
    assert resumed == AccountAnswered(answer)


def test_one_open_account_question_per_user_and_provider() -> None:
    slots = {one_open_account_question(u, p) for u in (ALICE, BOB) for p in ("mockhub", "github")}
    assert len(slots) == 4
    assert one_open_account_question(ALICE, "mockhub") == one_open_account_question(ALICE, "mockhub")
