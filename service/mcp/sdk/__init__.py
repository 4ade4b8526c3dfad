"""What we add inside the MCP SDK's session manager, and every private part of the SDK we rely on, checked at
start."""
