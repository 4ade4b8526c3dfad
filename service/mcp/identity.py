"""Who is calling: the user comes only from the verified MCP access token (docs/threat-model.md,
"1. The user is `(iss, sub)` from a verified MCP access token")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

from service.errors import BlankClientName, NotAuthenticated
from service.flow.security_checks import require_visible_client_name, session_id_checked_by_sdk
from service.mcp.revisions.capabilities import is_stateless_revision
from token_store import UserRef


@dataclass(frozen=True)
class Caller:
    user: UserRef
    client_id: str
    mcp_session_id: str | None  # a 2025-11-25 session the SDK checked is this caller's; else None


def current_caller(ctx: Context[Any, Any]) -> Caller:
    """The verified caller of this request; never a tool argument or a header alone."""
    token = get_access_token()
    issuer = (token.claims or {}).get("iss") if token else None
    if token is None or not token.subject or not isinstance(issuer, str):
        raise NotAuthenticated()
    headers = ctx.headers or {}
    # The session id only routes the completion notification and its failure notice.
    session_id = session_id_checked_by_sdk(headers.get(MCP_SESSION_ID_HEADER), is_stateless_revision(ctx))
    return Caller(
        user=UserRef(iss=issuer, sub=token.subject), client_id=token.client_id, mcp_session_id=session_id
    )


MAX_CLIENT_NAME = 64


def client_name(ctx: Context[Any, Any]) -> str | None:
    """The name the client gave in its 2025-11-25 `initialize` (`clientInfo.name`), or None.

    The client chooses it freely, so it only helps the user recognise their own request
    (2025-11-25/client-elicitation.mdx "Phishing": the same-user check decides, never this):
    none with a blank or invisible letter (`require_visible_client_name`), printable characters
    only, at most `MAX_CLIENT_NAME`, and autoescaped where a page shows it.
    """
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    if not isinstance(name, str):
        return None
    try:
        require_visible_client_name(name)
    except BlankClientName:
        return None
    shown = " ".join("".join(c if c.isprintable() else " " for c in name).split())[:MAX_CLIENT_NAME]
    return shown or None
