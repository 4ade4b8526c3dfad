"""What a tool calls when it needs a third-party token: `await broker.require(ctx, "mockhub")`.

Either the caller's connection comes back, or `ConnectionNeeded` carries the answer the tool
must give instead, built for the request's protocol revision here and nowhere else:
- 2025-11-25: JSON-RPC error -32042 with one URL-mode elicitation; the completion is later
  delivered to this MCP session by the CompletionHub;
- 2026-07-28: an InputRequiredResult with one URL-mode `elicitation/create` and a requestState
  (sealed by the SDK, bound to the user and tool) whose nonce is consumed once;
- a client without URL-mode support: a tool error carrying the link, the same link again while
  it is unopened (service/link_fallback.py).
With several accounts at the provider and none named, the remembered default answers, or the
user is asked which one with a form-mode elicitation (service/account_choice.py): in-band on
2025-11-25, as an InputRequiredResult whose sealed requestState says it asked for an account on
2026-07-28; a client without form support gets the most recently used account and a notice.
Tools wrap themselves in `@connected` so that answer reaches the wire.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
)

from service.account_choice import AccountChoice, used_account_notice
from service.completion import CompletionHub
from service.connect_flow import ConnectFlow
from service.errors import (
    ConnectionNeeded,
    InvalidRequestState,
    NeedsReauthorization,
    NewAccountWanted,
    NoAccountChosen,
    UnknownProvider,
)
from service.flow_events import failure_text
from service.identity import Caller, client_name, current_caller
from service.lifecycle import TokenLifecycle
from service.link_fallback import connect_link_answer
from service.mcp_errors import mcp_errors
from service.provider_session import ProviderSession
from service.providers import ProviderConfig
from service.revision import (
    LEGACY_REVISION,
    STATELESS_REVISION,
    is_stateless_revision,
    supports_form_elicitation,
    supports_url_elicitation,
)
from service.security_checks import (
    mint_opaque_id,
    require_account_argument,
    require_request_state_for_provider,
    require_single_use_request_state,
    reusable_link_of_same_user_and_client,
)
from service.settings import Settings
from token_store import Connection, ElicitationStatus, PendingElicitation, Store, UserRef

logger = logging.getLogger(__name__)

CONNECT_INPUT_KEY = "connect"
ACCOUNT_INPUT_KEY = "account"
# What a requestState asked for: the URL-mode connect flow, or the form "which account?".
CONNECT_KIND = "connect"
ACCOUNT_KIND = "account"
_STATE_KINDS = (CONNECT_KIND, ACCOUNT_KIND)
# A link shown again must leave the user time to finish: one closer to expiry is replaced.
MIN_LINK_LIFETIME = 120.0
POLL_INTERVAL = 0.5  # how often a waiting retry re-reads the store (a callback may land on another replica)


@dataclass(frozen=True)
class _RequestState:
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
    def loads(cls, raw: str) -> _RequestState:
        try:
            data = json.loads(raw)
            fields = (data["e"], data["n"], data["p"], data.get("k", CONNECT_KIND))
            if type(data["v"]) is not int or data["v"] != 1 or not all(isinstance(f, str) for f in fields):
                raise ValueError("shape")
            if fields[3] not in _STATE_KINDS:
                raise ValueError("kind")
            return cls(*fields)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise InvalidRequestState("requestState is not valid for this tool") from None


class ConnectionBroker:
    def __init__(
        self,
        settings: Settings,
        store: Callable[[], Store],
        hub: CompletionHub,
        lifecycle: TokenLifecycle,
        flow: ConnectFlow,
        http: httpx.AsyncClient,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._store = store  # a getter: the store is opened in the app lifespan
        self._hub = hub
        self._lifecycle = lifecycle
        self._http = http
        self._clock = clock
        self._flow = flow
        self._draining: Callable[[], bool] = lambda: False

    def stop_holding_when(self, draining: Callable[[], bool]) -> None:
        """A held 2026-07-28 retry answers at once while `draining()` is true: a stopping replica
        must not hold a request past its grace period, and the client's next leg (250 ms later for
        the TypeScript SDK) reaches a replica that is still serving."""
        self._draining = draining

    @property
    def providers(self) -> Mapping[str, ProviderConfig]:
        return self._settings.providers

    def provider(self, name: str) -> ProviderConfig:
        try:
            return self._settings.providers[name]
        except KeyError:
            known = ", ".join(sorted(self._settings.providers)) or "none"
            raise UnknownProvider(f"Unknown provider {name[:64]!r} (known: {known})") from None

    def connect_url(self, elicitation_id: str) -> str:
        return self._settings.connect_url(elicitation_id)

    async def session(
        self,
        ctx: Context[Any, Any],
        provider: str,
        scopes: Sequence[str] = (),
        *,
        account: str | None = None,
        tool: str,
    ) -> ProviderSession:
        """An authenticated session at `provider` for the caller (connecting first if needed)."""
        connection, notice = await self._require(ctx, provider, scopes, account)

        async def reconnect() -> Connection:
            return await self.require(ctx, provider, scopes, account=account)

        api = ProviderSession(
            connection, self.provider(provider), self._lifecycle, self._http, tool=tool, reconnect=reconnect
        )
        api.notice = notice
        return api

    async def require(
        self, ctx: Context[Any, Any], provider: str, scopes: Sequence[str] = (), *, account: str | None = None
    ) -> Connection:
        """The caller's connection to `provider` with at least `scopes` and a fresh access token,
        or `ConnectionNeeded`. With several accounts and none named: the remembered default, else
        the user's answer to "which account?" (or, for a client that cannot ask, the most
        recently used)."""
        connection, _ = await self._require(ctx, provider, scopes, account)
        return connection

    async def _require(
        self, ctx: Context[Any, Any], provider: str, scopes: Sequence[str], account: str | None
    ) -> tuple[Connection, str | None]:
        """`require`, plus the notice to add to the tool's result when an account was picked
        without asking (a client without form-mode elicitation)."""
        # A URL is handed out only after its binding was saved: a store failure ends here.
        with mcp_errors():
            config = self.provider(provider)
            caller = current_caller(ctx)
            require_account_argument(account)
            needed = tuple(sorted(set(scopes or config.scopes)))
            notice = None
            if is_stateless_revision(ctx) and ctx.request_state is not None:
                state = await self._take_request_state(ctx, config)
                if state.kind == CONNECT_KIND:
                    return await self._resume(ctx, caller, config, needed, state, account), None
                answer = (ctx.input_responses or {}).get(ACCOUNT_INPUT_KEY)
                stored = await self._answered(caller, config, answer)
            elif account is None:
                stored, notice = await self._chosen(ctx, caller, config)
            else:
                stored = await self._find(caller, config, account)
            connection = await self._usable(stored, config, needed)
            if connection is not None:
                return connection, notice
            failure = self._hub.take_failure(caller.user, caller.mcp_session_id, config.name)
            if failure is not None:
                # This session's last flow ended without a connection: say what happened once;
                # the next call asks again.
                raise ConnectionNeeded(_tool_error(failure_text(failure.outcome, config.display_name)))
            # Incremental authorization: ask for what the stored grant has plus what is needed;
            # the stored grant stays until the new one arrives.
            wanted = tuple(sorted(set(needed) | set(stored.tokens.scopes if stored else ())))
            raise ConnectionNeeded(await self._ask(ctx, caller, config, wanted, stored))

    async def _chosen(
        self, ctx: Context[Any, Any], caller: Caller, config: ProviderConfig
    ) -> tuple[Connection | None, str | None]:
        """No account named: the only one, the remembered one, or the one the user picks now."""
        store = self._store()
        choice = AccountChoice.of(config, await store.list_connections(caller.user, config.name))
        if len(choice.accounts) <= 1:
            return (choice.accounts[0] if choice.accounts else None), None
        default = await store.get_default_account(caller.user, config.name)
        remembered = next((c for c in choice.accounts if c.key.account == default), None)
        if remembered is not None:
            return remembered, None
        # A remembered account that was disconnected since is no answer: ask again.
        if not supports_form_elicitation(ctx):
            newest = max(choice.accounts, key=lambda c: c.updated_at)
            return newest, used_account_notice(newest, config)
        if is_stateless_revision(ctx):
            slot = one_open_account_question(caller.user, config.name)
            state = _RequestState("", await self._new_nonce(caller.user, slot), config.name, ACCOUNT_KIND)
            raise ConnectionNeeded(
                InputRequiredResult(
                    input_requests={ACCOUNT_INPUT_KEY: ElicitRequest(params=choice.request())},
                    request_state=state.dumps(),
                )
            )
        question = choice.request()
        answer = await ctx.session.elicit_form(
            question.message, question.requested_schema, related_request_id=ctx.request_id
        )
        return await self._answered(caller, config, answer, choice), None

    async def _answered(
        self, caller: Caller, config: ProviderConfig, answer: object, choice: AccountChoice | None = None
    ) -> Connection | None:
        """The account the user chose, remembered as their default; None for "connect another
        account" (the caller then starts the URL-mode flow for a new one)."""
        store = self._store()
        # On 2026-07-28 the options are read again: an account disconnected meanwhile is no answer.
        choice = choice or AccountChoice.of(config, await store.list_connections(caller.user, config.name))
        try:
            picked = choice.pick(answer if isinstance(answer, ElicitResult) else None)
        except NoAccountChosen:
            raise ConnectionNeeded(_tool_error(choice.declined_text())) from None
        except NewAccountWanted:
            # Asked again once the new account is connected, so it is offered too.
            await store.set_default_account(caller.user, config.name, None)
            return None
        await store.set_default_account(caller.user, config.name, picked.key.account)
        return picked

    async def _find(self, caller: Caller, config: ProviderConfig, account: str) -> Connection | None:
        """The named account, by the provider's id or by its label (e.g. a login)."""
        store = self._store()
        found = await store.get_connection(caller.user, config.name, account)
        if found is None:
            matches = [
                c
                for c in await store.list_connections(caller.user, config.name)
                if c.account_label == account
            ]
            found = max(matches, key=lambda c: c.updated_at, default=None)
        return found

    async def _usable(
        self, connection: Connection | None, config: ProviderConfig, needed: tuple[str, ...]
    ) -> Connection | None:
        """`connection` refreshed if needed, or None when only a new authorization will do."""
        if connection is None or not set(needed) <= set(connection.tokens.scopes):
            return None
        try:
            # A ProviderApiError propagates: the provider failed, the grant may be fine.
            return await self._lifecycle.fresh(connection, config)
        except NeedsReauthorization:
            return None

    async def _usable_connection(
        self, caller: Caller, config: ProviderConfig, needed: tuple[str, ...], account: str | None
    ) -> Connection | None:
        """The account the tool named (as a first call finds it), else the most recently updated."""
        if account is not None:
            stored = await self._find(caller, config, account)
        else:
            stored = await self._store().get_connection(caller.user, config.name)
        return await self._usable(stored, config, needed)

    async def _ask(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        config: ProviderConfig,
        scopes: tuple[str, ...],
        held: Connection | None = None,
    ) -> CallToolResult | InputRequiredResult | MCPError:
        """Create a pending elicitation and build the answer for this revision and client; a client
        without URL mode gets the link in a tool error (`_link_in_tool_error`)."""
        if not supports_url_elicitation(ctx):
            return await self._link_in_tool_error(ctx, caller, config, scopes, held)
        stateless = is_stateless_revision(ctx)
        elicitation = await self._flow.create(
            caller.user,
            caller.client_id,
            None if stateless else caller.mcp_session_id,
            config,
            scopes,
            revision=STATELESS_REVISION if stateless else LEGACY_REVISION,
            client_name=client_name(ctx),  # shown on the confirmation page, never checked
        )
        url = self.connect_url(elicitation.id)
        message = (
            f"This tool needs access to your {config.display_name} account. "
            "Open the link, sign in, and approve access; then come back here."
        )
        if stateless:
            return InputRequiredResult(
                input_requests={
                    CONNECT_INPUT_KEY: ElicitRequest(params=ElicitRequestURLParams(message=message, url=url))
                },
                request_state=await self._new_request_state(elicitation),
            )
        self._hub.register(elicitation, ctx.session)
        return UrlElicitationRequiredError(
            [ElicitRequestURLParams(message=message, url=url, elicitation_id=elicitation.id)]
        )

    async def _link_in_tool_error(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        config: ProviderConfig,
        scopes: tuple[str, ...],
        held: Connection | None,
    ) -> CallToolResult:
        """The fallback for a client that declared no URL mode (2025-11-25 and 2026-07-28
        client-elicitation.mdx "Capabilities": a server MUST NOT send a mode the client did not
        declare): the link in a tool error, the same link again while it is unopened."""
        usable_until = self._clock() + min(MIN_LINK_LIFETIME, self._settings.elicitation_ttl / 2)
        reused = reusable_link_of_same_user_and_client(
            await self._store().live_elicitations(caller.user),
            caller.user,
            caller.client_id,
            config.name,
            scopes,
            usable_until,
        )
        elicitation = reused or await self._flow.create(
            caller.user,
            caller.client_id,
            None if is_stateless_revision(ctx) else caller.mcp_session_id,
            config,
            scopes,
            revision=STATELESS_REVISION if is_stateless_revision(ctx) else LEGACY_REVISION,
            client_name=client_name(ctx),
        )
        url = self.connect_url(elicitation.id)
        return connect_link_answer(elicitation, url, config, held, waiting=reused is not None)

    async def _new_request_state(self, elicitation: PendingElicitation) -> str:
        return _RequestState(
            elicitation.id, await self._new_nonce(elicitation.user), elicitation.provider
        ).dumps()

    async def _new_nonce(self, owner: UserRef, slot: str | None = None) -> str:
        # patterns-mrtr: state that must be consumed at most once is enforced server-side.
        nonce = mint_opaque_id(owner)
        await self._store().put_nonce(nonce, self._settings.elicitation_ttl, slot)
        return nonce

    async def _take_request_state(self, ctx: Context[Any, Any], config: ProviderConfig) -> _RequestState:
        """A 2026-07-28 retry's state, checked and consumed (whatever it asked for)."""
        assert ctx.request_state is not None
        state = _RequestState.loads(ctx.request_state)
        require_request_state_for_provider(state.provider, config.name)
        await require_single_use_request_state(self._store(), state.nonce)
        return state

    async def _resume(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        config: ProviderConfig,
        needed: tuple[str, ...],
        state: _RequestState,
        account: str | None,
    ) -> Connection:
        """A 2026-07-28 retry of the connect flow: wait briefly for the flow, then answer. A decline
        or cancel is honoured unless this flow already stored the caller's connection. A named
        `account` must be the one connected: a flow that connected another asks again."""
        response = (ctx.input_responses or {}).get(CONNECT_INPUT_KEY)
        if getattr(response, "action", "accept") != "accept":
            # A user who finished in the browser and then pressed Cancel (or Decline) in the client
            # is connected: the flow's outcome, read from the store, wins over the dialog's.
            finished = await self._store().get_elicitation(state.elicitation_id)
            if (
                finished is not None
                and finished.user == caller.user
                and finished.provider == config.name
                and finished.status is ElicitationStatus.COMPLETE
            ):
                connection = await self._usable_connection(caller, config, needed, account)
                if connection is not None:
                    return connection
            # Declined or cancelled: the link stops working and stops counting against the limit.
            await self._flow.decline(state.elicitation_id)
            raise ConnectionNeeded(_tool_error(f"Connecting {config.display_name} was declined."))

        deadline = self._clock() + self._settings.retry_wait_seconds
        elicitation = await self._store().get_elicitation(state.elicitation_id)
        while True:
            connection = await self._usable_connection(caller, config, needed, account)
            if connection is not None:
                return connection
            live = elicitation is not None and elicitation.user == caller.user and elicitation.status.is_live
            remaining = deadline - self._clock()
            if not live or remaining <= 0 or self._draining():
                break
            assert elicitation is not None
            await self._hub.wait(elicitation, min(POLL_INTERVAL, remaining))
            elicitation = await self._store().get_elicitation(state.elicitation_id)

        if elicitation is not None and elicitation.status is ElicitationStatus.FAILED:
            failure = self._hub.failure_of(elicitation.id)
            raise ConnectionNeeded(_tool_error(failure_text(failure, config.display_name)))
        if live and elicitation is not None:
            # Still in progress: ask again with state only, so the client does not prompt twice.
            raise ConnectionNeeded(
                InputRequiredResult(request_state=await self._new_request_state(elicitation))
            )
        raise ConnectionNeeded(await self._ask(ctx, caller, config, needed))


def one_open_account_question(user: UserRef, provider: str) -> str:
    """The store slot of a user's "which account?" at one provider. Asking again replaces the
    question's nonce (an older state is then refused as used), so a user holds one such nonce per
    provider however often they call, as `max_pending_per_user` bounds their connect flows.

    2026-07-28/patterns-mrtr.mdx "Server Requirements (Basic Workflow)": "Servers MUST NOT assume
    that clients will fulfill the `inputRequests` or retry the original request"."""
    return json.dumps(["account-question", user.iss, user.sub, provider], separators=(",", ":"))


def _tool_error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
