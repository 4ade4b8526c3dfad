"""The router (deploy/nginx/nginx.conf exactly as rendered for Kubernetes) in front of two real
replicas that it finds through a DNS server of the test's own, under the headless Service's
names (mock_providers/testing/cluster.py).

- every log line of a full flow through the router (nginx's and the replicas'): no code, state
  or connect-link id;
- a rollout that recreates a replica at a new address: the router follows it;
- a replica killed: its sessions get 404 "Session not found" (the JSON-RPC answer a replica
  gives), the other replica's sessions are served;
- a replica killed while DNS still lists it: connect flows, their callbacks included, are served by
  the live replica on both revisions.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from mock_providers.testing.browser import Browser, ScriptedUser
from mock_providers.testing.client import MODES, accept, connect_url, legacy_elicitation, mcp_client, retry
from mock_providers.testing.cluster import REPLICAS, Cluster
from mock_providers.testing.router import replica_name
from tests.needs import need_binary, need_redis
from tests.support.settle import wait_until

pytestmark = pytest.mark.e2e

SECRET_PARAMETERS = {"code", "state", "elicitationId"}
SESSION_NOT_FOUND = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    redis_url = need_redis()
    nginx = need_binary("nginx")
    need_binary("envsubst")
    # JSON lines: each carries its request_id (docs/operations.md), compared with the router's.
    running = Cluster(
        tmp_path_factory.mktemp("router"), redis_url, nginx, environ={"MCPUC_LOG_FORMAT": "json"}
    )
    try:
        yield running.start()
    finally:
        running.stop()


def _secrets_in(urls: list[str]) -> set[str]:
    """The codes, states and elicitation ids in `urls`' query strings, and in the URLs they
    carry (`/login?next=/connect?elicitationId=…`)."""
    found: set[str] = set()
    for url in urls:
        for name, value in parse_qsl(urlsplit(url).query):
            if name in SECRET_PARAMETERS:
                found.add(value)
            elif value.startswith(("/", "http")):
                found |= _secrets_in([value])
    return found


async def test_no_log_line_of_a_flow_through_the_router_holds_a_code_state_or_link(
    cluster: Cluster, browser: Browser
) -> None:
    async def open_in_browser(params: Any) -> str:
        page = await browser.complete_connect(params.url, username="carol")
        assert page.status_code == 200, page.text
        return "accept"

    async with mcp_client(cluster, "carol", "legacy", on_url=open_in_browser) as (client, recorder):
        error = await legacy_elicitation(client)
        await open_in_browser(error.elicitations[0])
        await recorder.wait_completed(error.elicitations[0].elicitation_id, timeout=10)
        result = await client.call_tool("whoami", {})
        assert not result.is_error
    secrets = _secrets_in(browser.visited)
    visited = " ".join(browser.visited)
    # The control: the flow went through the router, with both legs' codes and states and the link.
    assert "/login/callback?" in visited and "/callback/mockhub?" in visited and "/login?next=" in visited
    assert error.elicitations[0].elicitation_id in secrets and len(secrets) >= 5, secrets

    def logged(text: str) -> bool:
        return '"GET /callback/mockhub"' in text and '"GET /login/callback"' in text

    # nginx writes a request's log line after answering it
    await wait_until(lambda: logged(cluster.log("nginx").read_text()), "the router's lines of both callbacks")
    router_log = cluster.log("nginx").read_text()
    for name in ("nginx", *REPLICAS):
        text = cluster.log(name).read_text()
        leaked = sorted(secret for secret in secrets if secret in text)
        assert not leaked, f"{name}'s log holds {len(leaked)} of the flow's codes, states or links"
    # One request id from the router to the replica's lines: the callback's, for one.
    [callback_id] = re.findall(r'"GET /callback/mockhub" .* request_id=(\S+)$', router_log, re.MULTILINE)
    replica_lines = [
        json.loads(line)
        for name in REPLICAS
        for line in cluster.log(name).read_text().splitlines()
        if line.startswith("{")
    ]
    assert any(line.get("request_id") == callback_id for line in replica_lines), callback_id


async def _session_on(cluster: Cluster, user: str, replica: str, seconds: float = 15.0) -> str:
    """A 2025-11-25 session of `user` held by `replica`: initialize until the router's choice of
    replica falls on it (after a rollout, once its cached DNS answer has expired: `valid=2s`)."""
    opened: list[str] = []

    async def on_replica() -> bool:
        async with mcp_client(cluster, user, "legacy") as (client, recorder):
            await client.list_tools()
            opened.extend(recorder.session_ids)
        return opened[-1].startswith(replica + ".")

    await wait_until(on_replica, f"a session held by {replica}", within=seconds, poll=0.1)
    return opened[-1]


async def test_a_rollout_with_new_addresses_is_followed(cluster: Cluster) -> None:
    """A replica recreated at a new address (a pod replaced in a rollout) is reached there, for
    new sessions and for the sessions it then holds."""
    cluster.move_replica("mcp-1", "127.0.0.4")
    session_id = await _session_on(cluster, "dave", "mcp-1")
    async with httpx.AsyncClient(timeout=10) as raw:
        answer = await raw.post(
            cluster.mcp_url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"},
        )
    assert answer.status_code == 401  # reached the replica (no bearer here), not a 404 from nginx
    router_log = cluster.log("nginx").read_text()
    assert (
        f"upstream=127.0.0.4:{cluster.replica_port} upstream_status=401 session_replica=mcp-1" in router_log
    )


async def test_a_killed_replica_s_sessions_get_session_not_found(cluster: Cluster) -> None:
    """2025-11-25 basic/transports "Session Management": a request for a terminated session gets
    404, and the client starts a new session. The other replica's sessions go on."""
    async with mcp_client(cluster, "erin", "legacy") as (survivor, recorder):
        await survivor.list_tools()
        [kept] = recorder.session_ids
        holder = kept.split(".", 1)[0]
        victim = next(name for name in REPLICAS if name != holder)
        gone = await _session_on(cluster, "frank", victim)
        cluster.stop_replica(victim, signal.SIGKILL)
        async with httpx.AsyncClient(timeout=10) as raw:
            answer = await raw.post(
                cluster.mcp_url,
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers={
                    "Mcp-Session-Id": gone,
                    "MCP-Protocol-Version": "2025-11-25",
                    "Accept": "application/json, text/event-stream",
                },
            )
        assert answer.status_code == 404
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json() == SESSION_NOT_FOUND
        # The survivor's session, and new sessions, are served by the live replica.
        assert (await survivor.list_tools()).tools
        async with mcp_client(cluster, "frank", "legacy") as (client, fresh):
            assert (await client.list_tools()).tools
            assert [s.split(".", 1)[0] for s in fresh.session_ids] == [holder]


def _retried_callbacks(router_log: str, dead: str) -> int:
    """The router's lines for callbacks it sent to the dead address first, then to another."""
    return len(re.findall(rf'"GET /callback/mockhub" 200 .* upstream={re.escape(dead)}, ', router_log))


@pytest.mark.parametrize("mode", MODES)
async def test_callbacks_are_served_while_a_killed_replica_is_still_in_dns(
    cluster: Cluster, mode: str
) -> None:
    """A replica killed while DNS still lists it (the seconds before the orchestrator removes the
    address; in compose until the container is gone): a connect flow's callback the router sends
    there first is retried on the live replica, and the flow completes. Flows of one user after
    another until the router has sent a callback to the dead address first (it picks an address
    at random per request); a session another user holds on the live replica goes on."""
    victim, live = "mcp-2", "mcp-1"
    dead = f"{cluster.addresses[victim]}:{cluster.replica_port}"
    for name in REPLICAS:  # an earlier test may have killed one
        if cluster.processes[name].poll() is not None:
            cluster.start_replica(name)
    kept = await _session_on(cluster, f"kept-{mode}", live)
    cluster.stop_replica(victim, signal.SIGKILL)
    try:
        assert cluster.dns.answers[replica_name(victim)] == [cluster.addresses[victim]]  # still resolving
        for attempt in range(12):
            user = ScriptedUser(f"late-{mode}-{attempt}")
            async with mcp_client(cluster, user.user, mode, on_url=accept) as (client, recorder):
                link = await connect_url(client, "whoami")
                await user.approve(link.url)
                if mode == "legacy":
                    await recorder.wait_completed(link.elicitation_id, timeout=10)
                result = await retry(client, link, "whoami")
                assert not result.is_error, result
            if _retried_callbacks(cluster.log("nginx").read_text(), dead):
                break
        assert _retried_callbacks(cluster.log("nginx").read_text(), dead), "no callback met the dead replica"
        async with httpx.AsyncClient(timeout=10) as raw:
            answer = await raw.post(
                cluster.mcp_url,
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers={"Mcp-Session-Id": kept, "MCP-Protocol-Version": "2025-11-25"},
            )
        assert answer.status_code == 401  # the kept session's replica answered (no bearer here)
    finally:
        cluster.start_replica(victim)
