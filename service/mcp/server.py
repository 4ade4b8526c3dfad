"""The SDK's MCPServer, with every tool call counted, timed and traced, declaring only what it serves.

One override of `call_tool` (the method the SDK's `tools/call` handler calls) instead of a
decorator on each tool, so integrators' tools are observed too. The `tool` label is the tool's
registered name; an unknown name is refused before it could become a label (a client must not
be able to mint label values).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    URL_ELICITATION_REQUIRED,
    CallToolResult,
    Icon,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    ToolAnnotations,
)

from service.errors import InvalidToolArgument
from service.mcp.errors import mcp_errors
from service.mcp.gateway.proxy import Gateway
from service.mcp.sdk.hooks import has_tool, lowlevel_server, request_handlers
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing

UNSERVED_METHODS = (
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "subscriptions/listen",
)


class ObservedMCPServer(MCPServer[Any]):
    def __init__(self, *args: Any, metrics: Metrics, tracing: Tracing, **kwargs: Any) -> None:
        self._tool_names: set[str] = set()
        self._gateway: Gateway | None = None
        super().__init__(*args, **kwargs)
        self._metrics = metrics
        self._tracing = tracing
        # Advertise only what is served. The SDK derives the capabilities it declares from the
        # handlers its low-level server holds, and registers prompts and resources (which this
        # server has none of) and list-change subscriptions (its tool list never changes) by
        # default: remove them, so they are neither declared nor answered (-32601). That covers
        # both revisions: 2025-11-25's `initialize` result and 2026-07-28's `server/discover`,
        # whose `listChanged` flags follow whether `subscriptions/listen` is served. Identity
        # needs nothing here: the SDK puts `io.modelcontextprotocol/serverInfo` in every
        # 2026-07-28 result's `_meta`, discover's included (MCP 2026-07-28, basic, "Schema",
        # per-response protocol fields).
        handlers = request_handlers(self)
        for method in UNSERVED_METHODS:
            handlers.pop(method, None)

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        """Refuse a second tool of one name: the SDK would keep the first with only a warning,
        so a tool package's tool would silently never run (service/mcp/tool_packages.py)."""
        tool_name = name or fn.__name__
        if tool_name in self._tool_names:
            raise ValueError(f"a tool named {tool_name!r} is already registered")
        self._tool_names.add(tool_name)
        super().add_tool(
            fn, name, title, description, annotations, icons, meta, structured_output=structured_output
        )

    @property
    def tool_names(self) -> frozenset[str]:
        """Our own tools' names (and tool packages'), not the remote MCP servers'."""
        return frozenset(self._tool_names)

    @property
    def gateway(self) -> Gateway | None:
        return self._gateway

    def serve_gateway(self, gateway: Gateway) -> None:
        """Serve remote MCP servers' tools beside ours (docs/gateway.md): `tools/list` adds the
        caller's, `tools/call` routes their names to `gateway`. Their list differs per user and
        changes when the user connects: on 2025-11-25 `tools.listChanged` is declared and the
        session told; on 2026-07-28 the list is `cacheScope: private` with no freshness."""
        self._gateway = gateway
        lowlevel = lowlevel_server(self)
        ours = lowlevel.get_request_handler("tools/list")
        assert ours is not None

        async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
            listed = await ours.handler(ctx, params)
            assert isinstance(listed, ListToolsResult)
            theirs = await gateway.list_tools(Context(request_context=ctx, mcp_server=self))
            # 2026-07-28 basic, caching: a list that depends on the caller is never shared.
            return ListToolsResult(tools=[*listed.tools, *theirs], ttl_ms=0, cache_scope="private")

        lowlevel.add_request_handler("tools/list", PaginatedRequestParams, list_tools)
        declare = lowlevel.create_initialization_options
        lowlevel.create_initialization_options = (  # type: ignore[method-assign]
            lambda notification_options=None, *args, **kwargs: declare(
                notification_options or NotificationOptions(tools_changed=True), *args, **kwargs
            )
        )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        gateway = self._gateway
        route = gateway.namespaces.route(name) if gateway is not None and context is not None else None
        if route is not None:
            # A remote MCP server's tool, counted under its namespace: a downstream must not be
            # able to mint label values either.
            tool = f"{route.provider.prefix}_*"
        else:
            # mutant: metrics.unknown_tool_label
            if not has_tool(self, name):
                self._metrics.tool_calls.labels(tool="unknown", result="error").inc()
                # A protocol error, not a tool result: the name does not exist on this server
                # (MCP 2025-11-25, server/tools "Error Handling": an unknown tool is -32602).
                with mcp_errors():
                    raise InvalidToolArgument(f"Unknown tool: {name[:64]!r}")
            tool = name
        started = time.perf_counter()
        result = "error"
        try:
            with self._tracing.span("tool_call", tool=tool):
                if route is not None and gateway is not None and context is not None:
                    answer = await gateway.call(name, arguments, context)
                else:
                    answer = await super().call_tool(name, arguments, context)
            if isinstance(answer, InputRequiredResult):
                result = "input_required"
            else:
                result = "error" if answer.is_error else "ok"
            return answer
        except MCPError as exc:
            result = "elicitation" if exc.error.code == URL_ELICITATION_REQUIRED else "error"
            raise
        finally:
            self._metrics.tool_call(tool, result, time.perf_counter() - started)
