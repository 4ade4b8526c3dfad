"""`python -m bench.flow --quick` runs and prints every table (numbers are not checked: the
benchmark asserts nothing). Real processes on loopback ports: a few seconds."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TABLES = (
    "== connect flows: throughput and CPU per flow",
    "== one flow on 2025-11-25, hop by hop",
    "== one flow on 2026-07-28, hop by hop",
    "== the MCP server's CPU per request on 2025-11-25",
    "== the MCP server's CPU per request on 2026-07-28",
    "== store operations per connect flow ==",
    "== the token-backed call ==",
    "== the MCP session alone ==",
)


def run_bench(module: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run a bench to its end. `timeout` only stops a hung one (a loaded machine may take several
    times its quiet 30 s); the bench and every server it started are in one process group, all
    stopped with it, so a hung run leaves no server behind."""
    with subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as bench:
        try:
            stdout, stderr = bench.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):  # the group is gone: nothing left over
                os.killpg(bench.pid, signal.SIGKILL)
    run = subprocess.CompletedProcess(bench.args, bench.returncode, stdout, stderr)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def bench_flow(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.flow", "--quick", *args)


@pytest.mark.e2e
def test_bench_flow_quick_prints_its_tables() -> None:
    run = bench_flow()
    for title in TABLES:
        assert title in run.stdout, f"missing {title!r} in:\n{run.stdout}"
    for row in ("serve, SQLite", "MCP server GET /callback/mockhub", "SQLite", "SDK server + SSE resumption"):
        assert row in run.stdout


@pytest.mark.e2e
def test_bench_flow_only_prints_the_tables_asked_for() -> None:
    run = bench_flow("--only", "store")
    assert "== store operations per connect flow ==" in run.stdout
    for title in TABLES:
        if "store operations" not in title:
            assert title not in run.stdout, f"{title!r} printed although not asked for"


@pytest.mark.e2e
def test_bench_embedding_runs_and_prints_both_tables() -> None:
    run = run_bench("bench.embedding", "--calls", "50", "--flows", "1")
    for line in ("through UrlConnectMiddleware", "ratio (median)", "FastMCP embedding", "SDK embedding"):
        assert line in run.stdout, run.stdout


def test_bench_broker_walk_traces_every_case_on_both_revisions() -> None:
    run = run_bench("bench.broker_walk")
    rows = [line for line in run.stdout.splitlines() if line.startswith(("2025-11-25", "2026-07-28"))]
    assert len(rows) == 8, run.stdout
    # Each case ends the way it should, so the walk traced is the case named.
    assert [row.split()[-7] for row in rows] == [
        "UrlElicitationRequiredError",
        "Connection",
        "Connection",
        "CallToolResult",
        "InputRequiredResult",
        "Connection",
        "InputRequiredResult",
        "CallToolResult",
    ], run.stdout


@pytest.mark.e2e
def test_bench_webhook_lease_prints_its_figures() -> None:
    run = run_bench("bench.webhook_lease", "--messages", "4")
    assert "delivered more than once: 0 of 4" in run.stdout, run.stdout
