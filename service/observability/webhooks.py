"""Connection health webhooks, signed per the Standard Webhooks specification.

Events: `connection.created`, `connection.needs_reauthorization`, `connection.recovered` and
`connection.deleted` (`data.reason`: `user`, `operator` or `revocation`). Each is written to the
store's outbox (`Store.enqueue_webhook`) when it happens, and sent from there by `WebhookSender`,
which every replica runs: a message is claimed alone, under a lease that covers its one attempt,
so one replica sends it at a time, and one whose replica died is sent by another once the lease
ends; the attempt is recorded only under the claimer's own lease. A receiver that does not
answer 2xx gets the same message (same `webhook-id`) again, with exponential backoff, up to
MAX_ATTEMPTS. Payloads carry identifiers and status only, never a token.

Signing and the headers (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`) are
the `standardwebhooks` package's, the specification's own library (docs/operations.md, "Webhooks").
"""

from __future__ import annotations

import datetime
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
from standardwebhooks import Webhook

from service.observability.metrics import Metrics
from token_store import ConnectionKey, ConnectionStatus, Store, StoreUnavailable, WebhookMessage

logger = logging.getLogger(__name__)

CREATED = "connection.created"
NEEDS_REAUTHORIZATION = "connection.needs_reauthorization"
RECOVERED = "connection.recovered"
DELETED = "connection.deleted"
EVENT_TYPES = (CREATED, NEEDS_REAUTHORIZATION, RECOVERED, DELETED)
DELETE_REASONS = ("user", "operator", "revocation")

POLL_SECONDS = 1.0  # how often each replica looks for due messages
# A lease is one attempt's timeout and this much more: the store calls around the attempt (a
# store answers or fails within a few seconds: 2 s on Redis, 5 s of SQLite's busy timeout).
LEASE_MARGIN_SECONDS = 10.0
MAX_ATTEMPTS = 12  # 5 s doubling, capped at an hour: about 6 hours of tries
FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 3600.0


def retry_delay(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones (exponential, capped)."""
    return float(min(FIRST_RETRY_SECONDS * 2 ** max(attempts - 1, 0), MAX_RETRY_SECONDS))


def lease_covers_attempt(now: float, attempt_seconds: float, claimed: WebhookMessage) -> bool:
    """Whether the lease on `claimed` (until its `next_attempt_at`) lasts through an attempt
    started now: once the lease ends, another replica may claim the message and send it too. A
    claim that took longer than the lease's margin (a slow store) leaves its message alone."""
    # mutant: webhooks.lease_covers_attempt
    return now + attempt_seconds <= claimed.next_attempt_at


def signing_key(secret: str) -> Webhook:
    """The signer for `MCPUC_WEBHOOK_SECRET` (`whsec_` + base64, as the specification's
    libraries generate it); ValueError naming the setting, never the value, when malformed."""
    try:
        return Webhook(secret)
    except Exception:  # the library raises binascii.Error or its own for an empty key
        raise ValueError("MCPUC_WEBHOOK_SECRET: expected whsec_ followed by base64") from None


class ConnectionEvents:
    """Writes connection health events to the outbox; does nothing when no receiver is set."""

    def __init__(self, store: Store, enabled: bool, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self.enabled = enabled
        self._clock = clock

    async def emit(
        self,
        event: str,
        key: ConnectionKey,
        *,
        account_label: str,
        status: ConnectionStatus,
        reason: str | None = None,
    ) -> None:
        """Queue one event. A store failure is logged, not raised: the user's own action (a
        connect, a disconnect) has already happened and must not fail for its notification."""
        if not self.enabled:
            return
        now = self._clock()
        data: dict[str, Any] = {
            "iss": key.user.iss,
            "sub": key.user.sub,
            "provider": key.provider,
            "account": key.account,
            "account_label": account_label,
            "status": status.value,
        }
        if reason is not None:
            data["reason"] = reason
        # The payload shape the specification recommends: type, timestamp, data.
        body = json.dumps(
            {"type": event, "timestamp": _iso(now), "data": data}, separators=(",", ":"), sort_keys=True
        )
        message = WebhookMessage(f"msg_{secrets.token_urlsafe(18)}", event, body, now, now)
        try:
            await self._store.enqueue_webhook(message)
        except StoreUnavailable as exc:
            logger.warning("webhook %s not queued: %s", event, exc)


class WebhookSender:
    """Sends due outbox messages to `url`, signed; every replica runs one (`Runtime.running`)."""

    def __init__(
        self,
        store: Store,
        http: httpx.AsyncClient,
        url: str,
        secret: str,
        *,
        timeout_seconds: float,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._http = http
        self._url = url
        self._signer = signing_key(secret)
        self._timeout = timeout_seconds
        self.lease_seconds = timeout_seconds + LEASE_MARGIN_SECONDS
        self._metrics = metrics
        self._clock = clock

    async def run(self, poll_seconds: float = POLL_SECONDS) -> None:
        while True:
            try:
                await self.send_due()
            except StoreUnavailable as exc:
                logger.warning("webhooks: %s; trying again", exc)
            await anyio.sleep(poll_seconds)

    async def send_due(self) -> int:
        """Send the due messages, one claim and one attempt at a time, until none is due; how
        many were delivered. One at a time, so that each lease covers the work it claims: a
        batch sent in turn to a slow receiver would outlast any lease short enough to hand a
        dead replica's messages to another quickly."""
        store = self._store
        delivered = 0
        while claimed := await store.claim_webhooks(self._clock(), self.lease_seconds, 1):
            message = claimed[0]
            if not lease_covers_attempt(self._clock(), self._timeout, message):
                logger.warning("webhook %s: claimed too late to send within its lease; left", message.id)
                continue
            ok = await self._send(message)
            attempts = message.attempts + 1
            if ok:
                delivered += 1
                outcome = "delivered"
                retry_at = None
            elif attempts >= MAX_ATTEMPTS:
                outcome = "given_up"
                retry_at = None
                logger.error("webhook %s (%s) given up after %d attempts", message.id, message.type, attempts)
            else:
                outcome = "retry"
                retry_at = self._clock() + retry_delay(attempts)
            if not await store.settle_webhook(message, retry_at):
                # The lease ended first and another replica holds the message now: its attempt counts.
                outcome = "lease_lost"
                logger.warning("webhook %s: lease ended before the attempt was recorded", message.id)
            self._metrics.webhooks.labels(type=message.type, outcome=outcome).inc()
        return delivered

    def signed_headers(self, message: WebhookMessage, timestamp: datetime.datetime) -> dict[str, str]:
        """The Standard Webhooks headers of one attempt: the message's id, the attempt's time, and
        the HMAC-SHA256 of `id.timestamp.body` under the shared secret (Standard Webhooks,
        "Signature scheme"), so the receiver can refuse a forged or replayed delivery."""
        return {
            "content-type": "application/json",
            "webhook-id": message.id,
            "webhook-timestamp": str(int(timestamp.timestamp())),
            # mutant: webhooks.signature_covers_body "message.body" -> '"{}"'
            "webhook-signature": self._signer.sign(message.id, timestamp, message.body),
        }

    async def _send(self, message: WebhookMessage) -> bool:
        # A fresh timestamp on every attempt: receivers refuse one more than 5 minutes off.
        timestamp = datetime.datetime.fromtimestamp(int(self._clock()), datetime.UTC)
        try:
            with anyio.fail_after(self._timeout):
                response = await self._http.post(
                    self._url, content=message.body.encode(), headers=self.signed_headers(message, timestamp)
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            logger.info("webhook %s: %s", message.id, type(exc).__name__)
            return False
        if not 200 <= response.status_code < 300:
            logger.info("webhook %s: receiver answered %d", message.id, response.status_code)
            return False
        return True


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat(timespec="seconds")
