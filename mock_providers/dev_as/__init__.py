"""The development MCP authorization server."""
