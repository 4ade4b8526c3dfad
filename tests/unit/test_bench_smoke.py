"""`python -m bench.flow --quick` runs and prints every table (numbers are not checked: the
benchmark asserts nothing). Real processes on loopback ports: a few seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TABLES = (
    "== connect flows: throughput and CPU per flow",
    "== one flow on 2025-11-25, hop by hop",
    "== one flow on 2026-07-28, hop by hop",
    "== store operations per connect flow ==",
    "== the token-backed call ==",
)


@pytest.mark.e2e
def test_bench_flow_quick_prints_its_tables() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "bench.flow", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for title in TABLES:
        assert title in run.stdout, f"missing {title!r} in:\n{run.stdout}"
    for row in ("bench, SQLite", "MCP server GET /callback/mockhub", "SQLite", "bare tool, SDK server"):
        assert row in run.stdout
