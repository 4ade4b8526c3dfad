"""service/metrics.py: each registry is its own and exposes the documented families."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from service.flow_events import FlowOutcome
from service.metrics import Metrics


def test_metrics_registries_are_separate_and_expose_the_documented_families() -> None:
    one, two = Metrics(), Metrics()
    one.elicitations_finished.labels(provider="mockhub", outcome=FlowOutcome.DENIED).inc()
    families = {f.name: f for f in text_string_to_metric_families(one.exposition().decode())}
    assert {
        "mcpuc_elicitations_created",
        "mcpuc_elicitations_finished",
        "mcpuc_tool_calls",
        "mcpuc_token_refreshes",
        "mcpuc_completion_notifications",
        "mcpuc_store_errors",
        "mcpuc_tool_call_duration_seconds",
        "mcpuc_flow_duration_seconds",
        "mcpuc_provider_call_duration_seconds",
    } <= set(families)
    [sample] = [s for s in families["mcpuc_elicitations_finished"].samples if s.name.endswith("_total")]
    assert sample.labels == {"provider": "mockhub", "outcome": "denied"} and sample.value == 1
    assert b"denied" not in two.exposition()  # no shared global registry
