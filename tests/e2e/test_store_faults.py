"""The shared store goes down under a running server, then comes back: Redis (a redis-server of
the test's own) and PostgreSQL (a server of the test's own, stopped and started on its data).

While it is down: tool calls get a clear JSON-RPC error and no connect URL; /readyz says 503
(/healthz stays 200); /connect answers 503. When it returns, the same process recovers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol, cast

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, URL_ELICITATION_REQUIRED

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import mcp_client
from mock_providers.testing.servers import DemoServers
from tests.e2e.readiness import wait_ready
from tests.needs import RedisServer
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.e2e


class StoreServer(Protocol):
    def start(self) -> object: ...
    def stop(self) -> None: ...


@pytest.fixture(params=["redis", "postgres"])
def store_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, StoreServer]]:
    if request.param == "redis":
        redis_server = RedisServer(tmp_path / "redis")
        redis_server.start()
        yield redis_server.url, redis_server
        redis_server.stop()
        return
    postgres = PostgresServer().start()
    restartable = SimpleNamespace(start=postgres.start, stop=lambda: postgres.stop(keep_data=True))
    try:
        yield postgres.url(), cast(StoreServer, restartable)
    finally:
        postgres.stop()


@pytest.fixture
def servers_on_store_server(tmp_path: Path, store_server: tuple[str, StoreServer]) -> Iterator[DemoServers]:
    """The demo on the test's own store server (not the e2e suite's `servers`: this store goes down)."""
    running = DemoServers(tmp_path / "data", overrides={"store_url": store_server[0]}).start()
    yield running
    running.stop()


async def _accept(params: Any) -> str:
    return "accept"


async def test_store_down_fails_closed_and_recovers(
    servers_on_store_server: DemoServers, store_server: tuple[str, StoreServer], browser: Browser
) -> None:
    _, server = store_server
    async with mcp_client(servers_on_store_server, "alice", "legacy", on_url=_accept) as (client, _):
        with pytest.raises(MCPError) as first:
            await client.call_tool("whoami", {})
        assert first.value.error.code == URL_ELICITATION_REQUIRED
        url = first.value.error.data["elicitations"][0]["url"]
        await browser.complete_connect(f"{servers_on_store_server.public_url}/connections", username="alice")

        server.stop()
        with pytest.raises(MCPError) as down:
            await client.call_tool("whoami", {})
        assert down.value.error.code == INTERNAL_ERROR
        assert "store is unavailable" in down.value.error.message
        assert "connect" not in down.value.error.message  # no URL whose binding was not saved
        listed = client.call_tool("list_connections", {})
        with pytest.raises(MCPError):
            await listed
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{servers_on_store_server.public_url}/readyz")).status_code == 503
            assert (await http.get(f"{servers_on_store_server.public_url}/healthz")).status_code == 200
        assert (await browser.get(url)).status_code == 503
        async with httpx.AsyncClient() as http:
            scraped = (await http.get(servers_on_store_server.metrics_url)).text
        assert 'mcpuc_store_errors_total{operation="' in scraped  # the operator sees the outage

        server.start()  # same port; no connection was stored
        # Ready again once the store answers and the completion bus has resubscribed.
        await wait_ready(servers_on_store_server)
        with pytest.raises(MCPError) as again:
            await client.call_tool("whoami", {})
        assert again.value.error.code == URL_ELICITATION_REQUIRED


async def test_a_replica_started_before_postgres_becomes_ready_by_itself(tmp_path: Path) -> None:
    """A replica that starts while PostgreSQL does not answer serves /healthz but not /readyz, and
    opens the store (and listens) once the database is up, without a restart."""
    postgres = PostgresServer()  # its port and password are chosen; nothing listens yet
    running = DemoServers(tmp_path / "data", overrides={"store_url": postgres.url()})
    try:
        running.start()
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{running.public_url}/healthz")).status_code == 200
            assert (await http.get(f"{running.public_url}/readyz")).status_code == 503
        postgres.start()
        await wait_ready(running, seconds=20)
    finally:
        running.stop()
        postgres.stop()
