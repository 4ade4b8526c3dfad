"""Audit events: one structured log line per use of a stored token, connect, refresh, revoke,
and per connect flow created, failed or expired.

The logger is `mcp_url_connect.audit`; each message is a JSON object with `event` and the
user, provider and account it concerns. Never a token: callers pass identifiers only.
"""

from __future__ import annotations

import json
import logging

from token_store import ConnectionKey, UserRef

LOGGER = logging.getLogger("mcp_url_connect.audit")


def audit(event: str, key: ConnectionKey, **details: str | int | float | bool | None) -> None:
    if not LOGGER.isEnabledFor(logging.INFO):  # off: not even the JSON is built
        return
    record = {
        "event": event,
        "iss": key.user.iss,
        "sub": key.user.sub,
        "provider": key.provider,
        "account": key.account,
        **details,
    }
    LOGGER.info(json.dumps(record, sort_keys=True))


def audit_flow(
    event: str, user: UserRef, provider: str, flow_id: str, **details: str | int | float | bool | None
) -> None:
    """An event about a connect flow (created, failed, expired): no account exists yet, so the
    flow id joins it to the flow's log lines."""
    if not LOGGER.isEnabledFor(logging.INFO):
        return
    record = {"event": event, "iss": user.iss, "sub": user.sub, "provider": provider, "flow_id": flow_id}
    LOGGER.info(json.dumps({**record, **details}, sort_keys=True))


def audit_operator(action: str, actor: str, **details: str | int | float | bool | None) -> None:
    """An operator's action over users' connections (CLI or admin API): who asked (`actor`: the
    admin token's subject, `static-token`, or `cli:<login>`) and with which filters."""
    if not LOGGER.isEnabledFor(logging.INFO):
        return
    record = {"event": f"operator_{action}", "actor": actor, **details}
    LOGGER.info(json.dumps(record, sort_keys=True))
