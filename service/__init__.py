"""mcp-url-connect's MCP server. What a tool author needs: `@uses(broker.session, provider,
scopes=...)` and the `ProviderSession` it passes to the tool (service/mcp/provider_session.py)."""

from service.mcp.provider_session import ProviderSession, uses

__all__ = ["ProviderSession", "uses"]
