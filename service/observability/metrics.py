"""Prometheus metrics: what an operator graphs and alerts on.

One `Metrics` object per process, on a registry of its own (prometheus-client's default registry
is a module-level global; a registry per Runtime keeps tests and embedded apps apart). No label
ever carries a user id, a token, an elicitation id or a URL: labels are closed sets (provider
names from configuration, tool names, outcomes from closed enums: `FlowOutcome` in
service/observability/flow_events.py, `NotificationOutcome` below), so cardinality stays fixed.
"""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response


class NotificationOutcome(StrEnum):
    DELIVERED = "delivered"  # written to the originating session's stream
    LOST = "lost"  # the session was gone or the write failed
    NOT_APPLICABLE = "not_applicable"  # a 2026-07-28 flow: the retry carries the answer


# Latency buckets in seconds: tool calls and provider calls are milliseconds to a few seconds; a
# flow involves a human, so its buckets reach minutes.
_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_HUMAN = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.elicitations_created = Counter(
            "mcpuc_elicitations_created_total",
            "Connect flows started (URL-mode elicitations handed to a client).",
            ["provider", "revision"],
            registry=r,
        )
        self.elicitations_finished = Counter(
            "mcpuc_elicitations_finished_total",
            "Connect flows that ended, by outcome.",
            ["provider", "outcome"],
            registry=r,
        )
        self.tool_calls = Counter(
            "mcpuc_tool_calls_total",
            "Tool calls, by tool and result (ok, error, elicitation, input_required).",
            ["tool", "result"],
            registry=r,
        )
        self.webhooks = Counter(
            "mcpuc_webhooks_total",
            "Connection health webhook attempts, by event type and outcome "
            "(delivered, retry, given_up, lease_lost).",
            ["type", "outcome"],
            registry=r,
        )
        self.keepalive = Counter(
            "mcpuc_keepalive_refreshes_total",
            "Keep-alive sweep refreshes, by provider and outcome (ok, needs_reauthorization, failed).",
            ["provider", "outcome"],
            registry=r,
        )
        self.refreshes = Counter(
            "mcpuc_token_refreshes_total",
            "Provider token refreshes, by outcome (ok, invalid_grant, failed, shared).",
            ["provider", "outcome"],
            registry=r,
        )
        self.rate_limited = Counter(
            "mcpuc_provider_rate_limited_total",
            "Provider API answers refusing a tool's request for the provider's rate limit, by "
            "outcome (waited: sent again once the provider allowed; refused: the wait did not fit "
            "the call's deadline, or the provider named none, and the tool answered with an error).",
            ["provider", "outcome"],
            registry=r,
        )
        self.downstream_moves = Counter(
            "mcpuc_downstream_authorization_server_moves_total",
            "Remote MCP servers (kind mcp) seen naming another authorization server, by outcome "
            "(followed: resolved and registered there, its users connect again; refused: the "
            "start-up rules forbid it, its calls fail until the operator changes the entry).",
            ["provider", "outcome"],
            registry=r,
        )
        self.notifications = Counter(
            "mcpuc_completion_notifications_total",
            "notifications/elicitation/complete, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.mcp_requests_refused = Counter(
            "mcpuc_mcp_requests_refused_total",
            "MCP requests answered 429, by the limit they met (requests_per_second_per_user, "
            "requests_in_progress_per_user, sessions_per_user, sessions_per_replica).",
            ["limit"],
            registry=r,
        )
        self.store_errors = Counter(
            "mcpuc_store_errors_total",
            "Store operations that failed (backend unreachable or erroring).",
            ["operation"],
            registry=r,
        )
        self.admin_refusals = Counter(
            "mcpuc_admin_refusals_total",
            "Admin API requests refused before any action, by reason (no_token, invalid_token, "
            "client_not_allowed, insufficient_scope): every one, also those the audit log leaves out.",
            ["reason"],
            registry=r,
        )
        self.tool_call_seconds = Histogram(
            "mcpuc_tool_call_duration_seconds", "Tool call latency.", ["tool"], buckets=_FAST, registry=r
        )
        self.flow_seconds = Histogram(
            "mcpuc_flow_duration_seconds",
            "Connect flow duration, from the elicitation's creation to its completion.",
            ["provider"],
            buckets=_HUMAN,
            registry=r,
        )
        self.provider_call_seconds = Histogram(
            "mcpuc_provider_call_duration_seconds",
            "Outbound calls to providers and the authorization server, by step.",
            ["provider", "step"],
            buckets=_FAST,
            registry=r,
        )

        # The label children of tool calls, by (tool, result): a closed set (registered tool names
        # and the results above), so it stays small, and a call costs a dict lookup instead of
        # `labels()`'s validation and lock.
        self._tool_call_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}

    def tool_call(self, tool: str, result: str, seconds: float) -> None:
        """Count one finished tool call and observe its latency."""
        children = self._tool_call_children.get((tool, result))
        if children is None:
            children = self._tool_call_children[tool, result] = (
                self.tool_calls.labels(tool=tool, result=result),
                self.tool_call_seconds.labels(tool=tool),
            )
        calls, latency = children
        calls.inc()
        latency.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def metrics_endpoint(metrics: Metrics) -> Response:
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


async def serve_metrics(request: Request) -> Response:
    """`GET /metrics`: the Runtime's registry, in the text exposition format (on the metrics port,
    or on the main one when `metrics_port` is 0)."""
    return metrics_endpoint(request.app.state.runtime.metrics)
