"""Waiting for a running server to report ready (a helper module, shared by e2e tests)."""

from __future__ import annotations

import time

import httpx

from mock_providers.testing.servers import DemoServers
from tests.support.settle import wait_until


async def wait_ready(servers: DemoServers, seconds: float = 10) -> float:
    """Poll /readyz (a real process converging, not a timed assertion); seconds it took."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=2) as http:

        async def ready() -> bool:
            return (await http.get(f"{servers.public_url}/readyz")).status_code == 200

        await wait_until(ready, "/readyz to answer 200", within=seconds, poll=0.1)
    return time.monotonic() - started
