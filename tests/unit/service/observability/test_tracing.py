"""service/observability/tracing.py: off by default, on with the OTEL variables; spans carry attributes and
mark errors."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from service.observability.tracing import Tracing, TracingConfigError, tracing_from_environment, tracing_with


def test_tracing_is_off_by_default_and_on_with_otel_variables() -> None:
    assert not tracing_from_environment({}).enabled
    assert not tracing_from_environment({"OTEL_TRACES_EXPORTER": "none"}).enabled
    assert not tracing_from_environment(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}
    ).enabled
    console = tracing_from_environment({"OTEL_TRACES_EXPORTER": "console"})
    assert console.enabled
    console.shutdown()
    with pytest.raises(TracingConfigError, match="unsupported exporter"):
        tracing_from_environment({"OTEL_TRACES_EXPORTER": "zipkin-ish"})


def test_spans_carry_attributes_and_mark_errors() -> None:
    exporter = InMemorySpanExporter()
    tracing = tracing_with(SimpleSpanProcessor(exporter))
    with tracing.span("tool_call", tool="whoami", flow_id="f-1", skipped=None):
        pass
    with pytest.raises(ValueError), tracing.span("flow.callback", provider="mockhub"):
        raise ValueError("code=SECRET")
    ok, failed = exporter.get_finished_spans()
    assert ok.name == "tool_call" and dict(ok.attributes or {}) == {"tool": "whoami", "flow_id": "f-1"}
    assert failed.status.status_code.name == "ERROR" and failed.status.description == "ValueError"
    assert "SECRET" not in str(failed.to_json())


def test_noop_tracing_costs_no_spans() -> None:
    tracing = Tracing()
    with tracing.span("tool_call", tool="whoami") as span:
        assert not span.is_recording()
