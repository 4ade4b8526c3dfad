"""The testing kit's public face: the demo stack in process (`Mcpuc`), a scripted browser and an
MCP client (docs/testing.md). Needs `mcp-url-connect[testing]`; not in the production image."""

from mock_providers import (
    ClientSpec,
    MockProvidersConfig,
    NoDevKeys,
    create_mock_providers_app,
    mint_access_token,
)
from mock_providers.testing import (
    HOST,
    MODES,
    Browser,
    ConnectLink,
    DemoServers,
    FlowError,
    Mcpuc,
    ProviderKnobs,
    Recorder,
    RegisterTools,
    ScriptedUser,
    ThreadedServers,
    connect_url,
    forms_in,
    free_port,
    mcp_client,
    retry,
)

__all__ = [
    "HOST",
    "MODES",
    "Browser",
    "ClientSpec",
    "ConnectLink",
    "DemoServers",
    "FlowError",
    "Mcpuc",
    "MockProvidersConfig",
    "NoDevKeys",
    "ProviderKnobs",
    "Recorder",
    "RegisterTools",
    "ScriptedUser",
    "ThreadedServers",
    "connect_url",
    "create_mock_providers_app",
    "forms_in",
    "free_port",
    "mcp_client",
    "mint_access_token",
    "retry",
]
