"""`ConnectFlow.complete` against a real SQLite store: what it reads and what it keeps;
and `ConnectFlow.finish`, which takes the raw callback and consumes its state before any check.

The stored connection is read only when the token response carries no refresh token (then a
healthy grant's refresh token is kept, RFC 6749 §6); a reconnect keeps its first `connected_at`
without that read, because `Store.complete_elicitation` keeps it. Store reads are counted with
the SQLite statement trace (every read is a SELECT; the write transaction is BEGIN, the upsert,
the transition, COMMIT).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from mock_providers.demo import build_demo
from service.errors import InvalidRequest, InvalidState, WrongBrowser
from service.flow.connect import CallbackParams, ConnectFlow
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from tests.support.store_contract import T0, FakeClock, make_elicitation
from token_store import (
    Connection,
    ConnectionKey,
    ConnectionStatus,
    ElicitationStatus,
    KeyRing,
    SQLiteStore,
    TokenSet,
    UserRef,
)

ACCOUNT = "42"
PROFILE = {"id": 42, "login": "alice-at-mockhub"}


@dataclass
class World:
    store: SQLiteStore
    flow: ConnectFlow
    provider: ProviderConfig
    clock: FakeClock
    user: UserRef

    @property
    def key(self) -> ConnectionKey:
        return ConnectionKey(self.user, self.provider.name, ACCOUNT)

    async def callback(self, tokens: TokenSet) -> list[str]:
        """An opened elicitation completed by `ConnectFlow.complete`; the statements it ran."""
        e = make_elicitation(self.user, ttl=3600, provider=self.provider.name)
        await self.store.create_elicitation(e, max_live_per_user=5)
        await self.store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
        opened = replace(e, status=ElicitationStatus.OPENED)
        statements: list[str] = []
        self.store.trace(statements.append)
        try:
            await self.flow.complete(opened, self.provider, tokens, PROFILE)
        finally:
            self.store.trace(None)
        assert await self.store.get_elicitation(e.id) == replace(e, status=ElicitationStatus.COMPLETE)
        return statements

    async def stored(self) -> Connection:
        found = await self.store.get_connection(self.user, self.provider.name, ACCOUNT)
        assert found is not None
        return found


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    settings = build_demo("127.0.0.1", 9500, 9501, tmp_path).settings
    clock = FakeClock()
    store = await SQLiteStore.open(
        tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys), clock=clock
    )
    outbound = OutboundHttp(1.0)
    try:
        flow = ConnectFlow(settings, store, outbound, clock=clock)
        user = UserRef(settings.auth_issuer, "alice")
        yield World(store, flow, settings.providers["mockhub"], clock, user)
    finally:
        await store.close()
        await outbound.client.aclose()


def tokens(refresh_token: str | None) -> TokenSet:
    return TokenSet(access_token="at-new", refresh_token=refresh_token, scopes=("read:user",))


def reads(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith("SELECT")]


async def held(world: World, status: ConnectionStatus = ConnectionStatus.OK) -> Connection:
    """A connection from an earlier flow, with a refresh token, connected at `T0 + 1/3`."""
    earlier = Connection(
        world.key,
        TokenSet(access_token="at-old", refresh_token="rt-old", scopes=("read:user",)),
        "old label",
        connected_at=T0 + 1 / 3,
        updated_at=T0 + 1 / 3,
        status=status,
    )
    await world.store.put_connection(earlier)
    world.clock.advance(100)
    return earlier


async def test_a_response_with_a_refresh_token_reads_no_previous_connection(world: World) -> None:
    earlier = await held(world)
    statements = await world.callback(tokens("rt-new"))
    assert reads(statements) == []
    assert [s.split(None, 1)[0].upper() for s in statements] == ["BEGIN", "INSERT", "UPDATE", "COMMIT"]
    stored = await world.stored()
    assert stored.tokens.refresh_token == "rt-new"
    # The first connected_at is kept (by the store), the rest is the reconnect's.
    assert stored.connected_at == earlier.connected_at
    assert stored.updated_at == world.clock.now
    assert stored.account_label == PROFILE["login"]


async def test_a_response_without_a_refresh_token_keeps_the_healthy_one(world: World) -> None:
    earlier = await held(world)
    statements = await world.callback(tokens(None))
    assert len(reads(statements)) == 1  # the previous connection, for its refresh token
    stored = await world.stored()
    assert (stored.tokens.access_token, stored.tokens.refresh_token) == ("at-new", "rt-old")
    assert stored.connected_at == earlier.connected_at


@pytest.mark.parametrize(
    "status", [s for s in ConnectionStatus if s is not ConnectionStatus.OK], ids=lambda s: s.value
)
async def test_a_refresh_token_of_an_unhealthy_grant_is_not_carried_over(
    world: World, status: ConnectionStatus
) -> None:
    await held(world, status)
    await world.callback(tokens(None))
    stored = await world.stored()
    assert stored.tokens.refresh_token is None
    assert stored.status is ConnectionStatus.OK


async def test_a_first_connect_is_connected_now(world: World) -> None:
    world.clock.advance(5)
    await world.callback(tokens(None))
    stored = await world.stored()
    assert stored.tokens.refresh_token is None
    assert stored.connected_at == stored.updated_at == world.clock.now


async def opened_state(world: World, binding: str) -> tuple[str, str]:
    """A flow opened at `POST /connect` in the browser `binding`: its elicitation id and state."""
    created = await world.flow.create(world.user, "client", None, world.provider, ("read:user",))
    link = await world.flow.check_link(world.user, created.id)
    url = await world.flow.open(link, binding)
    return created.id, parse_qs(urlsplit(url).query)["state"][0]


def callback(world: World, query: dict[str, str], binding: str) -> CallbackParams:
    return CallbackParams(
        path_provider=world.provider.name, query=query, session_user=world.user, session_binding=binding
    )


@pytest.mark.parametrize("state", ["", "short", "x" * 200, "a b" * 10, "é" * 20])
async def test_finish_refuses_a_malformed_state_before_the_store(world: World, state: str) -> None:
    statements: list[str] = []
    world.store.trace(statements.append)
    try:
        with pytest.raises(InvalidRequest):
            await world.flow.finish(callback(world, {"state": state, "code": "c"}, "b" * 43))
    finally:
        world.store.trace(None)
    assert statements == []


async def test_finish_consumes_the_state_before_any_other_check(world: World) -> None:
    """A callback refused for its browser has used its state: the genuine one that follows
    finds none (RFC 6819 §5.3.5), and the flow failed closed."""
    binding = "b" * 43
    elicitation_id, state = await opened_state(world, binding)
    with pytest.raises(WrongBrowser):
        await world.flow.finish(callback(world, {"state": state, "code": "c"}, "m" * 43))
    with pytest.raises(InvalidState):
        await world.flow.finish(callback(world, {"state": state, "code": "c"}, binding))
    failed = await world.flow.elicitation(elicitation_id)
    assert failed is not None and failed.status is ElicitationStatus.FAILED
