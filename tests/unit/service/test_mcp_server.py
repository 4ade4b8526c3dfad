"""ObservedMCPServer: an unknown tool is a protocol error from the one mapping (service/mcp_errors.py),
and never a metric label."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from service.mcp_server import ObservedMCPServer
from service.metrics import Metrics
from service.tracing import Tracing


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
