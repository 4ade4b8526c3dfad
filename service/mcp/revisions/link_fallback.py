"""The answer for a client that cannot take a URL elicitation: a tool error carrying the link.

Most clients in use declare no `elicitation.url` (docs/clients.md), so a model reads this answer
and relays it. The text says, in this order, what the model must do (show the link, wait until
the user says they are done, call the same tool again), which service and account are involved,
and when the link stops working. `structuredContent` carries the same facts for an agent
framework. Nothing in it is secret: the link is bound to the user who asked for it, and useless
to anyone else (2025-11-25/client-elicitation.mdx "Phishing").

A repeated call while the link is still unopened gets the same link back, as a short "still
waiting", so a client never sees the tool return a new URL on every call.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp_types import CallToolResult

from service.mcp.errors import tool_error
from service.providers.catalogue import ProviderConfig
from token_store import Connection, PendingElicitation


def connect_link_answer(
    elicitation: PendingElicitation,
    url: str,
    provider: ProviderConfig,
    held: Connection | None,
    *,
    waiting: bool,
) -> CallToolResult:
    """The tool error for `elicitation`: the full instructions the first time, "still waiting"
    when the same link is shown again."""
    service = provider.display_name
    expires = _rfc3339(elicitation.expires_at)
    if waiting:
        # A space before the full stop: a client that turns URLs into links keeps the stop out.
        text = (
            f"Still waiting for you to connect {service} at {url} . Show the user this link again; "
            "once they say they are done, call this same tool again with the same arguments."
        )
    else:
        account = (
            f"the {service} account {held.account_label!r} (reconnecting it)"
            if held is not None
            else f"the {service} account they sign in to at {service}"
        )
        text = (
            f"{service} is not connected for this user yet, and this MCP client cannot open the "
            "connect page itself. Do this:\n"
            f"1. Show the user this link and ask them to open it in a browser: {url}\n"
            f"2. Wait until the user says they are done (they sign in to this server, then approve access at "
            f"{service}; this will use {account}).\n"
            "3. Call this same tool again with the same arguments; it then answers normally.\n"
            f"The link is for this user only, works once, and expires at {expires}."
        )
    structured: dict[str, Any] = {
        "connect_url": url,
        "provider": provider.name,
        "elicitation_id": elicitation.id,
        "expires_at": expires,
    }
    return tool_error(text, structured)


def _rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(int(timestamp), UTC).isoformat().replace("+00:00", "Z")
