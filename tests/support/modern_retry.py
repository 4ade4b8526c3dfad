"""A 2026-07-28 retry, driven against a ConnectionBroker in process (unit tests of the broker's
resume path): a real SQLite store, a context standing in for the SDK's, the browser leg as the
store's own transitions (opened, then completed with the connection), as /connect and /callback
make them."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mcp_types import (
    ClientCapabilities,
    ElicitationCapability,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    UrlElicitationCapability,
)

from service.mcp.broker import ConnectionBroker
from service.mcp.errors import connected
from service.mcp.revisions.v2026_07_28 import CONNECT_INPUT_KEY
from token_store import Connection, ConnectionKey, ElicitationStatus, SQLiteStore, TokenSet, UserRef

MODERN = "2026-07-28"
URL_ONLY = ClientCapabilities(elicitation=ElicitationCapability(url=UrlElicitationCapability()))
ACTIONS = ("decline", "cancel")


@dataclass
class World:
    store: SQLiteStore
    broker: ConnectionBroker
    alice: UserRef

    async def browser_completes(self, elicitation_id: str, account: str = "42") -> Connection:
        """What /connect and /callback do for a flow the user approves: opened, then the token set
        stored and the elicitation completed in one step."""
        opened = await self.store.transition_elicitation(
            elicitation_id, ElicitationStatus.PENDING, ElicitationStatus.OPENED
        )
        assert opened is not None
        connection = connection_of(self.alice, account, updated_at=time.time())
        assert await self.store.complete_elicitation(connection, elicitation_id) is not None
        return connection

    async def status(self, elicitation_id: str) -> ElicitationStatus:
        stored = await self.store.get_elicitation(elicitation_id)
        assert stored is not None
        return stored.status


def connection_of(user: UserRef, account: str, updated_at: float) -> Connection:
    tokens = TokenSet(
        access_token=secrets.token_urlsafe(8), expires_at=time.time() + 3600, scopes=("read:user",)
    )
    key = ConnectionKey(user, "mockhub", account)
    return Connection(key, tokens, f"login-{account}", updated_at, updated_at)


def ctx(request_state: str | None = None, input_responses: dict[str, Any] | None = None) -> Any:
    return SimpleNamespace(
        protocol_version=MODERN,
        client_capabilities=URL_ONLY,
        session=None,
        request_id=7,
        request_state=request_state,
        input_responses=input_responses,
        headers={},
    )


async def whoami(world: World, context: Any, account: str | None = None) -> Any:
    """What a tool answers: the connection's account, or the outcome `@connected` delivers."""

    @connected
    async def tool() -> Any:
        return (await world.broker.require(context, "mockhub", account=account)).key.account

    return await tool()


async def ask(world: World, account: str | None = None) -> tuple[str, str]:
    """The first call, not connected: the requestState and the elicitation id of its link."""
    asked = await whoami(world, ctx(), account)
    assert isinstance(asked, InputRequiredResult) and asked.request_state is not None
    params = asked.input_requests[CONNECT_INPUT_KEY].params  # type: ignore[index]
    assert isinstance(params, ElicitRequestURLParams)
    [elicitation_id] = parse_qs(urlsplit(params.url).query)["elicitationId"]
    return asked.request_state, elicitation_id


def retry_with(state: str, action: str) -> Any:
    return ctx(request_state=state, input_responses={CONNECT_INPUT_KEY: ElicitResult(action=action)})  # type: ignore[arg-type]
