"""OpenTelemetry spans for tool calls and the steps of a connect flow.

Off unless the standard variables ask for traces: `OTEL_TRACES_EXPORTER` (`otlp`, `console`,
`none`) or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`);
`OTEL_SDK_DISABLED=true` wins. Off, `span` is one shared null context holding the API's invalid
span: no export, no allocation, no change of the current context. The provider belongs to the
Runtime, not to the process-wide global of the OpenTelemetry API, so two apps in one process
(tests, the demo) keep their spans apart.

Span attributes are non-secret by construction: the flow id (a keyed hash, service/observability/logs.py), the
provider name, the tool name, the outcome. Never a user id, token, URL or elicitation id.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode

INSTRUMENTATION = "mcp-url-connect"
# Reusable and stateless: the span of every block while tracing is off. The API's no-op tracer
# would still build a context manager per call and attach a context around the block.
_NO_SPAN: AbstractContextManager[Span] = nullcontext(INVALID_SPAN)


class TracingConfigError(ValueError):
    """An OTEL_* variable asks for something this installation cannot do; the message says what."""


class Tracing:
    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.provider = provider
        self._tracer: trace.Tracer = (
            provider.get_tracer(INSTRUMENTATION) if provider is not None else trace.NoOpTracer()
        )

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def span(self, name: str, **attributes: str | int | float | bool | None) -> AbstractContextManager[Span]:
        """A span around the block; an exception marks it as an error (type only: messages may
        carry provider text) and propagates."""
        if self.provider is None:
            return _NO_SPAN
        return self._recorded_span(name, attributes)

    @contextlib.contextmanager
    def _recorded_span(
        self, name: str, attributes: Mapping[str, str | int | float | bool | None]
    ) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            name, record_exception=False, set_status_on_exception=False
        ) as span:
            for key, value in attributes.items():
                if value is not None:
                    span.set_attribute(key, value)
            try:
                yield span
            except BaseException as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


def tracing_from_environment(environ: Mapping[str, str]) -> Tracing:
    """The tracer the OTEL_* variables ask for. Hand-written because the SDK's own
    auto-configuration sets the process-wide global provider, which we keep per Runtime."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Tracing()
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names and (
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        names = ["otlp"]
    exporters = [_exporter(name) for name in names if name != "none"]
    if not exporters:
        return Tracing()
    service = environ.get("OTEL_SERVICE_NAME") or INSTRUMENTATION
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider)


def tracing_with(processor: SpanProcessor) -> Tracing:
    """Tracing into one processor (tests: `SimpleSpanProcessor(InMemorySpanExporter())`)."""
    provider = TracerProvider(resource=Resource.create({"service.name": INSTRUMENTATION}))
    provider.add_span_processor(processor)
    return Tracing(provider)


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter,
            )
        except ImportError:
            raise TracingConfigError(
                "OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: "
                "pip install opentelemetry-exporter-otlp-proto-http"
            ) from None
        exporter: SpanExporter = OTLPSpanExporter()  # reads the OTEL_EXPORTER_OTLP_* variables
        return exporter
    raise TracingConfigError(
        f"OTEL_TRACES_EXPORTER: unsupported exporter {name[:32]!r} (otlp, console, none)"
    )
