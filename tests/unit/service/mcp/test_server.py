"""service/mcp/server.py: what the server says it serves, and who it is, on both revisions (only tools,
with no list-change notifications, and its name and version), on the app `create_app` serves
`/mcp` with (`service.app.mcp_http_app`); an unknown tool is a protocol error from the one mapping
(service/mcp/errors.py), and never a metric label."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from service.app import mcp_http_app
from service.mcp.server import ObservedMCPServer
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
ONLY_TOOLS = {"tools": {"listChanged": False}}


@contextlib.asynccontextmanager
async def served() -> AsyncIterator[httpx.AsyncClient]:
    server = ObservedMCPServer("mcp-url-connect", version="1.2.3", metrics=Metrics(), tracing=Tracing())

    @server.tool()
    async def echo(text: str) -> str:
        return text

    app, _sessions = mcp_http_app(server, TransportSecuritySettings(enable_dns_rebinding_protection=False))
    async with (
        server.session_manager.run(),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client,
    ):
        yield client


def result_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result, from a JSON body or the SSE event that carries it."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        body = response.json()
    else:
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        body = json.loads(next(d for d in data if d))
    result: dict[str, Any] = body["result"]
    return result


async def modern(client: httpx.AsyncClient, method: str) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    response = await client.post(
        "/mcp",
        headers={**HEADERS, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method},
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta}},
    )
    return result_of(response)


async def test_discover_declares_only_tools_without_list_changes() -> None:
    """2026-07-28 `server/discover`: no prompts, resources, logging, completions or subscriptions."""
    async with served() as client:
        discovered = await modern(client, "server/discover")
    assert discovered["capabilities"] == ONLY_TOOLS
    assert "2026-07-28" in discovered["supportedVersions"]


async def test_every_2026_result_names_the_server_in_its_meta() -> None:
    """MCP 2026-07-28, basic, "Schema": servers SHOULD put `serverInfo` in every result's `_meta`."""
    async with served() as client:
        for method in ("server/discover", "tools/list"):
            result = await modern(client, method)
            assert result["_meta"][SERVER_INFO] == {"name": "mcp-url-connect", "version": "1.2.3"}


async def test_initialize_declares_only_tools_without_list_changes() -> None:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    async with served() as client:
        response = await client.post(
            "/mcp",
            headers=HEADERS,
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params},
        )
    initialized = result_of(response)
    assert initialized["capabilities"] == ONLY_TOOLS
    assert initialized["serverInfo"] == {"name": "mcp-url-connect", "version": "1.2.3"}


async def test_an_unknown_tool_is_invalid_params() -> None:
    metrics = Metrics()
    server = ObservedMCPServer("t", metrics=metrics, tracing=Tracing())
    with pytest.raises(MCPError) as raised:
        await server.call_tool("no_such_tool" * 20, {})
    assert raised.value.error.code == INVALID_PARAMS
    assert raised.value.error.message.startswith("Unknown tool: 'no_such_tool")
    assert len(raised.value.error.message) < 100  # the name is cut short, not echoed whole
    counted = {"tool": "unknown", "result": "error"}
    assert metrics.registry.get_sample_value("mcpuc_tool_calls_total", counted) == 1
