"""The FastMCP adapter in process: `ProviderConnection` connects as a FastMCP dependency and
`UrlConnectMiddleware` gives its answer in the tool's place, whatever other middleware does with
the exception that stopped the tool; a provider's failure in the tool is a tool error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequestParams, TextContent

import service.embedding.fastmcp as adapter
from mcp_url_connect.fastmcp import ProviderConnection
from service.errors import ProviderApiError, UnknownProvider
from service.mcp.errors import ConnectionNeeded, tool_error
from service.mcp.provider_session import ProviderSession
from service.providers.catalogue import build_provider

HUB = build_provider(
    "github", {"preset": "github", "client_id": "c"}, {"MCPUC_PROVIDER_GITHUB_CLIENT_SECRET": "s"}
)


@dataclass
class Session:
    provider: Any = HUB
    notice: str | None = None


@dataclass
class Connect:
    """`UrlConnect.session` as the adapter calls it: a session, or what it raises."""

    raises: Exception | None = None
    notice: str | None = None
    asked: list[tuple[str, tuple[str, ...], str | None, str]] = field(default_factory=list)

    async def session(
        self, ctx: Any, provider: str, scopes: tuple[str, ...], *, account: str | None, tool: str
    ) -> Session:
        self.asked.append((provider, scopes, account, tool))
        if self.raises is not None:
            raise self.raises
        return Session(notice=self.notice)


class Swallow(Middleware):
    """Another middleware, nearer the tool than ours, that turns any failure into a result."""

    async def on_call_tool(
        self,
        context: MiddlewareContext[CallToolRequestParams],
        call_next: CallNext[CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        try:
            return await call_next(context)
        except Exception:
            return ToolResult(content=[TextContent(type="text", text="swallowed")], is_error=True)


def server(connect: Connect, monkeypatch: pytest.MonkeyPatch, *, swallow: bool = False) -> FastMCP:
    monkeypatch.setattr(adapter, "sdk_context", lambda ctx: None)  # no MCP request in process
    mcp = FastMCP("t")
    middleware = adapter.UrlConnectMiddleware.__new__(adapter.UrlConnectMiddleware)
    middleware._connect = connect  # type: ignore[assignment]
    mcp.add_middleware(middleware)
    if swallow:
        mcp.add_middleware(Swallow())

    @mcp.tool
    async def repos(
        provider: str = "github",
        account: str | None = None,
        api: ProviderSession = ProviderConnection(scopes=("repo",)),
    ) -> dict[str, Any]:
        return {"provider": api.provider.name}

    @mcp.tool
    async def two(
        a: ProviderSession = ProviderConnection("github"),
        b: ProviderSession = ProviderConnection("slack"),
    ) -> dict[str, Any]:
        return {"ok": True}

    @mcp.tool
    async def failing(api: ProviderSession = ProviderConnection("github")) -> dict[str, Any]:
        raise ProviderApiError("GitHub answered HTTP 502", status=502)

    @mcp.tool
    async def plain() -> dict[str, Any]:
        return {"plain": True}

    return mcp


async def test_the_tools_own_arguments_and_defaults_name_the_provider_and_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connect = Connect()
    mcp = server(connect, monkeypatch)
    await mcp.call_tool("repos", {})
    await mcp.call_tool("repos", {"provider": "gitlab", "account": "octocat"})
    assert connect.asked == [("github", ("repo",), None, "repos"), ("gitlab", ("repo",), "octocat", "repos")]


@pytest.mark.parametrize("swallow", [False, True])
async def test_the_connect_answer_is_given_in_the_tools_place(
    monkeypatch: pytest.MonkeyPatch, swallow: bool
) -> None:
    connect = Connect(raises=ConnectionNeeded(tool_error("open this link", {"connect_url": "https://x"})))
    result = await server(connect, monkeypatch, swallow=swallow).call_tool("repos", {})
    assert result.is_error and result.structured_content == {"connect_url": "https://x"}


@pytest.mark.parametrize("swallow", [False, True])
async def test_a_protocol_error_stays_a_json_rpc_error(
    monkeypatch: pytest.MonkeyPatch, swallow: bool
) -> None:
    connect = Connect(raises=UnknownProvider("Unknown provider 'gitlab'"))
    with pytest.raises(MCPError) as raised:
        await server(connect, monkeypatch, swallow=swallow).call_tool("repos", {"provider": "gitlab"})
    assert raised.value.error.code == INVALID_PARAMS


async def test_a_failed_refresh_before_the_tool_is_a_tool_error(monkeypatch: pytest.MonkeyPatch) -> None:
    connect = Connect(
        raises=ProviderApiError("GitHub could not refresh the token", provider="github", retry_after=1)
    )
    result = await server(connect, monkeypatch).call_tool("repos", {})
    assert result.is_error and result.structured_content == {
        "provider": "github",
        "status": None,
        "retry_after": 1,
        "reconnect": False,
    }


async def test_a_provider_failure_in_the_tool_is_a_tool_error_naming_its_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = await server(Connect(), monkeypatch).call_tool("failing", {})
    assert result.is_error
    assert result.structured_content == {
        "provider": "github",
        "status": 502,
        "retry_after": None,
        "reconnect": False,
    }


async def test_each_connection_a_tool_declares_is_made_and_its_notice_added(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connect = Connect(notice="Used the account octocat.")
    result = await server(connect, monkeypatch).call_tool("two", {})
    assert [p for p, *_ in connect.asked] == ["github", "slack"]
    assert [c.text for c in result.content if isinstance(c, TextContent)][-2:] == [
        "Used the account octocat."
    ] * 2


async def test_a_tool_that_declares_nothing_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    connect = Connect(raises=AssertionError("never asked"))
    result = await server(connect, monkeypatch).call_tool("plain", {})
    assert result.structured_content == {"plain": True} and connect.asked == []
