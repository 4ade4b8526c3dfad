"""Delivery of `notifications/elicitation/complete` to the MCP session that started a flow.

The SDK has no registry of live sessions, so we keep, per elicitation id, the session object
from the tool call that created it. Delivery goes only to that object, and only if the completed
record still names the same MCP session (docs/threat-model.md, "7. Completion notifications only
to the originating session"). Stateless (2026-07-28) waiters are woken through the same hub.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from token_store import PendingElicitation

logger = logging.getLogger(__name__)


@dataclass
class _Entry:
    session: Any | None  # mcp ServerSession; None for stateless waiters
    mcp_session_id: str | None
    expires_at: float
    event: anyio.Event = field(default_factory=anyio.Event)


class CompletionHub:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._entries: dict[str, _Entry] = {}
        self._clock = clock

    def register(self, elicitation: PendingElicitation, session: Any | None) -> None:
        """Remember where to deliver the completion of `elicitation`."""
        self._purge()
        self._entries[elicitation.id] = _Entry(session, elicitation.mcp_session_id, elicitation.expires_at)

    async def completed(self, elicitation: PendingElicitation) -> bool:
        """Deliver the completion of `elicitation`; True when a notification was sent."""
        self._purge()
        entry = self._entries.pop(elicitation.id, None)
        if entry is None:
            return False
        entry.event.set()
        if entry.session is None or entry.mcp_session_id is None:
            return False
        if entry.mcp_session_id != elicitation.mcp_session_id:
            logger.warning("completion: session mismatch for an elicitation; not delivered")
            return False
        try:
            await entry.session.send_elicit_complete(elicitation.id)
        except Exception as exc:  # a closed session must not fail the browser's callback
            logger.info("completion: session gone (%s)", type(exc).__name__)
            return False
        return True

    async def wait(self, elicitation: PendingElicitation, seconds: float) -> None:
        """Wait up to `seconds` for `elicitation` to complete in this process."""
        self._purge()
        entry = self._entries.get(elicitation.id)
        if entry is None:
            entry = _Entry(None, None, elicitation.expires_at)
            self._entries[elicitation.id] = entry
        with anyio.move_on_after(seconds):
            await entry.event.wait()
        if entry.session is None and self._entries.get(elicitation.id) is entry:
            del self._entries[elicitation.id]  # a stateless waiter leaves nothing behind

    def _purge(self) -> None:
        now = self._clock()
        for key in [k for k, e in self._entries.items() if e.expires_at <= now]:
            del self._entries[key]
