"""Two real `serve` replicas with a test-only slow tool (tests/e2e/slow_serve.py) behind nginx."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from mock_providers.testing.cluster import Cluster
from tests.needs import need_binary, need_redis


def running_slow_cluster(tmp_path_factory: Any, name: str, grace_seconds: float) -> Iterator[Cluster]:
    need_binary("envsubst")  # the router's template (mock_providers/testing/router.py)
    running = Cluster(
        tmp_path_factory.mktemp(name),
        need_redis(),
        need_binary("nginx"),
        serve_command=(sys.executable, "-m", "tests.e2e.slow_serve"),
        environ={"MCPUC_SHUTDOWN_GRACE_SECONDS": str(grace_seconds)},
    )
    try:
        yield running.start()
    finally:
        running.stop()
