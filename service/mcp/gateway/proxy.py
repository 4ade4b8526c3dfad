"""Remote MCP servers' tools, listed per user and called with the user's own token.

`Gateway.list_tools` adds to `tools/list`, for the calling user, each remote MCP server's tools
(`<prefix>_<tool>`) when they are connected there, else its `<prefix>_connect`. `Gateway.call`
serves `tools/call` for any name in a server's namespace: the broker's connection (or its connect
answer), the user's pooled session (service/mcp/gateway/pool.py), the downstream's answer. What
the downstream says about the token decides what happens next (docs/gateway.md, "Calls"): a 401
whose metadata names another authorization server is followed there (service/mcp/gateway/moves.py),
any other is refreshed once then asks the user to connect again; a 403 `insufficient_scope` asks
for the scopes it names, once.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    InputRequiredResult,
    ResourceLink,
    TextContent,
    Tool,
)

from service.errors import InvalidToolArgument, NeedsReauthorization, ProviderApiError
from service.flow.lifecycle import TokenLifecycle
from service.mcp.broker import ConnectionBroker
from service.mcp.errors import ConnectionNeeded, connected, mcp_errors, tool_error
from service.mcp.gateway.moves import AuthorizationServerMoves
from service.mcp.gateway.names import CONNECT_TOOL, Namespaces
from service.mcp.gateway.pool import DownstreamSessions, PooledSession, SessionNotOpened
from service.mcp.identity import Caller, current_caller
from service.mcp.revisions.capabilities import is_stateless_revision
from service.providers.catalogue import ProviderConfig
from service.providers.protected_resource import Challenge
from token_store import Connection, ConnectionStatus, Store

logger = logging.getLogger(__name__)

MAX_DESCRIPTION = 4096  # a downstream's tool description, as offered here
MAX_MESSAGE = 300  # a downstream's error message, as passed on
MAX_LISTED_SESSIONS = 10_000  # MCP sessions whose last tool list is remembered (list_changed)
INSUFFICIENT_SCOPE = "insufficient_scope"  # RFC 6750 §3.1
HTML = "text/html"


def bounded_text(text: str | None, limit: int) -> str:
    return "" if not text else " ".join(text.split())[:limit]


def offered_tool(provider: ProviderConfig, tool: Tool) -> Tool | None:
    """A downstream's tool as offered here: our name, its schemas and annotations, the server's
    name before its description; no `_meta` (no UI resource of the downstream's is offered under
    our name) and no icons (a client would fetch them from the downstream, telling it who looks)."""
    name = Namespaces.ours(provider, tool.name)
    if name is None:
        logger.warning(
            "gateway: %s's tool %r does not fit a tool name here; left out", provider.name, tool.name[:64]
        )
        return None
    return Tool(
        name=name,
        title=bounded_text(tool.title, 128) or None,
        description=f"{provider.display_name}: {bounded_text(tool.description, MAX_DESCRIPTION)}",
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=tool.annotations,
    )


def connect_tool(provider: ProviderConfig) -> Tool:
    """What a user who is not connected to `provider` sees of it."""
    return Tool(
        name=f"{provider.prefix}_{CONNECT_TOOL}",
        description=(
            f"Connect your {provider.display_name} account to use its tools here; they are listed "
            "once you are connected."
        ),
        input_schema={"type": "object", "properties": {}},
    )


def passed_on(result: CallToolResult) -> CallToolResult:
    """The downstream's result as our client gets it: its content, structured content and
    `isError` as they are, without `_meta`, and nothing a client would render as HTML."""
    return CallToolResult(
        content=[neutralize_html(block).model_copy(update={"meta": None}) for block in result.content],
        structured_content=result.structured_content,
        is_error=result.is_error,
    )


def neutralize_html(block: ContentBlock) -> ContentBlock:
    """A downstream's HTML reaches our client as plain text: an embedded resource or a resource
    link typed `text/html` is retyped `text/plain`, so no client renders a remote server's markup
    (scripts, forms) as if it were ours (2025-11-25 server/tools "Security Considerations":
    clients SHOULD treat tool results as untrusted; we do not leave that to the client)."""
    if isinstance(block, EmbeddedResource):
        inner = block.resource
        # mutant: gateway.neutralize_html
        if inner.mime_type and inner.mime_type.lower().startswith(HTML):
            inner = inner.model_copy(update={"mime_type": "text/plain"})
        return EmbeddedResource(type="resource", resource=inner.model_copy(update={"meta": None}))
    # mutant: gateway.neutralize_html
    if isinstance(block, ResourceLink) and block.mime_type and block.mime_type.lower().startswith(HTML):
        return block.model_copy(update={"mime_type": "text/plain", "icons": None})
    return block


def downstream_error(provider: ProviderConfig, error: MCPError) -> Exception:
    """A downstream's JSON-RPC error as ours: invalid params stay -32602, anything else is the
    provider failing (-32603), its message bounded and named."""
    message = f"{provider.display_name}: {bounded_text(error.error.message, MAX_MESSAGE)}"
    if error.error.code == INVALID_PARAMS:
        return InvalidToolArgument(message)
    return ProviderApiError(message)


class Gateway:
    def __init__(
        self,
        namespaces: Namespaces,
        broker: ConnectionBroker,
        lifecycle: TokenLifecycle,
        store: Store,
        sessions: DownstreamSessions,
        moves: AuthorizationServerMoves,
    ) -> None:
        self.namespaces = namespaces
        self._broker = broker
        self._lifecycle = lifecycle
        self._store = store
        self.sessions = sessions
        self.moves = moves
        # (MCP session, provider) -> the names that session was last listed: told once when they change.
        self._listed: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()

    # ---- tools/list -----------------------------------------------------------------------------

    async def list_tools(self, ctx: Context[Any, Any]) -> list[Tool]:
        """The caller's tools at every remote MCP server, read from them all at once: a slow one
        delays the list by its own deadline only. A store failure is a clear JSON-RPC error."""
        with mcp_errors():
            caller = current_caller(ctx)
            listed: dict[str, list[Tool]] = {}
            failures: list[Exception] = []

            async def list_one(provider: ProviderConfig) -> None:
                try:
                    listed[provider.name] = await self._tools_for(caller, provider)
                except Exception as exc:  # raised below as it is, not in a group: mapped there
                    failures.append(exc)

            async with anyio.create_task_group() as tasks:
                for provider in self.namespaces.providers:
                    tasks.start_soon(list_one, self.moves.current(provider))
            if failures:
                raise failures[0]
        offered: list[Tool] = []
        for provider in self.namespaces.providers:
            self._remember_listed(caller, provider, listed[provider.name])
            offered += listed[provider.name]
        return offered

    async def _tools_for(self, caller: Caller, provider: ProviderConfig) -> list[Tool]:
        connection = await self._connection_without_asking(caller, provider)
        if connection is None:
            return [connect_tool(provider)]
        try:
            session = await self.sessions.open(provider, caller.user, connection.tokens.access_token)
            listed = await self.sessions.list_tools(session)
        except (ProviderApiError, MCPError) as exc:
            # Listed as not connected: its connect tool says what is wrong when called.
            logger.info("gateway: listing %s's tools failed: %s", provider.name, type(exc).__name__)
            self.sessions.close(provider.name, caller.user)
            return [connect_tool(provider)]
        return [tool for tool in (offered_tool(provider, t) for t in listed) if tool is not None]

    async def _connection_without_asking(self, caller: Caller, provider: ProviderConfig) -> Connection | None:
        """The user's usable connection, refreshed if needed; never a connect flow."""
        stored = await self._store.get_connection(caller.user, provider.name)
        if stored is None or stored.status is not ConnectionStatus.OK:
            return None
        try:
            return await self._lifecycle.fresh(stored, provider)
        except NeedsReauthorization:
            return None
        except ProviderApiError:
            return stored  # the token endpoint failed; the access token may still be good

    # ---- tools/call -------------------------------------------------------------------------------

    def owns(self, name: str) -> bool:
        return self.namespaces.route(name) is not None

    async def call(
        self, name: str, arguments: dict[str, Any], ctx: Context[Any, Any]
    ) -> CallToolResult | InputRequiredResult:
        answer: CallToolResult | InputRequiredResult = await connected(self._call)(name, arguments, ctx)
        return answer

    async def _call(self, name: str, arguments: dict[str, Any], ctx: Context[Any, Any]) -> CallToolResult:
        route = self.namespaces.route(name)
        assert route is not None
        provider = self.moves.current(route.provider)
        caller = current_caller(ctx)
        wanted = await self._scopes_asked_for(ctx, caller, provider)
        try:
            connection = await self._broker.require(ctx, provider.name, wanted)
        except ConnectionNeeded:
            self.sessions.close(provider.name, caller.user)  # whatever it held is not usable
            raise
        if route.tool == CONNECT_TOOL and not await self._downstream_has(caller, provider, connection):
            return await self._connected_answer(ctx, caller, provider)
        # Any later question in this call is a first round: the requestState was read above.
        result = await self._forward(first_round(ctx), caller, provider, connection, route.tool, arguments)
        await self._tell_if_list_changed(ctx, caller, provider)
        return passed_on(result)

    async def _forward(
        self,
        ctx: Context[Any, Any],
        caller: Caller,
        provider: ProviderConfig,
        connection: Connection,
        tool: str,
        arguments: dict[str, Any],
    ) -> CallToolResult:
        """The call on the user's session; a refused token refreshed once, then asked for again."""
        refreshed = False
        while True:
            session: PooledSession | None = None
            try:
                session = await self.sessions.open(provider, caller.user, connection.tokens.access_token)
                return await self.sessions.call_tool(session, tool, arguments)
            except (MCPError, SessionNotOpened) as exc:
                challenge = exc.challenge if isinstance(exc, SessionNotOpened) else session_challenge(session)
                if challenge is None:
                    if isinstance(exc, MCPError):
                        raise downstream_error(provider, exc) from None
                    raise
            self.sessions.close(provider.name, caller.user)
            if challenge.status == 403 and challenge.error == INSUFFICIENT_SCOPE:
                connection = await self._step_up(ctx, provider, connection, challenge)
                continue
            moved = await self.moves.follow(provider, challenge) if challenge.status == 401 else None
            if moved is not None:
                # The grant is the old server's: refused where it is used, so this asks the user
                # (unless they connected at the new server meanwhile).
                provider = moved
                connection = await self._broker.require(ctx, provider.name)
                continue
            if not refreshed:
                refreshed = True
                try:  # RFC 6750 §3.1 invalid_token: one single-flight refresh, then once more
                    connection = await self._lifecycle.fresh(connection, provider, force=True)
                except NeedsReauthorization:
                    connection = await self._broker.require(ctx, provider.name)  # asks: raises
                continue
            # Refused again with a fresh token: the grant is no good. Marked, then asked for again.
            await self._lifecycle.refused(connection)
            connection = await self._broker.require(ctx, provider.name)  # raises ConnectionNeeded

    async def _step_up(
        self, ctx: Context[Any, Any], provider: ProviderConfig, connection: Connection, challenge: Challenge
    ) -> Connection:
        """The MCP spec's step-up (2025-11-25 basic/authorization, "Step-Up Authorization Flow"):
        authorize again for the granted scopes plus the challenged ones. When those are granted
        already, asking again would loop: the refusal is the tool's answer instead."""
        granted = set(connection.tokens.scopes)
        challenged = set(challenge.scope or ())
        # mutant: gateway.step_up_once
        if not challenged or challenged <= granted:
            needs = " ".join(sorted(challenged)) or "more permissions"
            raise ConnectionNeeded(
                tool_error(
                    f"{provider.display_name} refused the call: it needs {needs}, which your connection "
                    "already asked for. Ask the administrator of that service for access."
                )
            )
        return await self._broker.require(ctx, provider.name, sorted(granted | challenged))

    async def _scopes_asked_for(
        self, ctx: Context[Any, Any], caller: Caller, provider: ProviderConfig
    ) -> Sequence[str]:
        """On a 2026-07-28 retry, the scopes of the user's open flow at `provider` (a step-up asks
        for more than the provider's own): the retry waits for that grant, not the one it replaces."""
        if not (is_stateless_revision(ctx) and ctx.request_state is not None):
            return ()
        live = [e for e in await self._store.live_elicitations(caller.user) if e.provider == provider.name]
        return max((e.scopes for e in live), key=len, default=())

    async def _downstream_has(self, caller: Caller, provider: ProviderConfig, connection: Connection) -> bool:
        """Does the downstream have a tool of its own named like our `<prefix>_connect`?"""
        try:
            session = await self.sessions.open(provider, caller.user, connection.tokens.access_token)
            return any(t.name == CONNECT_TOOL for t in await self.sessions.list_tools(session))
        except (ProviderApiError, MCPError):
            return False

    async def _connected_answer(
        self, ctx: Context[Any, Any], caller: Caller, provider: ProviderConfig
    ) -> CallToolResult:
        """`<prefix>_connect` once connected: which tools the user now has there."""
        names = self._offered_names(caller, provider) or ()
        await self._tell_if_list_changed(ctx, caller, provider)
        text = f"Connected to {provider.display_name}."
        if names:
            text += f" Its tools here: {', '.join(names)}."
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content={"provider": provider.name, "connected": True, "tools": list(names)},
        )

    # ---- notifications/tools/list_changed (2025-11-25 sessions) -------------------------------------

    def _remember_listed(self, caller: Caller, provider: ProviderConfig, tools: list[Tool]) -> None:
        if caller.mcp_session_id is None:
            return
        key = (caller.mcp_session_id, provider.name)
        self._listed[key] = tuple(sorted(t.name for t in tools))
        self._listed.move_to_end(key)
        while len(self._listed) > MAX_LISTED_SESSIONS:
            self._listed.popitem(last=False)

    def _offered_names(self, caller: Caller, provider: ProviderConfig) -> tuple[str, ...] | None:
        """The names the user's session at `provider` offers now (None: not read yet), worked out
        once per reading of its list (a call asks on every call)."""
        session = self.sessions.find(provider.name, caller.user)
        if session is None or session.tools is None:
            return None
        if session.offered_names is None:
            names = (Namespaces.ours(provider, tool.name) for tool in session.tools)
            session.offered_names = tuple(sorted(name for name in names if name))
        return session.offered_names

    async def _tell_if_list_changed(
        self, ctx: Context[Any, Any], caller: Caller, provider: ProviderConfig
    ) -> None:
        """A session that was listed `provider`'s tools, and would now be listed others (the user
        connected, or the downstream changed them), is sent `notifications/tools/list_changed`,
        once (2025-11-25 server/tools, "List Changed Notification")."""
        if caller.mcp_session_id is None or is_stateless_revision(ctx):
            return
        key = (caller.mcp_session_id, provider.name)
        before = self._listed.get(key)
        if before is None:
            return
        now = self._offered_names(caller, provider)
        if now is None:
            return
        if now != before:
            self._listed[key] = now
            await ctx.session.send_tool_list_changed()


def first_round(ctx: Context[Any, Any]) -> Context[Any, Any]:
    """The same request, without the 2026-07-28 retry's `inputResponses` and `requestState`: the
    broker read (and used up) them once already, so a second question in the same call (a
    refused token, a step-up) is asked as new, never refused as a replay."""
    return Context(request_context=ctx.request_context, mcp_server=ctx.mcp_server)


def session_challenge(session: PooledSession | None) -> Challenge | None:
    return None if session is None else session.token.take_challenge()
