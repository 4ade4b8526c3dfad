"""Our connect flow in a FastMCP server (`pip install "mcp-url-connect[fastmcp]"`, FastMCP 4.x).

    connect = UrlConnect(settings)
    mcp = FastMCP("acme", auth=YourVerifier(...), request_state_security=connect.request_state_security())
    mcp.add_middleware(UrlConnectMiddleware(connect))

    @mcp.tool
    async def my_issues(api: ProviderSession = ProviderConnection("github", scopes=("repo",))) -> list: ...

    app = connect.install(mcp.http_app(path="/mcp"))

A tool declares what it needs as a FastMCP dependency, `ProviderConnection`, which FastMCP
resolves after validating the call's arguments and before the tool's body runs: that is where
the caller's connection is found (or not). FastMCP turns an exception raised there into an
`isError` result, so "connect first" (-32042 on 2025-11-25, FastMCP's `InputRequiredToolResult`
on 2026-07-28, or the link in a tool error) cannot travel as an exception: the dependency hands
that answer to `UrlConnectMiddleware`, which gives it in the tool's place. The middleware costs a
tool that declares nothing one context variable; it never looks the tool up. A provider's failure
inside the tool reaches the model as a tool error (service/mcp/errors.py). The caller is
FastMCP's access token (its `subject` and `claims["iss"]`), read through the SDK's context as for
our own server.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

import mcp_types
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.context import Context as FastMCPContext
from fastmcp.server.dependencies import FastMCPRequestContext
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from mcp.server.mcpserver import Context as SDKContext
from mcp.shared.exceptions import MCPError
from uncalled_for import Provider
from uncalled_for.frames import Frame, current_frame

from service.embedding.sdk import UrlConnect
from service.mcp.errors import PROVIDER_ERRORS, ConnectionNeeded, mcp_errors, provider_tool_error
from service.mcp.provider_session import ProviderSession
from service.mcp.sdk.hooks import SdkHookMissing
from service.mcp.tools import DISCONNECT, LIST_CONNECTIONS, WHOAMI, connections_of, disconnect_at, profile

Answer = mcp_types.CallToolResult | mcp_types.InputRequiredResult | MCPError


@dataclass
class _ToolCall:
    """One tool call as `UrlConnectMiddleware` hands it to the tool's dependencies: what they
    need to connect, and what they leave for the middleware (the answer to give instead of the
    tool's, the sessions they opened)."""

    connect: UrlConnect
    ctx: FastMCPContext
    tool: str
    answer: Answer | None = None
    sessions: list[ProviderSession] = field(default_factory=list)

    def answered(self, answer: Answer) -> ToolError:
        """Keep `answer` for the middleware, and the exception that stops the tool. The answer
        travels beside FastMCP's exception handling, so another middleware between ours and the
        tool that turns exceptions into results cannot lose it."""
        self.answer = answer
        return ToolError("answered by UrlConnectMiddleware", log_level=logging.DEBUG)


# The tool call running in this task.
_tool_call: ContextVar[_ToolCall | None] = ContextVar("mcpuc_tool_call", default=None)


def _current_call() -> _ToolCall:
    call = _tool_call.get()
    if call is None:
        raise RuntimeError("ProviderConnection needs UrlConnectMiddleware on the FastMCP server")
    return call


def ProviderConnection(provider: str | None = None, scopes: Sequence[str] = ()) -> ProviderSession:
    """A tool's `api: ProviderSession = ProviderConnection(provider, scopes=...)`: the caller's
    connection at `provider` (or, with none named, at the tool's own `provider` argument).

    Typed as what the tool receives, as FastMCP's own `Depends` is: the default is a dependency
    that FastMCP resolves to a `ProviderSession` on each call."""
    return cast(ProviderSession, _Connection(provider, tuple(scopes)))


class _Connection(Provider[ProviderSession]):
    def __init__(self, provider: str | None, scopes: tuple[str, ...]) -> None:
        self.provider = provider
        self.scopes = scopes

    async def __aenter__(self) -> ProviderSession:
        call = _current_call()
        # The call's arguments as the tool receives them, its defaults included.
        frame = current_frame()
        provider = self.provider or str(await _argument(frame, "provider"))
        account = await _argument(frame, "account")
        with _answering(call):
            session = await call.connect.session(
                sdk_context(call.ctx),
                provider,
                self.scopes,
                account=account if isinstance(account, str) else None,
                tool=call.tool,
            )
        call.sessions.append(session)
        return session


async def _argument(frame: Frame, name: str) -> Any:
    """The tool's argument `name`, or None when the tool has no such parameter."""
    try:
        return await frame.resolve(name)
    except LookupError:
        return None


@contextmanager
def _answering(call: _ToolCall) -> Iterator[None]:
    """The connect answer, a protocol error, or a provider's failure (refreshing the token)
    leaving the block becomes the tool call's answer."""
    try:
        with mcp_errors():
            yield
    except ConnectionNeeded as needed:
        raise call.answered(needed.outcome) from None
    except MCPError as error:
        raise call.answered(error) from None
    except PROVIDER_ERRORS as failure:
        raise call.answered(provider_tool_error(failure)) from None


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


def _answer(outcome: Answer) -> ToolResult:
    if isinstance(outcome, MCPError):
        raise outcome  # -32042 and protocol errors travel as JSON-RPC errors, which a middleware may raise
    if isinstance(outcome, mcp_types.InputRequiredResult):
        return InputRequiredToolResult(outcome)
    return ToolResult(content=outcome.content, structured_content=outcome.structured_content, is_error=True)


def _failed(error: ToolError, call: _ToolCall) -> ToolResult:
    """The tool error for a provider's failure inside the tool (FastMCP wraps what the tool
    raised in a ToolError, the original as its cause); anything else stays FastMCP's."""
    cause = error.__cause__
    if not isinstance(cause, PROVIDER_ERRORS):
        raise error
    provider = call.sessions[-1].provider.name if call.sessions else None
    return _answer(provider_tool_error(cause, provider))


class UrlConnectMiddleware(Middleware):
    """Gives, in a tool's place, the answer its `ProviderConnection` could not connect with, and a
    provider's failure inside the tool as a tool error."""

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
        if ctx is None:
            return await call_next(context)
        call = _ToolCall(self._connect, ctx, context.message.name)
        token = _tool_call.set(call)
        try:
            result = await call_next(context)
        except Exception as error:
            if call.answer is not None:
                return _answer(call.answer)
            if isinstance(error, ToolError):
                return _failed(error, call)
            raise
        finally:
            _tool_call.reset(token)
        if call.answer is not None:  # an exception turned into a result on its way here
            return _answer(call.answer)
        notices = [s.notice for s in call.sessions if s.notice is not None]
        if notices and not result.is_error:
            # Several accounts and none named: say which one answered (docs/providers.md).
            result.content = [*result.content, *(mcp_types.TextContent(type="text", text=n) for n in notices)]
        return result


def add_connection_tools(mcp: FastMCP, connect: UrlConnect) -> None:
    """Our `whoami`, `list_connections` and `disconnect` tools on your FastMCP server, as on ours
    (it needs `UrlConnectMiddleware`): the caller's connections, and a way to end them."""

    @mcp.tool(name="whoami", description=WHOAMI)
    async def whoami(
        provider: str = "mockhub",
        account: str | None = None,
        api: ProviderSession = ProviderConnection(),  # noqa: B008 - a FastMCP dependency, resolved per call
    ) -> dict[str, Any]:
        return await profile(api)

    @mcp.tool(name="list_connections", description=LIST_CONNECTIONS)
    async def list_connections(ctx: FastMCPContext) -> list[dict[str, Any]]:
        with _answering(_current_call()):
            return await connections_of(sdk_context(ctx), connect.runtime)

    @mcp.tool(name="disconnect", description=DISCONNECT)
    async def disconnect(ctx: FastMCPContext, provider: str) -> dict[str, Any]:
        with _answering(_current_call()):
            return await disconnect_at(sdk_context(ctx), connect.broker, connect.runtime, provider)
