"""service/observability/logs.py: JSON and text lines with context fields, redacted and unforgeable; keyed
pseudonyms."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from service.observability.logs import (
    JsonFormatter,
    LogContextFilter,
    Pseudonyms,
    TextFormatter,
    flow_context,
    request_context,
)
from service.observability.redaction import REDACTED, RedactingFilter
from token_store import UserRef

ALICE = UserRef("https://as.example", "alice")


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


def test_context_blocks_nest_and_restore_the_outer_fields_even_on_an_error(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(JsonFormatter())
    with request_context("req-outer"):
        try:
            with request_context("req-inner"), flow_context("f-inner"):
                logger.info("inner")
                raise RuntimeError("leave the block")
        except RuntimeError:
            pass
        logger.info("outer")
    inner, outer = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inner["request_id"] == "req-inner" and inner["flow_id"] == "f-inner"
    assert outer["request_id"] == "req-outer" and "flow_id" not in outer


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
