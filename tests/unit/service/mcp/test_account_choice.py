"""The broker's "which account?" in process: the form it asks, the checks on the answer, the
remembered default, and the 2026-07-28 requestState that carries the question.

The broker runs against a real SQLite store with a context that stands in for the SDK's (the
caller comes from the verified-token context variable, as in production). Connections are
stored with far-off expiry, so no provider is called.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    ClientCapabilities,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    FormElicitationCapability,
    InputRequiredResult,
    UrlElicitationCapability,
)
from mcp_types._v2025_11_25 import ElicitRequestFormParams as WireFormParams

from mock_providers.demo import build_demo
from service.errors import InvalidRequestState
from service.mcp.account_choice import NEW_ACCOUNT_OPTION, AccountChoice, with_notice
from service.mcp.broker import ConnectionBroker
from service.mcp.errors import ConnectionNeeded, connected
from service.mcp.revisions.capabilities import supports_form_elicitation
from service.mcp.revisions.v2026_07_28 import ACCOUNT_INPUT_KEY, RequestState
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings
from tests.support.broker import broker_on
from token_store import Connection, ConnectionKey, KeyRing, SQLiteStore, TokenSet, UserRef

LEGACY, MODERN = "2025-11-25", "2026-07-28"
FORM_AND_URL = ClientCapabilities(
    elicitation=ElicitationCapability(form=FormElicitationCapability(), url=UrlElicitationCapability())
)
URL_ONLY = ClientCapabilities(elicitation=ElicitationCapability(url=UrlElicitationCapability()))


@dataclass
class Session:
    """Stands in for the SDK's ServerSession: answers form elicitations with `answer`."""

    answer: ElicitResult
    asked: list[ElicitRequestFormParams] = field(default_factory=list)

    async def elicit_form(
        self, message: str, requested_schema: dict[str, Any], related_request_id: Any = None
    ) -> ElicitResult:
        self.asked.append(ElicitRequestFormParams(message=message, requested_schema=requested_schema))
        return self.answer


@dataclass
class World:
    settings: Settings
    store: SQLiteStore
    broker: ConnectionBroker
    alice: UserRef
    bob: UserRef

    async def connect(self, user: UserRef, account: str, label: str, updated_at: float) -> Connection:
        tokens = TokenSet(
            access_token=secrets.token_urlsafe(8), expires_at=time.time() + 3600, scopes=("read:user",)
        )
        connection = Connection(
            ConnectionKey(user, "mockhub", account), tokens, label, updated_at, updated_at
        )
        await self.store.put_connection(connection)
        return connection


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    settings = build_demo("127.0.0.1", 9200, 9201, tmp_path).settings
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys))
    outbound = OutboundHttp(1.0)
    broker = broker_on(settings, store, outbound)
    issuer = settings.auth_issuer
    world = World(settings, store, broker, UserRef(issuer, "alice"), UserRef(issuer, "bob"))
    await world.connect(world.alice, "1", "octocat", 100.0)
    await world.connect(world.alice, "2", "hubot", 200.0)  # the most recently used
    await world.connect(world.bob, "3", "bobcat", 300.0)
    # Every call below is Alice's, as her verified access token would say.
    token = AccessToken(token="t", client_id="c", scopes=[], subject="alice", claims={"iss": issuer})
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        yield world
    finally:
        auth_context_var.reset(reset)
        await store.close()
        await outbound.client.aclose()


def ctx(
    revision: str = LEGACY,
    *,
    answer: ElicitResult | None = None,
    capabilities: ClientCapabilities = FORM_AND_URL,
    request_state: str | None = None,
    input_responses: dict[str, Any] | None = None,
) -> Any:
    return SimpleNamespace(
        protocol_version=revision,
        client_capabilities=capabilities,
        session=Session(answer or ElicitResult(action="cancel")),
        request_id=7,
        request_state=request_state,
        input_responses=input_responses,
        headers={},
    )


def accept(value: object) -> ElicitResult:
    return ElicitResult(action="accept", content={"account": value})  # type: ignore[dict-item]


async def require(world: World, context: Any, account: str | None = None) -> Connection:
    return await world.broker.require(context, "mockhub", account=account)


async def answer_of(world: World, context: Any) -> Any:
    """What the tool would answer: the connection's account, or the outcome `@connected` delivers."""

    @connected
    async def tool() -> Any:
        return (await require(world, context)).key.account

    return await tool()


# --- the question ---------------------------------------------------------------------------------


async def test_the_form_offers_the_callers_accounts_by_label_and_a_new_one(world: World) -> None:
    context = ctx(answer=accept("account:1"))
    assert (await require(world, context)).key.account == "1"
    [asked] = context.session.asked
    schema = asked.requested_schema
    assert schema["required"] == ["account"]
    [(name, field_schema)] = schema["properties"].items()
    assert name == "account" and field_schema["type"] == "string"
    assert field_schema["oneOf"] == [
        {"const": "account:2", "title": "hubot"},
        {"const": "account:1", "title": "octocat"},
        {"const": NEW_ACCOUNT_OPTION, "title": "Connect another account"},
    ]
    assert "bobcat" not in json.dumps(schema)  # only the caller's own accounts


async def test_the_form_never_asks_for_free_text_or_a_secret(world: World) -> None:
    context = ctx(answer=accept("account:1"))
    await require(world, context)
    [asked] = context.session.asked
    WireFormParams.model_validate(asked.model_dump(by_alias=True))  # spec-valid on the wire
    for prop in asked.requested_schema["properties"].values():
        # Every property is a closed single-select: no free text, no format a secret could use.
        assert set(prop) <= {"type", "title", "description", "oneOf"}
        assert prop["oneOf"] and all(set(o) == {"const", "title"} for o in prop["oneOf"])
    text = json.dumps(asked.model_dump(by_alias=True)).lower()
    for word in ("password", "token", "secret", "api key", "apikey"):
        assert word not in text


def test_two_accounts_with_one_label_are_told_apart() -> None:
    settings_user = UserRef("i", "s")
    tokens = TokenSet(access_token="x")
    same = [Connection(ConnectionKey(settings_user, "p", a), tokens, "work", 1.0, 1.0) for a in ("a", "b")]
    provider = SimpleNamespace(name="p", display_name="P")
    options = AccountChoice.of(provider, same).request().requested_schema["properties"]["account"]["oneOf"]  # type: ignore[arg-type]
    assert [o["title"] for o in options[:2]] == ["work (a)", "work (b)"]


# --- the answer -----------------------------------------------------------------------------------


async def test_the_answer_is_remembered_and_used_without_asking_again(world: World) -> None:
    first = ctx(answer=accept("account:1"))
    assert (await require(world, first)).key.account == "1"
    assert await world.store.get_default_account(world.alice, "mockhub") == "1"
    again = ctx(answer=accept("account:2"))
    assert (await require(world, again)).key.account == "1"
    assert again.session.asked == []


async def test_a_named_account_is_used_without_asking(world: World) -> None:
    context = ctx(answer=accept("account:1"))
    assert (await require(world, context, account="hubot")).key.account == "2"
    assert context.session.asked == []
    assert await world.store.get_default_account(world.alice, "mockhub") is None


async def test_a_remembered_account_that_is_gone_means_asking_again(world: World) -> None:
    await world.store.set_default_account(world.alice, "mockhub", "1")
    await world.store.delete_connection(ConnectionKey(world.alice, "mockhub", "1"))
    await world.connect(world.alice, "4", "monalisa", 400.0)
    context = ctx(answer=accept("account:4"))
    assert (await require(world, context)).key.account == "4"
    assert len(context.session.asked) == 1
    assert await world.store.get_default_account(world.alice, "mockhub") == "4"


async def test_one_account_is_used_without_asking(world: World) -> None:
    await world.store.delete_connection(ConnectionKey(world.alice, "mockhub", "1"))
    context = ctx(answer=accept("account:1"))
    assert (await require(world, context)).key.account == "2"
    assert context.session.asked == []


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_or_cancel_ends_the_call_with_a_tool_error(world: World, action: str) -> None:
    context = ctx(answer=ElicitResult(action=action))  # type: ignore[arg-type]
    result = await answer_of(world, context)
    assert isinstance(result, CallToolResult) and result.is_error
    assert "No MockHub account was chosen" in result.content[0].text  # type: ignore[union-attr]
    assert await world.store.get_default_account(world.alice, "mockhub") is None


async def test_connect_another_account_starts_the_url_flow(world: World) -> None:
    await world.store.set_default_account(world.alice, "mockhub", "9")  # stale: account 9 is gone
    context = ctx(answer=accept(NEW_ACCOUNT_OPTION))
    context.headers = {"mcp-session-id": "s1"}
    with pytest.raises(ConnectionNeeded) as needed:
        await require(world, context)
    assert isinstance(needed.value.outcome, UrlElicitationRequiredError)
    [url] = needed.value.outcome.elicitations
    assert url.url.startswith(world.settings.connect_url(""))
    assert await world.store.get_default_account(world.alice, "mockhub") is None


# --- security: the answer is checked server-side --------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["account:99", "1", "", None, 1, ["account:1"], "account:1 ", "ACCOUNT:1"],
    ids=["unknown id", "bare id", "empty", "missing", "number", "list", "trailing space", "case"],
)
async def test_an_answer_that_was_not_offered_is_refused(world: World, value: object) -> None:
    context = ctx(answer=ElicitResult(action="accept", content={"account": value}))  # type: ignore[dict-item]
    with pytest.raises(MCPError) as refused:
        await answer_of(world, context)
    assert refused.value.error.code == INVALID_PARAMS
    assert "not one of the choices offered" in refused.value.error.message
    assert await world.store.get_default_account(world.alice, "mockhub") is None


async def test_an_answer_naming_another_users_account_is_refused(world: World) -> None:
    context = ctx(answer=accept("account:3"))  # Bob's account
    with pytest.raises(MCPError) as refused:
        await answer_of(world, context)
    assert refused.value.error.code == INVALID_PARAMS
    assert await world.store.get_default_account(world.alice, "mockhub") is None
    assert await world.store.get_default_account(world.bob, "mockhub") is None


async def test_accept_without_content_is_refused(world: World) -> None:
    with pytest.raises(MCPError) as refused:
        await answer_of(world, ctx(answer=ElicitResult(action="accept")))
    assert refused.value.error.code == INVALID_PARAMS


# --- clients without form-mode elicitation --------------------------------------------------------


@pytest.mark.parametrize("revision", [LEGACY, MODERN])
async def test_without_form_support_the_most_recent_is_used_and_named(world: World, revision: str) -> None:
    context = ctx(revision, capabilities=URL_ONLY, answer=accept("account:1"))
    api = await world.broker.session(context, "mockhub", tool="whoami")
    assert api.account == "2" and context.session.asked == []
    assert api.notice is not None and "'hubot'" in api.notice and "account=" in api.notice
    result = with_notice({"login": "hubot"}, api.notice)
    assert result.structured_content == {"login": "hubot"}  # unchanged for existing assertions
    assert [c.text for c in result.content][1] == api.notice
    assert json.loads(result.content[0].text) == {"login": "hubot"}


async def test_without_form_support_the_remembered_default_still_answers(world: World) -> None:
    await world.store.set_default_account(world.alice, "mockhub", "1")
    api = await world.broker.session(ctx(capabilities=URL_ONLY), "mockhub", tool="whoami")
    assert api.account == "1" and api.notice is None


@pytest.mark.parametrize(
    ("elicitation", "expected"),
    [
        (ElicitationCapability(), True),  # the legacy empty object means form
        (ElicitationCapability(form=FormElicitationCapability()), True),
        (ElicitationCapability(url=UrlElicitationCapability()), False),
        (None, False),
    ],
)
def test_supports_form_elicitation(elicitation: ElicitationCapability | None, expected: bool) -> None:
    context = SimpleNamespace(client_capabilities=ClientCapabilities(elicitation=elicitation))
    assert supports_form_elicitation(context) is expected  # type: ignore[arg-type]


# --- 2026-07-28: the question and its answer travel in a sealed requestState ----------------------


async def ask_modern(world: World) -> InputRequiredResult:
    with pytest.raises(ConnectionNeeded) as needed:
        await require(world, ctx(MODERN))
    outcome = needed.value.outcome
    assert isinstance(outcome, InputRequiredResult)
    return outcome


async def test_modern_asks_with_an_input_required_result(world: World) -> None:
    outcome = await ask_modern(world)
    [(key, request)] = (outcome.input_requests or {}).items()
    assert key == ACCOUNT_INPUT_KEY and isinstance(request, ElicitRequest)
    assert isinstance(request.params, ElicitRequestFormParams)
    assert request.params.mode == "form"
    assert outcome.request_state is not None
    state = RequestState.loads(outcome.request_state)
    assert (state.kind, state.provider) == ("account", "mockhub")

    answer = {ACCOUNT_INPUT_KEY: accept("account:1")}
    retry = ctx(MODERN, request_state=outcome.request_state, input_responses=answer)
    assert (await require(world, retry)).key.account == "1"
    assert await world.store.get_default_account(world.alice, "mockhub") == "1"


async def test_modern_account_state_is_single_use(world: World) -> None:
    outcome = await ask_modern(world)
    answer = {ACCOUNT_INPUT_KEY: accept("account:1")}
    await require(world, ctx(MODERN, request_state=outcome.request_state, input_responses=answer))
    with pytest.raises(MCPError) as replayed:
        await answer_of(world, ctx(MODERN, request_state=outcome.request_state, input_responses=answer))
    assert replayed.value.error.code == INVALID_PARAMS
    assert "already used" in replayed.value.error.message


async def test_modern_asking_again_replaces_the_open_questions_nonce(world: World) -> None:
    """One open question per user and provider: its nonce is replaced when asked again, so the
    store holds one however often the call comes (the older state is refused as used)."""
    older, newer = await ask_modern(world), await ask_modern(world)
    answer = {ACCOUNT_INPUT_KEY: accept("account:1")}
    with pytest.raises(MCPError) as refused:
        await answer_of(world, ctx(MODERN, request_state=older.request_state, input_responses=answer))
    assert "already used" in refused.value.error.message
    retry = ctx(MODERN, request_state=newer.request_state, input_responses=answer)
    assert (await require(world, retry)).key.account == "1"


async def test_modern_account_answer_is_checked_against_the_callers_accounts(world: World) -> None:
    outcome = await ask_modern(world)
    answer = {ACCOUNT_INPUT_KEY: accept("account:3")}  # Bob's
    with pytest.raises(MCPError) as refused:
        await answer_of(world, ctx(MODERN, request_state=outcome.request_state, input_responses=answer))
    assert refused.value.error.code == INVALID_PARAMS
    assert await world.store.get_default_account(world.alice, "mockhub") is None


async def test_modern_account_state_for_another_provider_is_refused(world: World) -> None:
    nonce = secrets.token_urlsafe(32)
    await world.store.put_nonce(nonce, 60)
    state = RequestState("", nonce, "otherhub", "account").dumps()
    answer = {ACCOUNT_INPUT_KEY: accept("account:1")}
    with pytest.raises(MCPError) as refused:
        await answer_of(world, ctx(MODERN, request_state=state, input_responses=answer))
    assert refused.value.error.code == INVALID_PARAMS
    assert await world.store.get_default_account(world.alice, "mockhub") is None


async def test_a_connect_state_never_reads_an_account_answer(world: World) -> None:
    """The state's kind decides which answer is read: a connect state carrying an account answer
    resumes the connect flow, and the account answer is never taken as a choice."""
    nonce = secrets.token_urlsafe(32)
    await world.store.put_nonce(nonce, 60)
    state = RequestState("e" * 43, nonce, "mockhub").dumps()
    answers = {ACCOUNT_INPUT_KEY: accept("account:1"), "connect": ElicitResult(action="accept")}
    await require(world, ctx(MODERN, request_state=state, input_responses=answers))
    assert await world.store.get_default_account(world.alice, "mockhub") is None


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_modern_decline_or_cancel_is_a_tool_error(world: World, action: str) -> None:
    outcome = await ask_modern(world)
    answer = {ACCOUNT_INPUT_KEY: ElicitResult(action=action)}  # type: ignore[arg-type]
    result = await answer_of(world, ctx(MODERN, request_state=outcome.request_state, input_responses=answer))
    assert isinstance(result, CallToolResult) and result.is_error


def test_unknown_kind_is_an_invalid_state() -> None:
    raw = json.dumps({"v": 1, "e": "", "n": "n", "p": "mockhub", "k": "password"})
    with pytest.raises(InvalidRequestState):
        RequestState.loads(raw)
    assert RequestState.loads(RequestState("", "n", "p", "account").dumps()).kind == "account"
