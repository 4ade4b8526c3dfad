"""Sessions up to the caps keep a real `serve` process within the documented memory bound: each
one holding its whole SSE replay budget costs at most SESSION_MEMORY_KIB (docs/operations.md,
"Memory"). The caps here are smaller than the defaults so the test takes seconds; the same
measurement with the defaults is `python -m bench.session_memory --per-replica 1000`."""

from __future__ import annotations

from pathlib import Path

from bench.session_memory import measure
from service.mcp.sdk.session_limits import SESSION_MEMORY_KIB

PER_USER, PER_REPLICA = 20, 60


def test_sessions_up_to_the_caps_stay_within_the_documented_memory(tmp_path: Path) -> None:
    figures = measure(tmp_path, PER_USER, PER_REPLICA, users=PER_REPLICA // PER_USER + 2)
    # The first user's warm-up session counts toward the replica's cap.
    assert figures["sessions"] == PER_REPLICA - 1, figures
    assert figures["refused"] >= 1, figures  # the cap answered, not the client giving up
    grown_kib = (figures["rss_after_mib"] - figures["rss_before_mib"]) * 1024
    assert grown_kib <= figures["sessions"] * SESSION_MEMORY_KIB, figures
