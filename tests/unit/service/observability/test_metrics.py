"""service/observability/metrics.py: each registry is its own and exposes the documented families."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.observability.flow_events import FlowOutcome
from service.observability.metrics import Metrics


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


def test_each_tool_call_is_counted_and_timed_under_its_own_labels() -> None:
    metrics = Metrics()
    metrics.tool_call("whoami", "ok", 0.002)
    metrics.tool_call("whoami", "ok", 0.2)
    metrics.tool_call("whoami", "elicitation", 0.004)
    value = metrics.registry.get_sample_value
    assert value("mcpuc_tool_calls_total", {"tool": "whoami", "result": "ok"}) == 2
    assert value("mcpuc_tool_calls_total", {"tool": "whoami", "result": "elicitation"}) == 1
    assert value("mcpuc_tool_call_duration_seconds_count", {"tool": "whoami"}) == 3
    assert value("mcpuc_tool_call_duration_seconds_bucket", {"tool": "whoami", "le": "0.005"}) == 2
    assert value("mcpuc_tool_call_duration_seconds_sum", {"tool": "whoami"}) == pytest.approx(0.206)
