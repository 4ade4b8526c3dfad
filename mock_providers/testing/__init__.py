"""The integrators' testing kit: the demo stack in process, a scripted browser, an MCP client.

`pip install mcp-url-connect[testing]` registers the pytest plugin (`mock_providers.testing.plugin`)
with the `mcpuc` fixture; docs/testing.md shows a whole test file.
"""

from __future__ import annotations

from mock_providers.api.exchange import ApiAnswer, ApiRequest, TokenOwner
from mock_providers.api.stand_in import ApiCall, ApiRoute, StandInApi
from mock_providers.providers.mockgoogle.api import GoogleApi
from mock_providers.providers.mockhub.api import GitHubApi
from mock_providers.providers.mockslack.api import PostedMessage, SlackApi
from mock_providers.testing.browser import Browser, FlowError, ScriptedUser, forms_in
from mock_providers.testing.client import (
    ELICITATIONS,
    MODES,
    ConnectLink,
    Elicitation,
    Recorder,
    connect_url,
    mcp_client,
    retry,
)
from mock_providers.testing.downstream import DownstreamServer
from mock_providers.testing.providers import ProviderKnobs
from mock_providers.testing.servers import HOST, DemoServers, ThreadedServers, free_port
from mock_providers.testing.stack import Mcpuc
from mock_providers.testing.tools import Tools
from service.mcp.tool_packages import RegisterTools

__all__ = [
    "ELICITATIONS",
    "HOST",
    "MODES",
    "ApiAnswer",
    "ApiCall",
    "ApiRequest",
    "ApiRoute",
    "Browser",
    "ConnectLink",
    "DemoServers",
    "DownstreamServer",
    "Elicitation",
    "FlowError",
    "GitHubApi",
    "GoogleApi",
    "Mcpuc",
    "PostedMessage",
    "ProviderKnobs",
    "Recorder",
    "RegisterTools",
    "ScriptedUser",
    "SlackApi",
    "StandInApi",
    "ThreadedServers",
    "TokenOwner",
    "Tools",
    "connect_url",
    "forms_in",
    "free_port",
    "mcp_client",
    "retry",
]
