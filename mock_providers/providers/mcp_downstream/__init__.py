"""An OAuth-protected remote MCP server stand-in (docs/gateway.md, docs/mock-providers.md)."""
