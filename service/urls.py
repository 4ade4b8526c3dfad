"""URL rules used in more than one place: which hosts are loopback, when plain http is acceptable,
and the origin of a URL."""

from __future__ import annotations

from urllib.parse import urlsplit

# The streamable HTTP endpoint (MCP 2025-11-25 basic/transports "Streamable HTTP": one path serves
# POST, GET and DELETE).
MCP_PATH = "/mcp"

# Names and addresses of this machine. Plain http is acceptable only to these (development).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_mcp_path(path: str) -> bool:
    """True for the MCP endpoint and anything below it."""
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


def is_loopback(url: str) -> bool:
    """True when `url` names this machine."""
    return urlsplit(url).hostname in LOOPBACK_HOSTS


def https_unless_loopback(url: str) -> bool:
    """True for an https URL with a host, or a plain-http URL to this machine.

    Tokens, codes, cookies and client secrets travel to or from these URLs; without TLS anyone on
    the path reads them (RFC 6749 §3.1 / §3.2: "MUST require the use of TLS"). Loopback traffic
    never leaves the machine, so development may use plain http there.
    """
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS)


def origin(url: str) -> str:
    """`scheme://host[:port]` of `url` (RFC 6454 §4), or "" when it has no scheme or host."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
