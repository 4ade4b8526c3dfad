"""Connection health webhooks, signed per the Standard Webhooks specification.

Events: `connection.created`, `connection.needs_reauthorization`, `connection.recovered` and
`connection.deleted` (`data.reason`: `user`, `operator` or `revocation`). Each is written to the
store's outbox (`Store.enqueue_webhook`) when it happens, and sent from there by `WebhookSender`,
which every replica runs: a message is claimed under a lease, so one replica sends it at a time,
and one whose replica died is sent by another once the lease ends. A receiver that does not
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
LEASE_SECONDS = 60.0  # a claimed message is this replica's to send for this long
BATCH = 50  # messages claimed at once
MAX_ATTEMPTS = 12  # 5 s doubling, capped at an hour: about 6 hours of tries
FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 3600.0


def retry_delay(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones (exponential, capped)."""
    return float(min(FIRST_RETRY_SECONDS * 2 ** max(attempts - 1, 0), MAX_RETRY_SECONDS))


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
        """Claim the due messages and try each once; how many were delivered."""
        store = self._store
        delivered = 0
        for message in await store.claim_webhooks(self._clock(), LEASE_SECONDS, BATCH):
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
            self._metrics.webhooks.labels(type=message.type, outcome=outcome).inc()
            await store.settle_webhook(message.id, retry_at)
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
