"""One tool call as the broker sees it: who calls, which revision answers, what the client can show.

`ConnectionBroker` holds one `Revisions`; `Revisions.of(ctx)` reads the request's `ctx` (the caller,
the protocol revision, the elicitation modes the client declared) and gives the broker a
`ToolCall`, through which every question goes: whether the call resumes one asked before, which
account, and connect. The revision's module answers each (`RevisionAnswers`); a client without
URL mode, on either revision, gets the link in a tool error instead of a URL-mode question
(service/mcp/revisions/link_fallback.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context
from mcp_types import ElicitResult

from service.flow.connect import ConnectFlow
from service.mcp.account_choice import AccountChoice
from service.mcp.completion.hub import CompletionHub
from service.mcp.errors import ConnectionNeeded
from service.mcp.identity import Caller, client_name, current_caller
from service.mcp.revisions.answers import Resumed, RevisionAnswers, ToolAnswer
from service.mcp.revisions.capabilities import (
    is_stateless_revision,
    supports_form_elicitation,
    supports_url_elicitation,
)
from service.mcp.revisions.link_fallback import connect_link_answer
from service.mcp.revisions.v2025_11_25 import LegacyAnswers
from service.mcp.revisions.v2026_07_28 import StatelessAnswers
from service.providers.catalogue import ProviderConfig
from service.settings import Settings
from token_store import Connection, PendingElicitation, Store

# A link shown again must leave the user time to finish: one closer to expiry is replaced.
MIN_LINK_LIFETIME = 120.0


class Revisions:
    """Both revisions' answers, and what asking to connect needs (the connect flow, the URLs)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        hub: CompletionHub,
        flow: ConnectFlow,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.flow = flow
        self.clock = clock
        self._legacy = LegacyAnswers(hub)
        self._stateless = StatelessAnswers(settings, store, hub, flow, clock)

    def stop_holding_when(self, draining: Callable[[], bool]) -> None:
        """A held 2026-07-28 retry answers at once while `draining()` is true."""
        self._stateless.stop_holding_when(draining)

    def of(self, ctx: Context[Any, Any]) -> ToolCall:
        """This call's caller, the revision that answers it, and the modes its client declared."""
        answers: RevisionAnswers = self._stateless if is_stateless_revision(ctx) else self._legacy
        return ToolCall(self, ctx, current_caller(ctx), answers)


@dataclass(frozen=True)
class ToolCall:
    """One tool call's questions, put the way its revision and its client take them."""

    revisions: Revisions
    ctx: Context[Any, Any]
    caller: Caller
    answers: RevisionAnswers

    @property
    def form_mode(self) -> bool:
        """Whether "which account?" can be asked: the client declared form-mode elicitation."""
        return supports_form_elicitation(self.ctx)

    async def resume(
        self, config: ProviderConfig, find: Callable[[], Awaitable[Connection | None]]
    ) -> Resumed:
        """What a retry of a question asked before answers (`RevisionAnswers.resume`); None for a
        first call."""
        return await self.answers.resume(self.ctx, self.caller, config, find)

    def untold_failure(self, config: ProviderConfig) -> ToolAnswer | None:
        """The tool error saying, once, that the caller's last flow ended without a connection
        (`RevisionAnswers.untold_failure`)."""
        return self.answers.untold_failure(self.caller, config)

    async def ask_account(self, choice: AccountChoice) -> ElicitResult:
        """The user's answer to "which account?", or `ConnectionNeeded` carrying the question when
        its answer comes with a retry."""
        answer = await self.answers.ask_account(self.ctx, self.caller, choice)
        if not isinstance(answer, ElicitResult):
            raise ConnectionNeeded(answer)
        return answer

    async def ask_connect(
        self, config: ProviderConfig, scopes: tuple[str, ...], held: Connection | None = None
    ) -> ToolAnswer:
        """A new pending elicitation, and the answer asking the client to open its link: the
        revision's URL-mode question, or for a client without URL mode the link in a tool error
        (2025-11-25 and 2026-07-28 client-elicitation.mdx "Capabilities": a server MUST NOT send a
        mode the client did not declare), the same link again while it is unopened."""
        if not supports_url_elicitation(self.ctx):
            return await self._link_in_tool_error(config, scopes, held)
        elicitation = await self._new_elicitation(config, scopes)
        message = (
            f"This tool needs access to your {config.display_name} account. "
            "Open the link, sign in, and approve access; then come back here."
        )
        return await self.answers.ask_connect(self.ctx, elicitation, message, self._url(elicitation))

    async def _link_in_tool_error(
        self, config: ProviderConfig, scopes: tuple[str, ...], held: Connection | None
    ) -> ToolAnswer:
        settings = self.revisions.settings
        usable_until = self.revisions.clock() + min(MIN_LINK_LIFETIME, settings.elicitation_ttl / 2)
        reused = await self.revisions.flow.link_to_show_again(
            self.caller.user, self.caller.client_id, config.name, scopes, usable_until
        )
        elicitation = reused or await self._new_elicitation(config, scopes)
        url = self._url(elicitation)
        return connect_link_answer(elicitation, url, config, held, waiting=reused is not None)

    async def _new_elicitation(self, config: ProviderConfig, scopes: tuple[str, ...]) -> PendingElicitation:
        return await self.revisions.flow.create(
            self.caller.user,
            self.caller.client_id,
            self.answers.session_of(self.caller),
            config,
            scopes,
            revision=self.answers.revision,
            client_name=client_name(self.ctx),  # shown on the confirmation page, never checked
        )

    def _url(self, elicitation: PendingElicitation) -> str:
        return self.revisions.settings.connect_url(elicitation.id)
