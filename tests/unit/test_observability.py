"""Metrics registry, JSON logs with context fields, request ids and tracing: the building blocks."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.drain import Drain
from service.logs import (
    JsonFormatter,
    LogContextFilter,
    Pseudonyms,
    TextFormatter,
    current_request_id,
    flow_context,
    request_context,
)
from service.metrics import FlowOutcome, Metrics
from service.redaction import REDACTED, RedactingFilter
from service.request_id import request_id_from
from service.request_pass import RequestPass
from service.tracing import Tracing, TracingConfigError, tracing_from_environment, tracing_with
from token_store import UserRef

ALICE = UserRef("https://as.example", "alice")


# ---- metrics ----------------------------------------------------------------------------------


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


# ---- logs -------------------------------------------------------------------------------------


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.addFilter(LogContextFilter("mcp-1"))
    logger = logging.getLogger("test.observability")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream, handler
    finally:
        logger.removeHandler(handler)


def test_json_lines_carry_context_and_stay_redacted(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(JsonFormatter())
    names = Pseudonyms("s" * 32)
    flow_id = names.flow_id("E" * 43)
    with request_context("req-1"), flow_context(flow_id, names.user_key(ALICE)):
        logger.warning("callback: provider mockhub refused %s", "code=SECRETCODE&state=SECRETSTATE")
    logger.info("outside")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["level"] == "WARNING" and first["logger"] == "test.observability"
    assert first["request_id"] == "req-1" and first["replica"] == "mcp-1"
    assert first["flow_id"] == flow_id and first["user_key"].startswith("u-")
    assert "SECRETCODE" not in stream.getvalue() and "SECRETSTATE" not in stream.getvalue()
    assert REDACTED in first["message"]
    assert first["time"].endswith("Z")
    assert "flow_id" not in second and "request_id" not in second and second["replica"] == "mcp-1"


def test_exceptions_are_rendered_redacted_in_json(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(JsonFormatter())
    try:
        raise RuntimeError("GET /callback?code=LEAKME")
    except RuntimeError:
        logger.exception("boom")
    line = json.loads(stream.getvalue())
    assert "RuntimeError" in line["exception"] and "LEAKME" not in stream.getvalue()


def test_text_lines_append_the_context_fields(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    with flow_context("f-0123"):
        logger.info("hello")
    assert stream.getvalue().rstrip().endswith("hello [replica=mcp-1 flow_id=f-0123]")


FORGED = 'access_denied\r\n2026-01-01 00:00:00,000 INFO mcp_url_connect.audit: {"event": "connect"}'


def test_text_lines_escape_control_characters_so_a_value_cannot_forge_a_record(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    with request_context("req\n1"):
        logger.warning("flow failed: error=%s", FORGED + "\x1b[2J\u2028\x85")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "error=access_denied\\r\\n2026-01-01" in lines[0]
    assert "\\x1b[2J\\u2028\\x85" in lines[0] and "request_id=req\\n1" in lines[0]


def test_a_traceback_in_a_text_line_is_indented_so_its_message_cannot_forge_a_record(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    try:
        raise ValueError(FORGED)
    except ValueError:
        logger.exception("callback failed")
    first, *trace = stream.getvalue().splitlines()
    assert first.endswith("callback failed [replica=mcp-1]")
    assert trace and all(line.startswith("    ") for line in trace), trace
    assert "    ValueError: access_denied\\r" in trace  # the forged record stays inside the traceback
    assert "    2026-01-01 00:00:00,000 INFO mcp_url_connect.audit: {" in trace[-1]


def test_pseudonyms_are_keyed_stable_and_distinct() -> None:
    a, b = Pseudonyms("k" * 32), Pseudonyms("j" * 32)
    assert a.flow_id("x" * 43) == a.flow_id("x" * 43) != b.flow_id("x" * 43)
    assert a.user_key(ALICE) != a.user_key(UserRef(ALICE.iss, "bob"))
    assert "alice" not in a.user_key(ALICE) and len(a.flow_id("x" * 43)) == 18


# ---- request ids ------------------------------------------------------------------------------


def test_request_id_shape() -> None:
    assert request_id_from("abc-123_.:") == "abc-123_.:"
    for hostile in (None, "", "a" * 129, "a b", "x\r\nSet-Cookie: y", "é"):
        generated = request_id_from(hostile)
        assert generated != hostile and len(generated) == 32


async def test_request_id_is_echoed_and_visible_inside_the_request() -> None:
    async def handler(request: Request) -> JSONResponse:
        return JSONResponse({"seen": current_request_id()})

    app = RequestPass(Starlette(routes=[Route("/", handler)]), Drain(dict))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        given = await client.get("/", headers={"X-Request-ID": "from-nginx-1"})
        fresh = await client.get("/")
    assert given.headers["x-request-id"] == "from-nginx-1" == given.json()["seen"]
    assert fresh.headers["x-request-id"] == fresh.json()["seen"] and len(fresh.json()["seen"]) == 32
    assert current_request_id() is None


# ---- tracing ----------------------------------------------------------------------------------


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
