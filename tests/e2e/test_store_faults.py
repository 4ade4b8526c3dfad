"""Redis goes down under a running server, then comes back (a redis-server of the test's own).

While it is down: tool calls get a clear JSON-RPC error and no connect URL; /readyz says 503
(/healthz stays 200); /connect answers 503. When it returns, the same process recovers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, URL_ELICITATION_REQUIRED

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import mcp_client
from mock_providers.testing.servers import DemoServers
from tests.e2e.readiness import wait_ready
from tests.needs import RedisServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def servers(tmp_path: Path, redis_server: RedisServer) -> Iterator[DemoServers]:
    running = DemoServers(tmp_path / "data", overrides={"store_url": redis_server.url}).start()
    yield running
    running.stop()


async def _accept(params: Any) -> str:
    return "accept"


async def test_redis_down_fails_closed_and_recovers(
    servers: DemoServers, redis_server: RedisServer, browser: Browser
) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=_accept) as (client, _):
        with pytest.raises(MCPError) as first:
            await client.call_tool("whoami", {})
        assert first.value.error.code == URL_ELICITATION_REQUIRED
        url = first.value.error.data["elicitations"][0]["url"]
        await browser.complete_connect(f"{servers.public_url}/connections", username="alice")

        redis_server.stop()
        with pytest.raises(MCPError) as down:
            await client.call_tool("whoami", {})
        assert down.value.error.code == INTERNAL_ERROR
        assert "store is unavailable" in down.value.error.message
        assert "connect" not in down.value.error.message  # no URL whose binding was not saved
        listed = client.call_tool("list_connections", {})
        with pytest.raises(MCPError):
            await listed
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{servers.public_url}/readyz")).status_code == 503
            assert (await http.get(f"{servers.public_url}/healthz")).status_code == 200
        assert (await browser.get(url)).status_code == 503
        async with httpx.AsyncClient() as http:
            scraped = (await http.get(servers.metrics_url)).text
        assert 'mcpuc_store_errors_total{operation="' in scraped  # the operator sees the outage

        redis_server.start()  # same port, same (empty) data: nothing was persisted
        # Ready again once the store answers and the completion bus has resubscribed.
        await wait_ready(servers)
        with pytest.raises(MCPError) as again:
            await client.call_tool("whoami", {})
        assert again.value.error.code == URL_ELICITATION_REQUIRED
