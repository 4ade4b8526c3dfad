"""Audit events: one structured log line per use of a stored token, connect, refresh, revoke,
and per connect flow created, failed or expired.

The logger is `mcp_url_connect.audit`; each message is a JSON object with `event` and the
user, provider and account it concerns. Never a token: callers pass identifiers only.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

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


class ThrottledAudit:
    """Audit events an outsider can cause at will (an admin API request refused before any
    action), at most `limit` a `window` seconds: a flood of them cannot flood the audit log and
    bury what matters (OWASP Logging Cheat Sheet, "Event attributes" / protecting the log from
    floods). Those left out are counted, and the next event written says how many (`suppressed`).

    A fixed window counter, written by hand: one counter and one timestamp, which a rate-limiting
    library would wrap in storage backends this does not need."""

    def __init__(
        self, limit: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limit = limit
        self._window = window
        self._clock = clock
        self._window_start = clock()
        self._written = 0
        self._suppressed = 0

    def operator(self, action: str, actor: str, **details: str | int | float | bool | None) -> bool:
        """`audit_operator(action, actor, **details)` unless this window's events are used up;
        True when written."""
        now = self._clock()
        if now - self._window_start >= self._window:
            self._window_start, self._written = now, 0
        # mutant: admin.refusal_audit_throttled
        if self._written >= self._limit:
            self._suppressed += 1
            return False
        self._written += 1
        suppressed, self._suppressed = self._suppressed, 0
        audit_operator(action, actor, **details, **({"suppressed": suppressed} if suppressed else {}))
        return True
