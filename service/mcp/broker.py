"""What a tool calls when it needs a third-party token: `await broker.require(ctx, "mockhub")`.

Either the caller's connection comes back, or `ConnectionNeeded` carries the answer the tool
must give instead. The broker is one resolver, the same on every revision: the named account,
else the only one, the remembered default, or the user's answer to "which account?"
(service/mcp/account_choice.py; a client without form support gets the most recently used and a
notice), refreshed if needed; else a new connect flow. How a question reaches the client is the
revision's, each in one small module:
- 2025-11-25 (service/mcp/revisions/v2025_11_25.py): JSON-RPC error -32042 and a completion notice; "which
  account?" asked in-band;
- 2026-07-28 (service/mcp/revisions/v2026_07_28.py): an InputRequiredResult and a requestState, read again
  on the retry;
- a client without URL-mode support, on either: a tool error carrying the link, the same link
  again while it is unopened (service/mcp/revisions/link_fallback.py).
Tools wrap themselves in `@connected` so that answer reaches the wire.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from service.errors import (
    ConnectionNeeded,
    NeedsReauthorization,
    NewAccountWanted,
    NoAccountChosen,
    UnknownProvider,
)
from service.flow.connect import ConnectFlow
from service.flow.connections import Connections
from service.flow.lifecycle import TokenLifecycle
from service.flow.security_checks import require_account_argument
from service.mcp.account_choice import AccountChoice, used_account_notice
from service.mcp.completion.hub import CompletionHub
from service.mcp.errors import mcp_errors, tool_error
from service.mcp.identity import Caller, client_name, current_caller
from service.mcp.provider_session import ProviderCalls, ProviderSession
from service.mcp.revisions.capabilities import (
    is_stateless_revision,
    supports_form_elicitation,
    supports_url_elicitation,
)
from service.mcp.revisions.link_fallback import connect_link_answer
from service.mcp.revisions.v2025_11_25 import LegacyAnswers
from service.mcp.revisions.v2026_07_28 import StatelessAnswers
from service.observability.flow_events import failure_text
from service.providers.catalogue import ProviderConfig
from service.settings import Settings
from token_store import Connection, PendingElicitation, Store

# A link shown again must leave the user time to finish: one closer to expiry is replaced.
MIN_LINK_LIFETIME = 120.0


class RevisionAnswers(Protocol):
    """How one protocol revision puts the broker's questions to the client."""

    revision: str  # the revision family, as metrics label it

    def session_of(self, caller: Caller) -> str | None:
        """The MCP session a flow's completion is delivered to, if any."""
        ...

    async def ask_connect(
        self, ctx: Context[Any, Any], elicitation: PendingElicitation, message: str, url: str
    ) -> MCPError | InputRequiredResult:
        """The answer asking the client to open `url` (URL mode)."""
        ...

    async def ask_account(
        self, ctx: Context[Any, Any], caller: Caller, choice: AccountChoice
    ) -> ElicitResult:
        """The user's answer to "which account?" (form mode), or `ConnectionNeeded` carrying the
        question when the answer comes with a retry."""
        ...


class ConnectionBroker:
    def __init__(
        self,
        settings: Settings,
        store: Callable[[], Store],
        hub: CompletionHub,
        lifecycle: TokenLifecycle,
        flow: ConnectFlow,
        calls: ProviderCalls,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._hub = hub
        self._lifecycle = lifecycle
        self._calls = calls
        self._clock = clock
        self._flow = flow
        self._connections = Connections(store)
        self._legacy = LegacyAnswers(hub)
        self._stateless = StatelessAnswers(settings, store, hub, flow, clock)

    def stop_holding_when(self, draining: Callable[[], bool]) -> None:
        """A held 2026-07-28 retry answers at once while `draining()` is true: a stopping replica
        must not hold a request past its grace period, and the client's next leg (250 ms later for
        the TypeScript SDK) reaches a replica that is still serving."""
        self._stateless.stop_holding_when(draining)

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
        api = ProviderSession(connection, self.provider(provider), self._lifecycle, self._calls, tool=tool)
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

    def _answers(self, ctx: Context[Any, Any]) -> RevisionAnswers:
        return self._stateless if is_stateless_revision(ctx) else self._legacy

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
                # A retry answering a question this server asked: the connect flow's outcome, or
                # the answer to "which account?".
                resumed = await self._stateless.resume(
                    ctx, caller, config, lambda: self._usable_connection(caller, config, needed, account)
                )
                if isinstance(resumed, Connection):
                    return resumed, None
                if resumed is None:
                    raise ConnectionNeeded(await self._ask(ctx, caller, config, needed))
                stored = await self._answered(caller, config, resumed.answer)
            elif account is None:
                stored, notice = await self._chosen(ctx, caller, config)
            else:
                stored = await self._connections.named(caller.user, config.name, account)
            connection = await self._usable(stored, config, needed)
            if connection is not None:
                return connection, notice
            failure = self._hub.take_failure(caller.user, caller.mcp_session_id, config.name)
            if failure is not None:
                # This session's last flow ended without a connection: say what happened once;
                # the next call asks again.
                raise ConnectionNeeded(tool_error(failure_text(failure.outcome, config.display_name)))
            # Incremental authorization: ask for what the stored grant has plus what is needed;
            # the stored grant stays until the new one arrives.
            wanted = tuple(sorted(set(needed) | set(stored.tokens.scopes if stored else ())))
            raise ConnectionNeeded(await self._ask(ctx, caller, config, wanted, stored))

    async def _chosen(
        self, ctx: Context[Any, Any], caller: Caller, config: ProviderConfig
    ) -> tuple[Connection | None, str | None]:
        """No account named: the only one, the remembered one, or the one the user picks now."""
        choice = AccountChoice.of(config, await self._connections.of_user(caller.user, config.name))
        if len(choice.accounts) <= 1:
            return (choice.accounts[0] if choice.accounts else None), None
        default = await self._connections.default_account(caller.user, config.name)
        remembered = next((c for c in choice.accounts if c.key.account == default), None)
        if remembered is not None:
            return remembered, None
        # A remembered account that was disconnected since is no answer: ask again.
        if not supports_form_elicitation(ctx):
            newest = max(choice.accounts, key=lambda c: c.updated_at)
            return newest, used_account_notice(newest, config)
        answer = await self._answers(ctx).ask_account(ctx, caller, choice)
        return await self._answered(caller, config, answer, choice), None

    async def _answered(
        self, caller: Caller, config: ProviderConfig, answer: object, choice: AccountChoice | None = None
    ) -> Connection | None:
        """The account the user chose, remembered as their default; None for "connect another
        account" (the caller then starts the URL-mode flow for a new one)."""
        # On a retry the options are read again: an account disconnected meanwhile is no answer.
        choice = choice or AccountChoice.of(config, await self._connections.of_user(caller.user, config.name))
        try:
            picked = choice.pick(answer if isinstance(answer, ElicitResult) else None)
        except NoAccountChosen:
            raise ConnectionNeeded(tool_error(choice.declined_text())) from None
        except NewAccountWanted:
            # Asked again once the new account is connected, so it is offered too.
            await self._connections.remember_default(caller.user, config.name, None)
            return None
        await self._connections.remember_default(caller.user, config.name, picked)
        return picked

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
        # mutant: broker.resume_named_account
        if account is not None:
            stored = await self._connections.named(caller.user, config.name, account)
        else:
            stored = await self._connections.newest(caller.user, config.name)
        return await self._usable(stored, config, needed)

    async def _ask(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        config: ProviderConfig,
        scopes: tuple[str, ...],
        held: Connection | None = None,
    ) -> CallToolResult | InputRequiredResult | MCPError:
        """Create a pending elicitation and the revision's answer asking to open its link; a
        client without URL mode gets the link in a tool error (`_link_in_tool_error`)."""
        answers = self._answers(ctx)
        if not supports_url_elicitation(ctx):
            return await self._link_in_tool_error(ctx, answers, caller, config, scopes, held)
        elicitation = await self._flow.create(
            caller.user,
            caller.client_id,
            answers.session_of(caller),
            config,
            scopes,
            revision=answers.revision,
            client_name=client_name(ctx),  # shown on the confirmation page, never checked
        )
        message = (
            f"This tool needs access to your {config.display_name} account. "
            "Open the link, sign in, and approve access; then come back here."
        )
        return await answers.ask_connect(ctx, elicitation, message, self.connect_url(elicitation.id))

    async def _link_in_tool_error(
        self,
        ctx: Context[Any, Any],
        answers: RevisionAnswers,
        caller: Caller,
        config: ProviderConfig,
        scopes: tuple[str, ...],
        held: Connection | None,
    ) -> CallToolResult:
        """The fallback for a client that declared no URL mode (2025-11-25 and 2026-07-28
        client-elicitation.mdx "Capabilities": a server MUST NOT send a mode the client did not
        declare): the link in a tool error, the same link again while it is unopened."""
        usable_until = self._clock() + min(MIN_LINK_LIFETIME, self._settings.elicitation_ttl / 2)
        reused = await self._flow.link_to_show_again(
            caller.user, caller.client_id, config.name, scopes, usable_until
        )
        elicitation = reused or await self._flow.create(
            caller.user,
            caller.client_id,
            answers.session_of(caller),
            config,
            scopes,
            revision=answers.revision,
            client_name=client_name(ctx),
        )
        url = self.connect_url(elicitation.id)
        return connect_link_answer(elicitation, url, config, held, waiting=reused is not None)
