"""SIGTERM drains a replica: a real `serve` process (tests/e2e/slow_serve.py: `serve` plus a
test-only `sleep` tool) is stopped while tool calls are in flight on both protocol revisions.
The calls succeed, the process exits within its grace period, and its log has no ERROR line.
In process: readiness answers 503 from the moment draining starts."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest

from mock_providers.testing.client import mcp_client
from mock_providers.testing.cluster import Cluster
from mock_providers.testing.servers import DemoServers
from tests.support.slow_cluster import running_slow_cluster

pytestmark = pytest.mark.e2e

GRACE_SECONDS = 10
CALL_SECONDS = 2.0


@dataclass(frozen=True)
class Replica:
    """One replica addressed directly (no proxy): the calls must land on the one we stop."""

    data_dir: Path
    mcp_url: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_slow_cluster(tmp_path_factory, "drain", GRACE_SECONDS)


def error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "ERROR" in line or "Traceback" in line]


@pytest.mark.slow  # a replica drained: up to GRACE_SECONDS
async def test_sigterm_lets_calls_in_flight_finish(cluster: Cluster) -> None:
    name = "mcp-1"
    replica = Replica(cluster.data_dir, f"{cluster.replica_url(name)}/mcp")
    log_start = len(cluster.log(name).read_text())
    results: dict[str, object] = {}

    stopped = anyio.Event()
    connected = {mode: anyio.Event() for mode in ("legacy", "2026-07-28")}

    async def call(user: str, mode: str) -> None:
        try:
            async with mcp_client(replica, user, mode) as (client, _):
                await client.list_tools()  # the client's opening requests are done
                connected[mode].set()
                result = await client.call_tool("sleep", {"seconds": CALL_SECONDS})
                results[mode] = result.structured_content or result.content
                await stopped.wait()  # the legacy client's GET stream stays open meanwhile
        except* httpx2.ConnectError:
            # Leaving, the SDK client ends its session (DELETE) or reopens its GET stream: the
            # replica is gone by then. The call's answer is what this test is about.
            assert mode in results

    stopped_after = 0.0
    async with anyio.create_task_group() as calls:
        calls.start_soon(call, "alice", "legacy")
        calls.start_soon(call, "bob", "2026-07-28")
        for event in connected.values():
            await event.wait()
        await anyio.sleep(CALL_SECONDS / 2)  # both calls are in flight
        assert "sleep" not in str(results)
        started = time.monotonic()
        status = await anyio.to_thread.run_sync(cluster.stop_replica, name, signal.SIGTERM, GRACE_SECONDS + 5)
        stopped_after = time.monotonic() - started
        stopped.set()
    try:
        assert status == 0
        assert set(results) == {"legacy", "2026-07-28"}, results
        assert all("slept" in str(result) for result in results.values()), results
        assert stopped_after < GRACE_SECONDS, stopped_after  # the GET stream did not hold it up
        log = cluster.log(name).read_text()[log_start:]
        assert "draining" in log
        assert [line for line in log.splitlines() if "ERROR" in line or "Traceback" in line] == []
    finally:
        cluster.start_replica(name)


@pytest.mark.slow  # a replica drained: up to GRACE_SECONDS
async def test_a_new_call_after_sigterm_goes_to_the_other_replica(cluster: Cluster) -> None:
    """Through nginx: once a replica stops, stateless calls land on the other one."""
    async with mcp_client(cluster, "carol", "2026-07-28") as (client, _):
        await anyio.to_thread.run_sync(cluster.stop_replica, "mcp-2")
        try:
            for _ in range(5):
                result = await client.call_tool("sleep", {"seconds": 0})
                assert not result.is_error, result
        finally:
            cluster.start_replica("mcp-2")


def test_readiness_is_503_while_draining(servers: DemoServers) -> None:
    readyz = f"{servers.public_url}/readyz"
    assert httpx.get(readyz).status_code == 200
    servers.apps["mcp"].state.drain.begin()
    answer = httpx.get(readyz)
    assert answer.status_code == 503
    assert answer.json() == {"status": "draining"}
