"""The connect flow in a FastMCP server (docs/embedding.md): `UrlConnectMiddleware` on the server,
`ProviderConnection` as the default of a tool's `api: ProviderSession` parameter, and optionally
`add_connection_tools`. Needs `mcp-url-connect[fastmcp]`."""

from service.embedding.fastmcp import ProviderConnection, UrlConnectMiddleware, add_connection_tools

__all__ = ["ProviderConnection", "UrlConnectMiddleware", "add_connection_tools"]
