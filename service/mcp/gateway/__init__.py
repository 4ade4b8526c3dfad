"""Remote MCP servers' tools served here, called with each user's own token (docs/gateway.md)."""
