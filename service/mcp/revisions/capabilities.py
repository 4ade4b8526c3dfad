"""The one place that knows which protocol revision a request speaks and what its client supports."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Metric label values for the two families of revisions (never the client's raw string).
LEGACY_REVISION = "2025-11-25"
STATELESS_REVISION = "2026-07-28"


def is_stateless_revision(ctx: Context[Any, Any]) -> bool:
    """True on 2026-07-28 and later: InputRequiredResult + requestState, never -32042."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def supports_url_elicitation(ctx: Context[Any, Any]) -> bool:
    """Did the client declare `elicitation.url`? The SDK does not check this for us.

    2025-11-25 client-elicitation: servers MUST NOT send a mode the client did not declare;
    2026-07-28 patterns-mrtr: no inputRequests the client has not declared support for.
    """
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities else None
    # mutant: revision.url_capability
    return elicitation is not None and elicitation.url is not None


def supports_form_elicitation(ctx: Context[Any, Any]) -> bool:
    """Did the client declare `elicitation.form`, or the legacy empty `elicitation: {}`?

    2025-11-25/client-elicitation.mdx "Capabilities": "an empty capabilities object is equivalent
    to declaring support for `form` mode only"; servers MUST NOT send a mode the client did not
    declare (2026-07-28 patterns-mrtr: no inputRequests the client has not declared support for).
    """
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities else None
    if elicitation is None:
        return False
    # mutant: revision.form_capability
    return elicitation.form is not None or elicitation.url is None
