"""The interface each protocol revision implements: every question the broker asks that the two
revisions answer differently, and the words their answers come back in.

`ConnectionBroker` never names a revision: it holds `Revisions` (service/mcp/revisions/tool_call.py),
which picks the module that answers for the request (v2025_11_25.py or v2026_07_28.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from service.mcp.account_choice import AccountChoice
from service.mcp.identity import Caller
from service.providers.catalogue import ProviderConfig
from token_store import Connection, PendingElicitation

# What a tool answers instead of its result while a connection is needed: -32042 (2025-11-25), an
# InputRequiredResult (2026-07-28), or a tool error (a decline, a failure, the link).
ToolAnswer = CallToolResult | InputRequiredResult | MCPError


@dataclass(frozen=True)
class AccountAnswered:
    """A retry carrying the answer to "which account?" (read by `AccountChoice.pick`)."""

    answer: object


@dataclass(frozen=True)
class ConnectAnew:
    """A retry whose flow ended without a connection for it: the user is asked to connect anew."""


# What a call resumes; None when it resumes nothing (a first call).
Resumed = Connection | AccountAnswered | ConnectAnew | None


class RevisionAnswers(Protocol):
    """How one protocol revision puts the broker's questions to the client and reads the answers."""

    revision: str  # the revision family, as metrics label it

    def session_of(self, caller: Caller) -> str | None:
        """The MCP session a flow's completion is delivered to, if any."""
        ...

    async def resume(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        config: ProviderConfig,
        find: Callable[[], Awaitable[Connection | None]],
    ) -> Resumed:
        """What this call answers, when it is a retry of a question this server asked: the
        connection `find` returns once the flow stored it, the answer to "which account?", or
        `ConnectAnew()`; or `ConnectionNeeded` carrying the retry's own answer."""
        ...

    def untold_failure(self, caller: Caller, config: ProviderConfig) -> ToolAnswer | None:
        """The tool error telling the caller, once, that their last flow at `config` ended
        without a connection, where the revision has not told them already."""
        ...

    async def ask_connect(
        self, ctx: Context[Any, Any], elicitation: PendingElicitation, message: str, url: str
    ) -> ToolAnswer:
        """The answer asking the client to open `url` (URL mode)."""
        ...

    async def ask_account(
        self, ctx: Context[Any, Any], caller: Caller, choice: AccountChoice
    ) -> ElicitResult | ToolAnswer:
        """The user's answer to "which account?" (form mode) when it comes during this call, or the
        answer that puts the question to the client, whose answer comes with a retry."""
        ...
