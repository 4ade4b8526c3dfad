"""The MCP half: the broker a tool asks, how each protocol revision puts its questions, the server, identity
and bearer tokens, completion notices, tool packages."""
