"""Our connect flow in a FastMCP server (`pip install "mcp-url-connect[fastmcp]"`, FastMCP 4.x).

    connect = UrlConnect(settings)
    mcp = FastMCP("acme", auth=YourVerifier(...), request_state_security=connect.request_state_security())
    mcp.add_middleware(UrlConnectMiddleware(connect))

    @mcp.tool
    async def my_issues(api: ProviderSession = ProviderConnection("github", scopes=("repo",))) -> list: ...

    app = connect.install(mcp.http_app(path="/mcp"))

FastMCP turns an exception raised inside a tool (and inside its dependencies) into an `isError`
result, so the answer "connect first" cannot come from there: `UrlConnectMiddleware` finds the
connection before the tool runs, from the `ProviderConnection` the tool declares, and answers
-32042 (2025-11-25) or FastMCP's `InputRequiredToolResult` (2026-07-28) itself; the dependency then
only hands the tool the `ProviderSession` the middleware found. The caller is FastMCP's access
token (its `subject` and `claims["iss"]`), read through the SDK's context as for our own server.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

import mcp_types
from fastmcp.server.context import Context as FastMCPContext
from fastmcp.server.dependencies import FastMCPRequestContext
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import FunctionTool
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from mcp.server.mcpserver import Context as SDKContext
from mcp.shared.exceptions import MCPError
from uncalled_for import Provider

from service.embedding.sdk import UrlConnect
from service.mcp.errors import ConnectionNeeded, mcp_errors
from service.mcp.provider_session import ProviderSession
from service.mcp.sdk.hooks import SdkHookMissing

# The session the middleware found for the tool call running in this task.
_provider_session: ContextVar[ProviderSession | None] = ContextVar("mcpuc_provider_session", default=None)


class ProviderConnection(Provider[ProviderSession]):
    """A tool's `api: ProviderSession = ProviderConnection(provider, scopes=...)`: the caller's
    connection at `provider` (or, with none named, at the tool's own `provider` argument)."""

    def __init__(self, provider: str | None = None, scopes: Sequence[str] = ()) -> None:
        self.provider = provider
        self.scopes = tuple(scopes)

    async def __aenter__(self) -> ProviderSession:
        session = _provider_session.get()
        if session is None:
            raise RuntimeError("ProviderConnection needs UrlConnectMiddleware on the FastMCP server")
        return session


def declared_connection(tool: object) -> ProviderConnection | None:
    """The `ProviderConnection` a tool's function declares as a parameter default, if any."""
    return _declared_by(tool.fn) if isinstance(tool, FunctionTool) else None


@functools.lru_cache(maxsize=1024)
def _declared_by(fn: Callable[..., Any]) -> ProviderConnection | None:
    # Cached per function: reading a signature costs about as much as the store read.
    for parameter in inspect.signature(fn).parameters.values():
        if isinstance(parameter.default, ProviderConnection):
            return parameter.default
    return None


def sdk_context(ctx: FastMCPContext) -> SDKContext[Any, Any]:
    """The SDK's view of this request, which the broker reads (revision, capabilities, headers,
    session, requestState and input responses). FastMCP keeps the SDK's request context as
    `_srctx`, its documented escape hatch."""
    request = ctx.request_context
    if request is None:
        raise RuntimeError("a tool call without an MCP request context")
    params = mcp_types.InputResponseRequestParams(
        input_responses=ctx.input_responses, request_state=ctx.request_state
    )
    return SDKContext(request_context=request._srctx, input_params=params)


def _answer(outcome: mcp_types.CallToolResult | mcp_types.InputRequiredResult | MCPError) -> ToolResult:
    if isinstance(outcome, MCPError):
        raise outcome  # -32042 travels as a JSON-RPC error, which a middleware may raise
    if isinstance(outcome, mcp_types.InputRequiredResult):
        return InputRequiredToolResult(outcome)
    return ToolResult(content=outcome.content, structured_content=outcome.structured_content, is_error=True)


class UrlConnectMiddleware(Middleware):
    """Connects before each tool that declares a `ProviderConnection` runs."""

    def __init__(self, connect: UrlConnect) -> None:
        if "_srctx" not in {f.name for f in dataclasses.fields(FastMCPRequestContext)}:
            raise SdkHookMissing(
                "the installed fastmcp lacks FastMCPRequestContext._srctx, the SDK request context "
                "UrlConnectMiddleware reads (install the fastmcp version mcp-url-connect[fastmcp] allows)"
            )
        self._connect = connect

    async def on_call_tool(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        ctx = context.fastmcp_context
        name = context.message.name
        need = declared_connection(await ctx.fastmcp.get_tool(name)) if ctx is not None else None
        if ctx is None or need is None:
            return await call_next(context)
        arguments = context.message.arguments or {}
        provider = need.provider or str(arguments.get("provider"))
        account = arguments.get("account")
        try:
            with mcp_errors():
                session = await self._connect.session(
                    sdk_context(ctx),
                    provider,
                    need.scopes,
                    account=account if isinstance(account, str) else None,
                    tool=name,
                )
        except ConnectionNeeded as needed:
            return _answer(needed.outcome)
        token = _provider_session.set(session)
        try:
            result = await call_next(context)
        finally:
            _provider_session.reset(token)
        if session.notice is not None and not result.is_error:
            # Several accounts and none named: say which one answered (docs/providers.md).
            result.content = [*result.content, mcp_types.TextContent(type="text", text=session.notice)]
        return result
