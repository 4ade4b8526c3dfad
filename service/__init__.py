"""mcp-url-connect's MCP server. What a tool package imports (docs/tools.md): `uses` and the
`ProviderSession` it passes to the tool, the broker the package's `register(server, broker)`
receives, `RegisterTools` (that function's type) and the error a tool raises when the provider
answers wrongly."""

from service.broker import ConnectionBroker
from service.errors import ProviderFailure
from service.provider_session import ProviderSession, uses
from service.tool_packages import RegisterTools

__all__ = ["ConnectionBroker", "ProviderFailure", "ProviderSession", "RegisterTools", "uses"]
