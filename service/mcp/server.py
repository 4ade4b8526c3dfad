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

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import URL_ELICITATION_REQUIRED, CallToolResult, Icon, InputRequiredResult, ToolAnnotations

from service.errors import InvalidToolArgument
from service.mcp.errors import mcp_errors
from service.mcp.sdk.hooks import has_tool, request_handlers
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

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
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
