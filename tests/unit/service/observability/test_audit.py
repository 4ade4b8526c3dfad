"""service/observability/audit.py: events an outsider can cause at will are written at a bounded rate,
and the next one written says how many were left out."""

from __future__ import annotations

import json
import logging

import pytest

from service.observability.audit import ThrottledAudit
from tests.support.clock import MovableClock


def written(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "mcp_url_connect.audit"]


def test_at_most_limit_events_a_window_then_the_count_of_those_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")
    clock = MovableClock()
    audit = ThrottledAudit(limit=3, window=60.0, clock=clock)
    assert [audit.operator("refused", "anonymous", reason=str(i)) for i in range(10)] == [True] * 3 + [
        False
    ] * 7
    clock.advance(59)
    assert not audit.operator("refused", "anonymous", reason="still this window")
    clock.advance(1)
    assert audit.operator("refused", "anonymous", reason="next window")
    events = written(caplog)
    assert [e["reason"] for e in events] == ["0", "1", "2", "next window"]
    assert "suppressed" not in events[0] and events[-1]["suppressed"] == 8
    assert events[-1]["event"] == "operator_refused" and events[-1]["actor"] == "anonymous"
