"""The connect flow inside an integrator's own server: the MCP SDK's (`UrlConnect`) and FastMCP's
(`UrlConnectMiddleware`)."""
