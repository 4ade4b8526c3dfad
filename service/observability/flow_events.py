"""What an operator sees of each connect flow: a log line, a metric and an audit event per step,
each carrying the flow's non-secret id.

`FlowEvents` is the one place that turns a flow step into those three records, so "why did
Alice's flow fail?" is one query: find the `flow failed` line (it names the provider, the step and
the HTTP status or OAuth error), take its `flow_id`, and every other line of that flow, from the
tool call that created it, carries the same id (service/observability/logs.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from enum import StrEnum

from service.errors import (
    AccountIdTooLong,
    AccountNotNamed,
    AuthorizationResponseIssuerMismatch,
    ElicitationUserMismatch,
    MissingCode,
    MixUp,
    ProviderDenied,
    ProviderFailure,
    WrongBrowser,
)
from service.observability.audit import audit_flow
from service.observability.logs import Pseudonyms, flow_context
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing
from token_store import PendingElicitation, StoreUnavailable

logger = logging.getLogger("mcp_url_connect.flow")


class FlowOutcome(StrEnum):
    """How an elicitation ended, as the metrics, logs and audit events name it."""

    COMPLETED = "completed"
    DENIED = "denied"  # the user declined here or at the provider
    PROVIDER_ERROR = "provider_error"  # the provider's token or account endpoint failed
    EXPIRED = "expired"  # nobody finished it before its TTL
    REFUSED_OTHER_USER = "refused_other_user"  # opened by another user or browser: refused
    REFUSED = "refused"  # another check failed (mix-up, issuer, malformed answer)
    STORE_UNAVAILABLE = "store_unavailable"


# What the client is told when a flow it started ends without a connection (the retry's tool
# error on 2025-11-25, the resumed call's on 2026-07-28). `{provider}` is the display name.
FAILURE_TEXT: dict[FlowOutcome, str] = {
    FlowOutcome.DENIED: "Connecting {provider} was declined (in the browser or at {provider}).",
    FlowOutcome.PROVIDER_ERROR: "{provider} failed while connecting your account; try again later.",
    FlowOutcome.EXPIRED: "The link to connect {provider} expired before it was used.",
    FlowOutcome.REFUSED_OTHER_USER: (
        "Connecting {provider} was refused: the link was finished by another account or browser."
    ),
    FlowOutcome.REFUSED: "Connecting {provider} was refused: the answer from {provider} failed a check.",
    FlowOutcome.STORE_UNAVAILABLE: "Connecting {provider} failed: the server could not reach its storage.",
}
GENERIC = "Connecting {provider} did not succeed."
RETRY_HINT = " Call the tool again to start a new connection."


def failure_text(outcome: str | None, provider: str) -> str:
    """The tool error for a flow that ended with `outcome` (a FlowOutcome value, or None when the
    reason is unknown, e.g. a failure learned from the store after a restart)."""
    text = GENERIC
    if outcome is not None:
        with contextlib.suppress(ValueError):  # a value this version does not know
            text = FAILURE_TEXT.get(FlowOutcome(outcome), GENERIC)
    return text.format(provider=provider) + RETRY_HINT


def outcome_of(exc: BaseException) -> tuple[FlowOutcome, str, str]:
    """(outcome, step, detail) for an exception that failed a flow. `detail` is non-secret: an
    OAuth error code, an HTTP status, or the exception's type."""
    if isinstance(exc, ProviderDenied):
        return FlowOutcome.DENIED, "authorize", exc.error
    if isinstance(exc, ProviderFailure):
        return FlowOutcome.PROVIDER_ERROR, exc.step, str(exc)[:200]
    if isinstance(exc, AccountNotNamed):
        return FlowOutcome.PROVIDER_ERROR, "userinfo", "no account field"
    if isinstance(exc, AccountIdTooLong):
        return FlowOutcome.PROVIDER_ERROR, "userinfo", "account id too long"
    if isinstance(exc, (WrongBrowser, ElicitationUserMismatch)):
        return FlowOutcome.REFUSED_OTHER_USER, "callback", type(exc).__name__
    if isinstance(exc, (MixUp, AuthorizationResponseIssuerMismatch, MissingCode)):
        return FlowOutcome.REFUSED, "callback", type(exc).__name__
    if isinstance(exc, StoreUnavailable):
        return FlowOutcome.STORE_UNAVAILABLE, "store", str(exc)[:100]
    return FlowOutcome.REFUSED, "callback", type(exc).__name__


class FlowEvents:
    def __init__(
        self, metrics: Metrics, pseudonyms: Pseudonyms, tracing: Tracing, clock: Callable[[], float]
    ) -> None:
        self.metrics = metrics
        self.pseudonyms = pseudonyms
        self.tracing = tracing
        self._clock = clock

    def flow_id(self, elicitation: PendingElicitation) -> str:
        return self.pseudonyms.flow_id(elicitation.id)

    @contextlib.contextmanager
    def step(self, elicitation: PendingElicitation, name: str) -> Iterator[None]:
        """Inside: every log line carries this flow's id and user key, and one span covers it."""
        flow_id = self.flow_id(elicitation)
        with (
            flow_context(flow_id, self.pseudonyms.user_key(elicitation.user)),
            self.tracing.span(f"flow.{name}", flow_id=flow_id, provider=elicitation.provider),
        ):
            yield

    @contextlib.contextmanager
    def provider_call(self, provider: str, step: str) -> Iterator[None]:
        """Time one outbound call of a flow (`mcpuc_provider_call_duration_seconds`)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.provider_call_seconds.labels(provider=provider, step=step).observe(elapsed)

    def created(self, elicitation: PendingElicitation, revision: str) -> None:
        self.metrics.elicitations_created.labels(provider=elicitation.provider, revision=revision).inc()
        with self.step(elicitation, "created"):
            logger.info("flow created: provider=%s revision=%s", elicitation.provider, revision)
            audit_flow(
                "elicitation.created", elicitation.user, elicitation.provider, self.flow_id(elicitation)
            )

    def completed(self, elicitation: PendingElicitation) -> None:
        seconds = max(0.0, self._clock() - elicitation.created_at)
        self.metrics.elicitations_finished.labels(
            provider=elicitation.provider, outcome=FlowOutcome.COMPLETED
        ).inc()
        self.metrics.flow_seconds.labels(provider=elicitation.provider).observe(seconds)
        with self.step(elicitation, "completed"):
            logger.info("flow completed: provider=%s seconds=%.1f", elicitation.provider, seconds)

    def failed(self, elicitation: PendingElicitation, outcome: FlowOutcome, step: str, detail: str) -> None:
        self.metrics.elicitations_finished.labels(provider=elicitation.provider, outcome=outcome).inc()
        with self.step(elicitation, "failed"):
            logger.warning(
                "flow failed: provider=%s outcome=%s step=%s error=%s",
                elicitation.provider,
                outcome.value,
                step,
                detail,
            )
            self._audit("connect.failed", elicitation, outcome=outcome.value, step=step)

    def expired(self, elicitation: PendingElicitation) -> None:
        self.metrics.elicitations_finished.labels(
            provider=elicitation.provider, outcome=FlowOutcome.EXPIRED
        ).inc()
        with self.step(elicitation, "expired"):
            logger.info("flow expired: provider=%s", elicitation.provider)
            audit_flow(
                "elicitation.expired", elicitation.user, elicitation.provider, self.flow_id(elicitation)
            )

    def _audit(self, event: str, elicitation: PendingElicitation, **details: str) -> None:
        audit_flow(event, elicitation.user, elicitation.provider, self.flow_id(elicitation), **details)
