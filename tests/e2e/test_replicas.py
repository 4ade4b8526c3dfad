"""Two `mcp-url-connect serve` processes sharing Redis (one primary, a Redis Cluster, or a primary
behind Sentinel), or PostgreSQL alone, behind real nginx
configured from deploy/nginx/nginx.conf, with `mcp-url-connect mock-providers` as the issuer and
provider. Every test runs on each store; on Sentinel, a flow also survives a failover.

- 2025-11-25: the client's session lives on one replica; the browser's callback is sent to the
  other; the completion still reaches the client (Redis pub/sub, PostgreSQL LISTEN/NOTIFY) and the
  retry succeeds.
- 2026-07-28: a stateless client completes the flow with its requests spread over both.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest

from mock_providers.testing.browser import Browser, callback_location
from mock_providers.testing.client import legacy_elicitation, mcp_client
from mock_providers.testing.cluster import REPLICAS, Cluster, wait_for
from tests.needs import ClusterGroup, SentinelGroup, need_binary, need_redis
from tests.support.postgres import PostgresServer
from tests.support.settle import quiet_for

pytestmark = pytest.mark.e2e

FAILOVER_SECONDS = 10.0  # the goal for the first good call after a failover (docs/redis.md)


@pytest.fixture(scope="module", params=["redis", "postgres", "redis-cluster", "sentinel"])
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    nginx = need_binary("nginx")
    need_binary("envsubst")
    if request.param == "redis":
        running = Cluster(tmp_path_factory.mktemp("cluster"), need_redis(), nginx)
    elif request.param == "redis-cluster":
        group: ClusterGroup = request.getfixturevalue("cluster_group")
        running = Cluster(tmp_path_factory.mktemp("cluster"), group.url(), nginx)
    elif request.param == "sentinel":
        sentinels: SentinelGroup = request.getfixturevalue("sentinel_group")
        running = Cluster(tmp_path_factory.mktemp("cluster"), sentinels.url(), nginx)
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        database = f"replicas_{uuid.uuid4().hex[:12]}"
        server.psql(f"CREATE DATABASE {database}")
        running = Cluster(tmp_path_factory.mktemp("cluster"), None, nginx, postgres_url=server.url(database))
    try:
        yield running.start()
    finally:
        running.stop()


async def _accept(params: Any) -> str:
    return "accept"


async def test_callback_on_the_other_replica_still_notifies_the_session(
    cluster: Cluster, browser: Browser
) -> None:
    async with mcp_client(cluster, "alice", "legacy", on_url=_accept) as (client, recorder):
        error = await legacy_elicitation(client)
        elicitation = error.elicitations[0]
        [session_id] = recorder.session_ids
        holder = session_id.split(".", 1)[0]  # the affinity prefix names the replica
        assert holder in REPLICAS
        other = next(name for name in REPLICAS if name != holder)

        location = urlsplit(await callback_location(browser, elicitation.url))
        direct = urlunsplit(location._replace(netloc=urlsplit(cluster.replica_url(other)).netloc))
        # The callback lands on the replica without the session, as the browser sends it: the
        # public Host and the browser's cookies (the replica has an address of its own).
        cookies = "; ".join(f"{cookie.name}={cookie.value}" for cookie in browser.http.cookies.jar)
        async with httpx.AsyncClient(timeout=15) as direct_client:
            page = await direct_client.get(direct, headers={"Host": location.netloc, "Cookie": cookies})
        assert page.status_code == 200, page.text
        assert "/callback/mockhub" in cluster.log(other).read_text()
        assert "/callback/mockhub" not in cluster.log(holder).read_text()

        with anyio.fail_after(10):
            await recorder.completed.wait()
        assert recorder.completed_ids() == [elicitation.elicitation_id]
        result = await client.call_tool("whoami", {})
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["login"] == "octocat"
        await quiet_for(0.3, "a second completion notification")
        assert recorder.completed_ids() == [elicitation.elicitation_id]  # exactly once


async def test_stateless_client_is_served_by_both_replicas(cluster: Cluster, browser: Browser) -> None:
    before = {name: cluster.mcp_posts(name) for name in REPLICAS}

    async def open_in_browser(params: Any) -> str:
        page = await browser.complete_connect(params.url, username="bob")
        assert page.status_code == 200
        return "accept"

    async with mcp_client(cluster, "bob", "2026-07-28", on_url=open_in_browser) as (client, recorder):
        # The router picks a replica per request among the addresses its resolver returns, in a
        # random order: 20 requests all landing on one replica is a 1 in 500,000 event.
        for _ in range(20):
            await client.list_tools()
        result = await client.call_tool("whoami", {})
        assert not result.is_error, result
        assert recorder.session_ids == set()  # stateless: no session
    served = {name: cluster.mcp_posts(name) - before[name] for name in REPLICAS}
    assert all(count > 0 for count in served.values()), served


@pytest.mark.slow  # the sentinels' failover
async def test_a_flow_completes_through_a_sentinel_failover(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, browser: Browser
) -> None:
    """The primary dies between the connect link and the callback: the replicas follow the
    promoted replica by themselves, the completion still reaches the session (its bus subscribed
    again on the new primary), and the stored connection answers the retry."""
    sentinels: SentinelGroup = request.getfixturevalue("sentinel_group")
    running = Cluster(tmp_path_factory.mktemp("failover"), sentinels.url(), need_binary("nginx")).start()
    try:
        async with mcp_client(running, "alice", "legacy", on_url=_accept) as (client, recorder):
            error = await legacy_elicitation(client)
            elicitation = error.elicitations[0]
            old = sentinels.primary_port()
            dead = next(node for node in sentinels.nodes if node.port == old)
            await anyio.to_thread.run_sync(dead.stop, signal.SIGKILL)
            await anyio.to_thread.run_sync(sentinels.wait_promoted, old)
            # The replicas follow the promoted replica by themselves: a call in flight during the
            # failover may fail (503), the next ones succeed; wait until both say they are ready.
            for name in REPLICAS:
                ready = f"{running.replica_url(name)}/readyz"
                await anyio.to_thread.run_sync(
                    wait_for, ready, running.processes[name], running.log(name), FAILOVER_SECONDS
                )
            page = await browser.complete_connect(elicitation.url, username="alice")
            assert page.status_code == 200, page.text
            with anyio.fail_after(10):
                await recorder.completed.wait()
            assert recorder.completed_ids() == [elicitation.elicitation_id]
            result = await client.call_tool("whoami", {})
            assert not result.is_error
    finally:
        running.stop()
        await anyio.to_thread.run_sync(sentinels.restart_stopped_as_replicas)
