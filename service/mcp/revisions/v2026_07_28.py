"""The broker's answers on 2026-07-28 and later: an InputRequiredResult and a requestState.

No request stays open between the question and the retry (2026-07-28/patterns-mrtr.mdx): the
question goes out as an InputRequiredResult holding one elicitation request (URL mode to
connect, form mode for "which account?") and a requestState that the SDK seals, binds to the
user and tool, and gives an expiry; inside it, `RequestState` names the question, and a nonce
recorded in the store makes it good for one retry. The retry is read here (`resume`): an answer
to "which account?" goes back to the broker; a connect retry is held briefly while the flow
finishes in the browser, then answers with the connection, the flow's failure, a decline, or
the same question again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context
from mcp_types import ElicitRequest, ElicitRequestURLParams, InputRequiredResult

from service.errors import InvalidRequestState
from service.flow.connect import ConnectFlow
from service.flow.security_checks import (
    elicitation_of_same_user,
    mint_opaque_id,
    require_request_state_for_provider,
    require_single_use_request_state,
)
from service.mcp.account_choice import AccountChoice
from service.mcp.completion.hub import CompletionHub
from service.mcp.errors import ConnectionNeeded, tool_error
from service.mcp.identity import Caller
from service.mcp.revisions.answers import AccountAnswered, ConnectAnew, Resumed
from service.mcp.revisions.capabilities import STATELESS_REVISION
from service.observability.flow_events import failure_text
from service.providers.catalogue import ProviderConfig
from service.settings import Settings
from token_store import Connection, ElicitationStatus, PendingElicitation, Store, UserRef

CONNECT_INPUT_KEY = "connect"
ACCOUNT_INPUT_KEY = "account"
# What a requestState asked for: the URL-mode connect flow, or the form "which account?".
CONNECT_KIND = "connect"
ACCOUNT_KIND = "account"
_STATE_KINDS = (CONNECT_KIND, ACCOUNT_KIND)
POLL_INTERVAL = 0.5  # how often a held retry re-reads the store (a callback may land on another replica)


@dataclass(frozen=True)
class RequestState:
    """Plaintext inside the SDK-sealed requestState (the SDK adds expiry, principal and tool binding).

    `kind` says which question the state belongs to, so an answer is read only as an answer to
    that question; a connect state omits it (as states minted before kinds existed did)."""

    elicitation_id: str
    nonce: str
    provider: str
    kind: str = CONNECT_KIND

    def dumps(self) -> str:
        data = {"v": 1, "e": self.elicitation_id, "n": self.nonce, "p": self.provider}
        if self.kind != CONNECT_KIND:
            data["k"] = self.kind
        return json.dumps(data)

    @classmethod
    def loads(cls, raw: str) -> RequestState:
        try:
            data = json.loads(raw)
            fields = (data["e"], data["n"], data["p"], data.get("k", CONNECT_KIND))
            if type(data["v"]) is not int or data["v"] != 1 or not all(isinstance(f, str) for f in fields):
                raise ValueError("shape")
            # mutant: broker.request_state_kind
            if fields[3] not in _STATE_KINDS:
                raise ValueError("kind")
            return cls(*fields)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise InvalidRequestState("requestState is not valid for this tool") from None


def one_open_account_question(user: UserRef, provider: str) -> str:
    """The store slot of a user's "which account?" at one provider. Asking again replaces the
    question's nonce (an older state is then refused as used), so a user holds one such nonce per
    provider however often they call, as `max_pending_per_user` bounds their connect flows.

    2026-07-28/patterns-mrtr.mdx "Server Requirements (Basic Workflow)": "Servers MUST NOT assume
    that clients will fulfill the `inputRequests` or retry the original request"."""
    return json.dumps(["account-question", user.iss, user.sub, provider], separators=(",", ":"))


class StatelessAnswers:
    revision = STATELESS_REVISION

    def __init__(
        self,
        settings: Settings,
        store: Store,
        hub: CompletionHub,
        flow: ConnectFlow,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._store = store
        self._hub = hub
        self._flow = flow
        self._clock = clock
        self._draining: Callable[[], bool] = lambda: False

    def stop_holding_when(self, draining: Callable[[], bool]) -> None:
        self._draining = draining

    def session_of(self, caller: Caller) -> str | None:
        return None  # no MCP session: the retry carries everything

    async def ask_connect(
        self, ctx: Context[Any, Any], elicitation: PendingElicitation, message: str, url: str
    ) -> InputRequiredResult:
        return InputRequiredResult(
            input_requests={
                CONNECT_INPUT_KEY: ElicitRequest(params=ElicitRequestURLParams(message=message, url=url))
            },
            request_state=await self._new_request_state(elicitation),
        )

    async def ask_account(
        self, ctx: Context[Any, Any], caller: Caller, choice: AccountChoice
    ) -> InputRequiredResult:
        """The question as the tool's answer: its answer comes with the retry (`resume`)."""
        config = choice.provider
        slot = one_open_account_question(caller.user, config.name)
        # mutant: broker.one_open_account_question "slot)" -> "None)"
        state = RequestState("", await self._new_nonce(caller.user, slot), config.name, ACCOUNT_KIND)
        return InputRequiredResult(
            input_requests={ACCOUNT_INPUT_KEY: ElicitRequest(params=choice.request())},
            request_state=state.dumps(),
        )

    def untold_failure(self, caller: Caller, config: ProviderConfig) -> None:
        return None  # a flow's failure is told on the retry that carries its requestState (`resume`)

    async def resume(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        config: ProviderConfig,
        find: Callable[[], Awaitable[Connection | None]],
    ) -> Resumed:
        """A retry carrying a requestState, checked and consumed whatever it asked for. An answer
        to "which account?" goes back to the broker as it is; a connect retry answers with the
        connection `find` returns once the flow stored it, or `ConnectAnew` when the flow ended
        without one and the user must be asked anew. A call without a requestState resumes
        nothing."""
        if ctx.request_state is None:
            return None
        state = RequestState.loads(ctx.request_state)
        require_request_state_for_provider(state.provider, config.name)
        await require_single_use_request_state(self._store, state.nonce)
        if state.kind == ACCOUNT_KIND:
            return AccountAnswered((ctx.input_responses or {}).get(ACCOUNT_INPUT_KEY))
        response = (ctx.input_responses or {}).get(CONNECT_INPUT_KEY)
        if getattr(response, "action", "accept") != "accept":
            return await self._declined(caller, config, state, find)
        return await self._held(caller, config, state, find)

    async def _declined(
        self,
        caller: Caller,
        config: ProviderConfig,
        state: RequestState,
        find: Callable[[], Awaitable[Connection | None]],
    ) -> Connection:
        """A decline or cancel is honoured unless this flow already stored the caller's
        connection: a user who finished in the browser and then pressed Cancel (or Decline) in
        the client is connected; the flow's outcome, read from the store, wins over the dialog's."""
        finished = elicitation_of_same_user(await self._flow.elicitation(state.elicitation_id), caller.user)
        if (
            finished is not None
            and finished.provider == config.name
            and finished.status is ElicitationStatus.COMPLETE
        ):
            connection = await find()
            if connection is not None:
                return connection
        # Declined or cancelled: the link stops working and stops counting against the limit. Only
        # the caller's own flow: another user's is no business of this retry.
        if finished is not None:
            await self._flow.decline(state.elicitation_id)
        raise ConnectionNeeded(tool_error(f"Connecting {config.display_name} was declined."))

    async def _held(
        self,
        caller: Caller,
        config: ProviderConfig,
        state: RequestState,
        find: Callable[[], Awaitable[Connection | None]],
    ) -> Connection | ConnectAnew:
        """Wait up to `retry_wait_seconds` for the flow (not while draining), then answer."""
        deadline = self._clock() + self._settings.retry_wait_seconds
        while True:
            elicitation = elicitation_of_same_user(
                await self._flow.elicitation(state.elicitation_id), caller.user
            )
            connection = await find()
            if connection is not None:
                return connection
            live = elicitation is not None and elicitation.status.is_live
            remaining = deadline - self._clock()
            if not live or remaining <= 0 or self._draining():
                break
            assert elicitation is not None
            await self._hub.wait(elicitation, min(POLL_INTERVAL, remaining))

        if elicitation is not None and elicitation.status is ElicitationStatus.FAILED:
            failure = self._hub.failure_of(elicitation.id)
            raise ConnectionNeeded(tool_error(failure_text(failure, config.display_name)))
        if live and elicitation is not None:
            # Still in progress: ask again with state only, so the client does not prompt twice.
            raise ConnectionNeeded(
                InputRequiredResult(request_state=await self._new_request_state(elicitation))
            )
        return ConnectAnew()

    async def _new_request_state(self, elicitation: PendingElicitation) -> str:
        return RequestState(
            elicitation.id, await self._new_nonce(elicitation.user), elicitation.provider
        ).dumps()

    async def _new_nonce(self, owner: UserRef, slot: str | None = None) -> str:
        # patterns-mrtr: state that must be consumed at most once is enforced server-side.
        nonce = mint_opaque_id(owner, self._settings.slot_tags())
        await self._store.put_nonce(nonce, self._settings.elicitation_ttl, slot)
        return nonce
