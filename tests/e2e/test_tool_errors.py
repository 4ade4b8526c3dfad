"""A provider's failure reaches the client as a tool result with `isError` the model can read, never
as JSON-RPC -32603: on both revisions, through our server, the SDK embedding and the FastMCP
adapter alike (MCP server/tools, "Error Handling"). The connect answers are unchanged.

MockHub serves the connect flow and its userinfo; a small Starlette app on loopback stands in for
its API (the provider entry's `api_base_url`), answering a 500 and a 429 with `Retry-After`."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import FastMCP
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_url_connect import ProviderFailure, ProviderSession, Settings, UrlConnect, create_app, uses
from mcp_url_connect.fastmcp import ProviderConnection
from mcp_url_connect.testing import HOST, MODES, Mcpuc, ThreadedServers, free_port

EXAMPLES = Path(__file__).parents[2] / "examples"
SCOPES = ("read:user",)


def load_example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def api_stand_in() -> Starlette:
    """MockHub's API as the tools below call it: failing, rate limited."""

    async def failing(request: Request) -> Response:
        return JSONResponse({"message": "Server Error"}, 500)

    async def limited(request: Request) -> Response:
        return JSONResponse({"message": "API rate limit exceeded"}, 429, headers={"Retry-After": "120"})

    return Starlette(routes=[Route("/fail", failing), Route("/limited", limited)])


def with_api_at(settings: Settings, api_url: str) -> Settings:
    hub = settings.providers["mockhub"].model_copy(update={"api_base_url": api_url})
    return settings.replace(providers={**settings.providers, "mockhub": hub})


async def _unusable() -> None:
    raise ProviderFailure("MockHub", "api", "MockHub: the answer had no repositories", status=200)


def add_sdk_tools(server: MCPServer[Any], session: Any) -> None:
    @server.tool()
    @uses(session, "mockhub", scopes=SCOPES)
    async def hub_get(ctx: Context[Any, Any], api: ProviderSession, path: str) -> Any:
        return await api.get_json(path)

    @server.tool()
    @uses(session, "mockhub", scopes=SCOPES)
    async def hub_profile(ctx: Context[Any, Any], api: ProviderSession) -> Any:
        return await api.get_json(api.provider.userinfo_url)

    @server.tool()
    @uses(session, "mockhub", scopes=SCOPES)
    async def hub_unusable(ctx: Context[Any, Any], api: ProviderSession) -> Any:
        await _unusable()


def ours(settings: Settings) -> Starlette:
    app = create_app(settings)
    add_sdk_tools(app.state.mcp_server, app.state.broker.session)
    return app


def sdk(settings: Settings) -> Starlette:
    connect = UrlConnect(settings)
    server = MCPServer(
        "acme-tools",
        token_verifier=load_example("embed_sdk").AcmeTokenVerifier(
            settings.auth_issuer, settings.resource_url
        ),
        auth=AuthSettings(
            issuer_url=settings.auth_issuer,  # type: ignore[arg-type]
            resource_server_url=settings.resource_url,  # type: ignore[arg-type]
            validate_token_resource=True,
        ),
        request_state_security=connect.request_state_security(),
    )
    add_sdk_tools(server, connect.session)
    return connect.install(server.streamable_http_app())


def fastmcp(settings: Settings) -> Starlette:
    connect = UrlConnect(settings)
    mcp: FastMCP = load_example("embed_fastmcp").build_server(settings, connect)

    @mcp.tool
    async def hub_get(path: str, api: ProviderSession = ProviderConnection("mockhub", scopes=SCOPES)) -> Any:
        return await api.get_json(path)

    @mcp.tool
    async def hub_profile(api: ProviderSession = ProviderConnection("mockhub", scopes=SCOPES)) -> Any:
        return await api.get_json(api.provider.userinfo_url)

    @mcp.tool
    async def hub_unusable(api: ProviderSession = ProviderConnection("mockhub", scopes=SCOPES)) -> Any:
        await _unusable()

    return connect.install(mcp.http_app(path="/mcp"))


SERVERS: dict[str, Callable[[Settings], Starlette]] = {"ours": ours, "sdk": sdk, "fastmcp": fastmcp}


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    port = free_port()
    served = ThreadedServers([(api_stand_in(), port)])
    served.start()
    try:
        yield f"http://{HOST}:{port}"
    finally:
        served.stop()


@pytest.fixture(scope="module", params=list(SERVERS))
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, api_url: str
) -> Iterator[Mcpuc]:
    build = SERVERS[request.param]
    running = Mcpuc(
        tmp_path_factory.mktemp(request.param) / "data",
        app=lambda settings: build(with_api_at(settings, api_url)),
    ).start()
    try:
        yield running
    finally:
        running.stop()


SEEN: list[str] = []  # every tool error's text, scanned for tokens at the end of each test


def facts_of(result: CallToolResult) -> tuple[str, dict[str, Any]]:
    """The text and the facts of a tool error (not a JSON-RPC error, which `call_tool` raises)."""
    assert isinstance(result, CallToolResult) and result.is_error is True, result
    [item] = result.content
    assert isinstance(item, TextContent)
    assert result.structured_content is not None
    SEEN.append(item.text)
    return item.text, result.structured_content


@pytest.mark.parametrize("mode", MODES)
async def test_provider_failures_are_tool_errors_the_model_reads(stack: Mcpuc, mode: str) -> None:
    user = login = f"tool-errors-{mode}"
    async with stack.client(user, mode=mode) as client:
        link = await stack.connect_url(client, "hub_profile", {})
        await stack.browser(user).approve(link.url, login=login)
        assert not (await stack.retry(client, link, "hub_profile", {})).is_error

        # A provider 500: the provider's fault, try again.
        text, facts = facts_of(await client.call_tool("hub_get", {"path": "/fail"}))
        assert facts == {"provider": "mockhub", "status": 500, "retry_after": None, "reconnect": False}
        assert text.startswith("MockHub answered HTTP 500: Server Error.") and "try again shortly" in text

        # A 429 whose Retry-After ends past the call's deadline: when to try again.
        text, facts = facts_of(await client.call_tool("hub_get", {"path": "/limited"}))
        assert facts == {"provider": "mockhub", "status": 429, "retry_after": 120, "reconnect": False}
        assert "Try again in 120 seconds" in text

        # ProviderFailure raised by the tool.
        text, facts = facts_of(await client.call_tool("hub_unusable", {}))
        assert facts == {"provider": "mockhub", "status": 200, "retry_after": None, "reconnect": False}
        assert text.startswith("MockHub: the answer had no repositories.")

        # The grant revoked at the provider: the token is refused, the refresh too (invalid_grant).
        assert stack.providers.revoke(login) >= 1
        text, facts = facts_of(await client.call_tool("hub_profile", {}))
        assert facts == {"provider": "mockhub", "status": 401, "retry_after": None, "reconnect": True}
        assert "Ask the user to connect this account again" in text

        # The next call asks the user to connect again, with the revision's connect answer.
        again = await stack.connect_url(client, "hub_profile", {})
        assert again.elicitation_id != link.elicitation_id

    issued = stack.providers.issued_tokens
    assert issued and len(SEEN) >= 4
    assert [text for text in SEEN if any(token in text for token in issued)] == []
