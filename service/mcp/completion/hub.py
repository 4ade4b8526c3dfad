"""Delivery of `notifications/elicitation/complete` to the MCP session that started a flow.

The SDK has no registry of live sessions, so we keep, per elicitation id, the session object
from the tool call that created it. Delivery goes only to that object, and only if the finished
record still names the same MCP session (docs/threat-model.md, "7. Completion notifications only
to the originating session"). Stateless (2026-07-28) waiters are woken through the same hub.

Every way a flow ends reaches the session: completed, failed (with the reason, so the session's
retry can say what happened instead of asking again), and expired (`expire_due`, run every
second by the Runtime). The store is the source of truth and the bus only a wake-up: after the
bus reconnects, `resync` re-reads every registered elicitation and delivers those that finished
while messages could not arrive.

Entries are indexed by expiry in a heap, so registering, finishing and purging cost O(log n)
whatever the number of pending flows.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from service.observability.flow_events import FlowOutcome
from service.observability.metrics import Metrics, NotificationOutcome
from token_store import ElicitationStatus, PendingElicitation, StoreUnavailable, UserRef

logger = logging.getLogger(__name__)
MAX_REASONS = 10_000


@dataclass
class _Entry:
    elicitation: PendingElicitation
    session: Any | None  # mcp ServerSession; None for stateless waiters
    event: anyio.Event = field(default_factory=anyio.Event)


@dataclass(frozen=True)
class Failure:
    """A flow that ended without a connection, remembered for the session's next call."""

    elicitation_id: str
    outcome: str | None  # a FlowOutcome value; None when only the store's FAILED status is known
    expires_at: float


class CompletionHub:
    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        *,
        on_expired: Callable[[PendingElicitation], None] | None = None,
    ) -> None:
        self._entries: dict[str, _Entry] = {}
        # (user, mcp session id, provider) -> the failure that user's next call in it reports (once).
        self._failures: dict[tuple[UserRef, str, str], Failure] = {}
        self._expiry: list[tuple[float, str]] = []  # (expires_at, elicitation id), a heap
        self._expired: list[_Entry] = []  # expired with a session waiting: told by expire_due
        # elicitation id -> failure reason, for stateless retries; bounded like _failures.
        self._reasons: dict[str, str] = {}
        self._clock = clock
        self._metrics = metrics or Metrics()
        self.on_expired = on_expired

    def register(self, elicitation: PendingElicitation, session: Any | None) -> None:
        """Remember where to deliver the end of `elicitation`."""
        self._purge()
        self._entries[elicitation.id] = _Entry(elicitation, session)
        heapq.heappush(self._expiry, (elicitation.expires_at, elicitation.id))

    def pending(self) -> list[PendingElicitation]:
        """The registered elicitations whose session is waiting here."""
        return [e.elicitation for e in self._entries.values() if e.session is not None]

    async def completed(self, elicitation: PendingElicitation) -> bool:
        """Deliver the end (COMPLETE or FAILED) of `elicitation`; True when a notification was sent."""
        self._purge()
        if elicitation.status is ElicitationStatus.FAILED and elicitation.failure is not None:
            self._reasons[elicitation.id] = elicitation.failure
        entry = self._entries.pop(elicitation.id, None)
        if entry is None:
            return False
        entry.event.set()
        if entry.session is None or entry.elicitation.mcp_session_id is None:
            self._metrics.notifications.labels(outcome=NotificationOutcome.NOT_APPLICABLE).inc()
            return False
        # mutant: completion.session_match
        if entry.elicitation.mcp_session_id != elicitation.mcp_session_id:
            logger.warning("completion: session mismatch for an elicitation; not delivered")
            return False
        if elicitation.status is ElicitationStatus.FAILED:
            self._remember_failure(entry.elicitation, elicitation.failure)
        return await self._notify(entry)

    def take_failure(self, user: UserRef, mcp_session_id: str | None, provider: str) -> Failure | None:
        """The failure of `user`'s last flow at `provider` in this session, once (then it asks
        again). Keyed by the user too: a session id alone is no proof of whose it is."""
        self._purge()
        if mcp_session_id is None:
            return None
        # mutant: completion.failure_reported_once peek
        return self._failures.pop(_failure_key(user, mcp_session_id, provider), None)

    def failure_of(self, elicitation_id: str) -> str | None:
        """The reason a flow failed, when its failure passed through this hub (2026-07-28
        retries, which read the FAILED status from the store)."""
        return self._reasons.get(elicitation_id)

    async def wait(self, elicitation: PendingElicitation, seconds: float) -> None:
        """Wait up to `seconds` for `elicitation` to finish in this process."""
        self._purge()
        entry = self._entries.get(elicitation.id)
        if entry is None:
            entry = _Entry(elicitation, None)
            self._entries[elicitation.id] = entry
            heapq.heappush(self._expiry, (elicitation.expires_at, elicitation.id))
        with anyio.move_on_after(seconds):
            await entry.event.wait()
        if entry.session is None and self._entries.get(elicitation.id) is entry:
            del self._entries[elicitation.id]  # a stateless waiter leaves nothing behind

    async def expire_due(self) -> int:
        """Tell each session whose flow expired unfinished; returns how many were told."""
        self._purge()
        expired, self._expired = self._expired, []
        now = self._clock()
        for key in [k for k, f in self._failures.items() if f.expires_at <= now]:
            del self._failures[key]
        if len(self._reasons) > MAX_REASONS:
            self._reasons.clear()  # only a hint for a message; a flood must not grow memory
        told = 0
        for entry in expired:
            if self.on_expired is not None:
                self.on_expired(entry.elicitation)
            self._remember_failure(entry.elicitation, FlowOutcome.EXPIRED.value)
            told += await self._notify(entry)
        return told

    async def resync(self, read: Callable[[str], Awaitable[PendingElicitation | None]]) -> int:
        """After the bus was away: deliver every registered flow the store says has ended."""
        delivered = 0
        for elicitation in self.pending():
            try:
                current = await read(elicitation.id)
            except StoreUnavailable:
                return delivered  # the next reconnect tries again
            if current is not None and not current.status.is_live:
                delivered += await self.completed(current)
        return delivered

    # ---- internals --------------------------------------------------------------------------------

    async def _notify(self, entry: _Entry) -> bool:
        assert entry.session is not None
        try:
            await entry.session.send_elicit_complete(entry.elicitation.id)
        except Exception as exc:  # a closed session must not fail the browser's callback
            logger.info("completion: session gone (%s)", type(exc).__name__)
            self._metrics.notifications.labels(outcome=NotificationOutcome.LOST).inc()
            return False
        self._metrics.notifications.labels(outcome=NotificationOutcome.DELIVERED).inc()
        return True

    def _remember_failure(self, elicitation: PendingElicitation, outcome: str | None) -> None:
        if elicitation.mcp_session_id is None:
            return
        # Kept as long as the link would have lived, so the map never outgrows the live flows.
        expires_at = max(elicitation.expires_at, self._clock() + 60)
        key = _failure_key(elicitation.user, elicitation.mcp_session_id, elicitation.provider)
        self._failures[key] = Failure(elicitation.id, outcome, expires_at)

    def _purge(self) -> None:
        """Registrations past their expiry leave; those with a session waiting are kept aside
        for `expire_due` to tell. O(log n) per expired entry, nothing for the others."""
        now = self._clock()
        while self._expiry and self._expiry[0][0] <= now:
            _, elicitation_id = heapq.heappop(self._expiry)
            entry = self._entries.get(elicitation_id)
            if entry is None or entry.elicitation.expires_at > now:
                continue  # finished already, or registered again with a later expiry
            del self._entries[elicitation_id]
            entry.event.set()
            if entry.session is not None:
                self._expired.append(entry)


def _failure_key(user: UserRef, mcp_session_id: str, provider: str) -> tuple[UserRef, str, str]:
    # mutant: completion.failure_per_user drop 0
    return (user, mcp_session_id, provider)
