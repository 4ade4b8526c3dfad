"""The broker's answers on 2025-11-25: error -32042 and a completion notice; questions in-band.

To connect, the tool call ends with JSON-RPC error -32042 (URLElicitationRequiredError) carrying
one URL-mode elicitation, and the MCP session that asked is registered with the CompletionHub,
which sends `notifications/elicitation/complete` when the flow ends; the client then calls the
tool again (2025-11-25/client-elicitation.mdx, URL mode). That call is a new one, resuming
nothing; a flow that ended without a connection is told to it once, from the hub.
"Which account?" is a form-mode `elicitation/create` sent while the tool call waits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import Context
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import CallToolResult, ElicitRequestURLParams, ElicitResult

from service.mcp.account_choice import AccountChoice
from service.mcp.completion.hub import CompletionHub
from service.mcp.errors import tool_error
from service.mcp.identity import Caller
from service.mcp.revisions.capabilities import LEGACY_REVISION
from service.observability.flow_events import failure_text
from service.providers.catalogue import ProviderConfig
from token_store import Connection, PendingElicitation


class LegacyAnswers:
    revision = LEGACY_REVISION

    def __init__(self, hub: CompletionHub) -> None:
        self._hub = hub

    def session_of(self, caller: Caller) -> str | None:
        return caller.mcp_session_id  # where the completion notice goes

    async def resume(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        config: ProviderConfig,
        find: Callable[[], Awaitable[Connection | None]],
    ) -> None:
        return None  # the call after the completion notice is a first call again

    def untold_failure(self, caller: Caller, config: ProviderConfig) -> CallToolResult | None:
        # This session's last flow ended without a connection: say what happened once; the next
        # call asks again.
        failure = self._hub.take_failure(caller.user, caller.mcp_session_id, config.name)
        return None if failure is None else tool_error(failure_text(failure.outcome, config.display_name))

    async def ask_connect(
        self, ctx: Context[Any, Any], elicitation: PendingElicitation, message: str, url: str
    ) -> UrlElicitationRequiredError:
        self._hub.register(elicitation, ctx.session)
        return UrlElicitationRequiredError(
            [ElicitRequestURLParams(message=message, url=url, elicitation_id=elicitation.id)]
        )

    async def ask_account(
        self, ctx: Context[Any, Any], caller: Caller, choice: AccountChoice
    ) -> ElicitResult:
        question = choice.request()
        answer: ElicitResult = await ctx.session.elicit_form(
            question.message, question.requested_schema, related_request_id=ctx.request_id
        )
        return answer
