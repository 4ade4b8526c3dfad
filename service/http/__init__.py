"""The HTTP layer: the one request pass, its checks and limits, the drain, and how the servers run."""
