"""Audit events: one structured log line per use of a stored token, connect, refresh, revoke.

The logger is `mcp_url_connect.audit`; each message is a JSON object with `event` and the
user, provider and account it concerns. Never a token: callers pass identifiers only.
"""

from __future__ import annotations

import json
import logging

from token_store import ConnectionKey

LOGGER = logging.getLogger("mcp_url_connect.audit")


def audit(event: str, key: ConnectionKey, **details: str | int | float | bool | None) -> None:
    record = {
        "event": event,
        "iss": key.user.iss,
        "sub": key.user.sub,
        "provider": key.provider,
        "account": key.account,
        **details,
    }
    LOGGER.info(json.dumps(record, sort_keys=True))
