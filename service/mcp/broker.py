"""What a tool calls when it needs a third-party token: `await broker.require(ctx, "mockhub")`.

Either the caller's connection comes back, or `ConnectionNeeded` carries the answer the tool
must give instead. The broker is one resolver, the same on every revision: the named account,
else the only one, the remembered default, or the user's answer to "which account?"
(service/mcp/account_choice.py; a client without form support gets the most recently used and a
notice), refreshed if needed; else a new connect flow. How a question reaches the client is the
revision's, and the broker reaches it through one interface, `Revisions.of(ctx)`
(service/mcp/revisions/tool_call.py), which reads the request once and answers through:
- 2025-11-25 (service/mcp/revisions/v2025_11_25.py): JSON-RPC error -32042 and a completion
  notice; "which account?" asked in-band;
- 2026-07-28 (service/mcp/revisions/v2026_07_28.py): an InputRequiredResult and a requestState,
  read again on the retry;
- a client without URL-mode support, on either: a tool error carrying the link, the same link
  again while it is unopened (service/mcp/revisions/link_fallback.py).
Tools wrap themselves in `@connected` so that answer reaches the wire.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from mcp.server.mcpserver import Context
from mcp_types import ElicitResult

from service.errors import NeedsReauthorization, NewAccountWanted, NoAccountChosen, UnknownProvider
from service.flow.connect import ConnectFlow
from service.flow.connections import Connections
from service.flow.lifecycle import TokenLifecycle
from service.flow.security_checks import require_account_argument
from service.mcp.account_choice import AccountChoice, used_account_notice
from service.mcp.completion.hub import CompletionHub
from service.mcp.errors import ConnectionNeeded, mcp_errors, tool_error
from service.mcp.identity import Caller
from service.mcp.provider_session import ProviderSession
from service.mcp.revisions.answers import AccountAnswered, ConnectAnew
from service.mcp.revisions.tool_call import Revisions, ToolCall
from service.providers.catalogue import ProviderConfig
from service.settings import Settings
from token_store import Connection, Store


class ConnectionBroker:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        hub: CompletionHub,
        lifecycle: TokenLifecycle,
        flow: ConnectFlow,
        http: httpx.AsyncClient,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._lifecycle = lifecycle
        self._http = http
        self._connections = Connections(store)
        # Everything that differs between protocol revisions, and between clients, goes through it.
        self._revisions = Revisions(settings, store, hub, flow, clock)

    def stop_holding_when(self, draining: Callable[[], bool]) -> None:
        """A held 2026-07-28 retry answers at once while `draining()` is true: a stopping replica
        must not hold a request past its grace period, and the client's next leg (250 ms later for
        the TypeScript SDK) reaches a replica that is still serving."""
        self._revisions.stop_holding_when(draining)

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
            call = self._revisions.of(ctx)  # the one reading of ctx: caller, revision, client
            require_account_argument(account)
            needed = tuple(sorted(set(scopes or config.scopes)))
            # A retry answering a question this server asked: the connect flow's outcome, or the
            # answer to "which account?".
            resumed = await call.resume(
                config, lambda: self._usable_connection(call.caller, config, needed, account)
            )
            if isinstance(resumed, Connection):
                return resumed, None
            if isinstance(resumed, ConnectAnew):
                raise ConnectionNeeded(await call.ask_connect(config, needed))
            notice = None
            if isinstance(resumed, AccountAnswered):
                stored = await self._answered(call.caller, config, resumed.answer)
            elif account is None:
                stored, notice = await self._chosen(call, config)
            else:
                stored = await self._connections.named(call.caller.user, config.name, account)
            connection = await self._usable(stored, config, needed)
            if connection is not None:
                return connection, notice
            untold = call.untold_failure(config)
            if untold is not None:
                raise ConnectionNeeded(untold)
            # Incremental authorization: ask for what the stored grant has plus what is needed;
            # the stored grant stays until the new one arrives.
            wanted = tuple(sorted(set(needed) | set(stored.tokens.scopes if stored else ())))
            raise ConnectionNeeded(await call.ask_connect(config, wanted, stored))

    async def _chosen(self, call: ToolCall, config: ProviderConfig) -> tuple[Connection | None, str | None]:
        """No account named: the only one, the remembered one, or the one the user picks now."""
        caller = call.caller
        choice = AccountChoice.of(config, await self._connections.of_user(caller.user, config.name))
        if len(choice.accounts) <= 1:
            return (choice.accounts[0] if choice.accounts else None), None
        default = await self._connections.default_account(caller.user, config.name)
        remembered = next((c for c in choice.accounts if c.key.account == default), None)
        if remembered is not None:
            return remembered, None
        # A remembered account that was disconnected since is no answer: ask again.
        if not call.form_mode:
            newest = max(choice.accounts, key=lambda c: c.updated_at)
            return newest, used_account_notice(newest, config)
        answer = await call.ask_account(choice)
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
