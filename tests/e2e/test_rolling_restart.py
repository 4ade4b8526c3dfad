"""Rolling restart and replica death behind the shipped nginx (docs/deploy.md, "Rolling restart").

- Under load on both revisions, each replica in turn gets SIGTERM and starts again: no call
  fails. A 2025-11-25 session that lived on a stopped replica answers 404 "Session not found" to
  its next call (the SDK client raises MCPError -32600; it does not re-initialize by itself), and
  the call succeeds on a new session.
- A replica is killed (SIGKILL): a raw 2025-11-25 client gets 404 with the JSON-RPC "Session
  not found" error from nginx, re-initializes, and its call succeeds on the other replica.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from mock_providers import mint_access_token
from mock_providers.testing.client import mcp_client
from mock_providers.testing.cluster import REPLICAS, Cluster
from tests.support.slow_cluster import running_slow_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # replicas drained and restarted, GRACE_SECONDS each

CALL_SECONDS = 0.3  # each call is in flight this long: a restart always catches some
CLIENTS = 6
GRACE_SECONDS = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_slow_cluster(tmp_path_factory, "rolling", GRACE_SECONDS)


def session_not_found(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(session_not_found(inner) for inner in exc.exceptions)
    return isinstance(exc, MCPError) and exc.error.code == -32600 and exc.error.message == "Session not found"


def what_went_wrong(cluster: Cluster) -> str:
    """For a failure message: nginx's answers other than 2xx and 404, and ERROR lines anywhere."""
    lines = []
    for name in ("nginx", *REPLICAS):
        path = cluster.log(name)
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            status = line.split('" ', 1)[1][:3] if '" ' in line and "upstream=" in line else ""
            if " ERROR " in line or (status[:1] in ("4", "5") and status != "404"):
                lines.append(f"{name}: {line}")
    return "\n".join(lines[-40:])


async def test_rolling_restart_under_load_fails_no_call(cluster: Cluster) -> None:
    restarted = anyio.Event()
    calls = {"answered": 0, "session_gone": 0}
    failures: list[str] = []

    async def client_loop(index: int) -> None:
        mode = "legacy" if index % 2 == 0 else "2026-07-28"
        while not restarted.is_set():
            try:
                async with mcp_client(cluster, f"roller{index}", mode) as (client, _):
                    while not restarted.is_set():
                        result = await client.call_tool("sleep", {"seconds": CALL_SECONDS})
                        assert not result.is_error, result
                        calls["answered"] += 1
            except Exception as exc:
                if restarted.is_set() and not failures:
                    return  # the client's own teardown against a replica that went away
                if mode == "legacy" and session_not_found(exc):
                    calls["session_gone"] += 1  # re-initialize, send the call again
                else:
                    failures.append(f"{mode}: {exc!r}")
                    return

    async def idle_client(index: int) -> None:
        """Holds a 2025-11-25 session (and its GET stream) without calling during the restart."""
        async with mcp_client(cluster, f"idler{index}", "legacy") as (client, _):
            assert not (await client.call_tool("sleep", {"seconds": 0})).is_error
            idle_ready.append(index)
            if len(idle_ready) == CLIENTS:
                all_idle.set()
            await restarted.wait()
            with pytest.raises(MCPError) as raised:  # its replica was restarted: the session is gone
                await client.call_tool("sleep", {"seconds": 0})
            assert session_not_found(raised.value)
        async with mcp_client(cluster, f"idler{index}", "legacy") as (client, _):
            assert not (await client.call_tool("sleep", {"seconds": 0})).is_error
            idle_done.append(index)

    idle_ready: list[int] = []
    all_idle = anyio.Event()
    idle_done: list[int] = []
    stopping: dict[str, float] = {}
    async with anyio.create_task_group() as clients:
        for index in range(CLIENTS):
            clients.start_soon(client_loop, index)
            clients.start_soon(idle_client, index)
        with anyio.fail_after(20):
            await all_idle.wait()  # every idle session exists before the restart
        await anyio.sleep(1.0)  # the test: calls under load before the restart...
        stopping = await anyio.to_thread.run_sync(cluster.rolling_restart)
        await anyio.sleep(1.0)  # ...and after it
        restarted.set()

    assert failures == [], what_went_wrong(cluster)
    assert sorted(idle_done) == list(range(CLIENTS))
    # Open GET streams did not hold a replica up until the grace period ran out.
    assert all(seconds < GRACE_SECONDS - 1 for seconds in stopping.values()), stopping
    assert calls["answered"] > 50, calls
    # A legacy client loses its session when its replica stops: about once per restart (twice
    # when it re-initialized on a replica in its drain window: that new session ends with it).
    assert 0 < calls["session_gone"] <= 2 * len(REPLICAS) * (CLIENTS // 2), calls
    for name in REPLICAS:
        assert [line for line in cluster.log(name).read_text().splitlines() if "ERROR" in line] == []


def mcp_headers(token: str, session: str | None = None) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    return headers


def rpc_result(response: httpx.Response) -> Any:
    """The JSON-RPC message of a POST answer (JSON, or the `data:` of its one SSE message; the
    priming event before it has empty data)."""
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip())
    return json.loads(text)


def initialize(http: httpx.Client, url: str, token: str) -> str:
    answer = http.post(
        url,
        headers=mcp_headers(token),
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        },
    )
    assert answer.status_code == 200, answer.text
    session: str = answer.headers["mcp-session-id"]
    done = http.post(
        url,
        headers=mcp_headers(token, session),
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
    )
    assert done.status_code == 202, done.text
    return session


def call_sleep(http: httpx.Client, url: str, token: str, session: str) -> httpx.Response:
    return http.post(
        url,
        headers=mcp_headers(token, session),
        json={
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 0}},
        },
    )


def test_killed_replica_answers_404_and_a_new_session_works(cluster: Cluster) -> None:
    token = mint_access_token(cluster.data_dir, "dora")
    with httpx.Client(timeout=10) as http:
        session = initialize(http, cluster.mcp_url, token)
        holder = session.split(".", 1)[0]
        cluster.stop_replica(holder, signal.SIGKILL)
        try:
            gone = call_sleep(http, cluster.mcp_url, token, session)
            assert gone.status_code == 404
            assert gone.json() == {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "Session not found"},
            }
            fresh = initialize(http, cluster.mcp_url, token)  # what the transport says to do
            assert not fresh.startswith(holder + ".")
            answer = call_sleep(http, cluster.mcp_url, token, fresh)
            assert answer.status_code == 200, answer.text
            assert rpc_result(answer)["result"]["isError"] is False
        finally:
            cluster.start_replica(holder)
