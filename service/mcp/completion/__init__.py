"""The end of a flow reaching the MCP session that asked: the hub on each replica and the bus between
replicas."""
