"""Redis restarts and late starts, with a redis-server of the test's own (AOF on, so a restart
keeps what was acknowledged): no completion notification is lost while the session's replica
lives, and a replica that starts before Redis becomes ready by itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from mock_providers.testing.browser import Browser, callback_location
from mock_providers.testing.client import accept, legacy_elicitation, mcp_client
from mock_providers.testing.servers import DemoServers
from tests.e2e.readiness import wait_ready
from tests.needs import RedisServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    yield server
    server.stop()


async def test_a_completion_after_a_redis_restart_still_reaches_the_session(
    tmp_path: Path, redis_server: RedisServer, browser: Browser
) -> None:
    servers = DemoServers(tmp_path / "data", overrides={"store_url": redis_server.url}).start()
    try:
        await wait_ready(servers)
        async with mcp_client(servers, "alice", "legacy", on_url=accept) as (client, recorder):
            elicitation = (await legacy_elicitation(client)).elicitations[0]
            callback = await callback_location(browser, elicitation.url, "alice")
            # Redis restarts between the provider's consent and the callback: the bus's pooled
            # connection and its subscription are both stale.
            redis_server.stop()
            redis_server.start()
            page = await browser.get(callback)
            assert page.status_code == 200, page.text
            with anyio.fail_after(10):
                await recorder.completed.wait()
            assert recorder.completed_ids() == [elicitation.elicitation_id]
            assert not (await client.call_tool("whoami", {})).is_error
    finally:
        servers.stop()


async def test_a_completion_published_while_the_bus_was_away_is_delivered_on_resubscribe(
    tmp_path: Path, redis_server: RedisServer, browser: Browser
) -> None:
    """The store is the truth, pub/sub only a wake-up: a flow completed by another replica while
    this one was not subscribed is found in the store when it subscribes again."""
    servers = DemoServers(tmp_path / "data", overrides={"store_url": redis_server.url}).start()
    try:
        await wait_ready(servers)
        runtime = servers.apps["mcp"].state.runtime
        async with mcp_client(servers, "alice", "legacy", on_url=accept) as (client, recorder):
            elicitation = (await legacy_elicitation(client)).elicitations[0]
            # Another replica completes the flow, but its message never arrives here (this
            # replica's bus drops it, as if it was disconnected at that moment).
            hub_completed = runtime.hub.completed

            async def lost(record: object) -> bool:
                return False

            runtime.hub.completed = lost
            await browser.complete_connect(elicitation.url, username="alice")
            runtime.hub.completed = hub_completed
            assert recorder.completed_ids() == []
            # Redis restarts: the bus resubscribes and re-reads the store.
            redis_server.stop()
            redis_server.start()
            with anyio.fail_after(10):
                await recorder.completed.wait()
            assert recorder.completed_ids() == [elicitation.elicitation_id]
    finally:
        servers.stop()


async def test_a_replica_started_before_redis_becomes_ready_by_itself(
    tmp_path: Path, browser: Browser
) -> None:
    redis_server = RedisServer(tmp_path / "redis")  # not started yet
    servers = DemoServers(tmp_path / "data", overrides={"store_url": redis_server.url}).start()
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(f"{servers.public_url}/healthz")).status_code == 200
            assert (await http.get(f"{servers.public_url}/readyz")).status_code == 503
            assert (await http.get(f"{servers.public_url}/connect?elicitationId={'x' * 43}")).status_code in (
                302,
                303,
                503,
            )
        redis_server.start()
        await wait_ready(servers)
        async with mcp_client(servers, "alice", "legacy", on_url=accept) as (client, recorder):
            elicitation = (await legacy_elicitation(client)).elicitations[0]
            await browser.complete_connect(elicitation.url, username="alice")
            with anyio.fail_after(10):
                await recorder.completed.wait()
    finally:
        servers.stop()
        redis_server.stop()
