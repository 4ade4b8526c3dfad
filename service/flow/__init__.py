"""The connect flow's rules: the elicitation's owner and its checks, connections, token lifecycle, disconnect
and operator actions."""
