"""URL rules used in more than one place: this server's paths, which hosts are loopback, when
plain http is acceptable, and the origin of a URL."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

# The streamable HTTP endpoint (MCP 2025-11-25 basic/transports "Streamable HTTP": one path serves
# POST, GET and DELETE).
MCP_PATH = "/mcp"

# The browser half of a URL-mode elicitation (connect_routes/connect.py). The link carries only
# the opaque elicitation id (2025-11-25 client-elicitation.mdx, "Safe URL Handling").
CONNECT_PATH = "/connect"
CONNECT_API_KEY_PATH = CONNECT_PATH + "/api-key"
CONNECT_CANCEL_PATH = CONNECT_PATH + "/cancel"
ELICITATION_ID_PARAM = "elicitationId"
# One redirect URI per provider (RFC 9700 §4.4.2, mix-up): a Starlette path template.
CALLBACK_PATH = "/callback/{provider}"
# This server's Client ID Metadata Document for a remote MCP server's authorization server
# (draft-ietf-oauth-client-id-metadata-document-00): one per provider, its one redirect URI.
CLIENT_METADATA_PATH = "/oauth/client-metadata/{provider}"
# The user's connections page and its forms (connect_routes/connections_page.py).
CONNECTIONS_PATH = "/connections"
CONNECTIONS_DISCONNECT_PATH = CONNECTIONS_PATH + "/disconnect"
CONNECTIONS_DEFAULT_PATH = CONNECTIONS_PATH + "/default"
# The browser's sign-in at the MCP authorization server (connect_routes/login.py); the callback is
# the redirect URI registered there, so the route and the URL sent are one string.
LOGIN_PATH = "/login"
LOGIN_CALLBACK_PATH = LOGIN_PATH + "/callback"
LOGOUT_PATH = "/logout"

# Names and addresses of this machine. Plain http is acceptable only to these (development).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_mcp_path(path: str) -> bool:
    """True for the MCP endpoint and anything below it."""
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


def connect_link(elicitation_id: str) -> str:
    """The path and query of the link the user opens for `elicitation_id`."""
    return f"{CONNECT_PATH}?{urlencode({ELICITATION_ID_PARAM: elicitation_id})}"


def is_connect_link(path: str) -> bool:
    """True for a path and query that `connect_link` could have made."""
    return path.startswith(CONNECT_PATH + "?")


def callback_path(provider: str) -> str:
    """The path of `provider`'s redirect URI."""
    return CALLBACK_PATH.format(provider=provider)


def client_metadata_path(provider: str) -> str:
    """The path of `provider`'s Client ID Metadata Document."""
    return CLIENT_METADATA_PATH.format(provider=provider)


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
