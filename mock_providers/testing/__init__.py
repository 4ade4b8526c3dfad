"""The integrators' testing kit: the demo stack in process, a scripted browser, an MCP client.

`pip install mcp-url-connect[testing]` registers the pytest plugin (`mock_providers.testing.plugin`)
with the `mcpuc` fixture; docs/testing.md shows a whole test file.
"""

from __future__ import annotations

from mock_providers.testing.browser import Browser, FlowError, ScriptedUser, forms_in
from mock_providers.testing.client import MODES, ConnectLink, Recorder, connect_url, mcp_client, retry
from mock_providers.testing.downstream import DownstreamServer
from mock_providers.testing.providers import ProviderKnobs
from mock_providers.testing.servers import HOST, DemoServers, ThreadedServers, free_port
from mock_providers.testing.stack import Mcpuc
from service.mcp.tool_packages import RegisterTools

__all__ = [
    "HOST",
    "MODES",
    "Browser",
    "ConnectLink",
    "DemoServers",
    "DownstreamServer",
    "FlowError",
    "Mcpuc",
    "ProviderKnobs",
    "Recorder",
    "RegisterTools",
    "ScriptedUser",
    "ThreadedServers",
    "connect_url",
    "forms_in",
    "free_port",
    "mcp_client",
    "retry",
]
