"""One authenticated user floods /mcp: past its requests a second (and burst) the replica answers
429 with Retry-After and a JSON-RPC error, counted in `mcpuc_mcp_requests_refused_total`, while
other users' sessions, connections and connect flows go on. The router counts no MCP request with
a bearer token per address (hosted clients and NATs put many users behind one), so this is the
limit an MCP flood meets (docs/deploy.md, "Limits"). Both revisions."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES, mcp_client
from tests.security.attack import Servers, attack, unique
from tests.security.flows import bearer, connect_fully, elicit, retry, settled
from tests.security.rpc import RawMcp

PER_SECOND, BURST = 1, 20
pytestmark = [
    pytest.mark.security,
    pytest.mark.demo_settings(requests_per_second_per_user=PER_SECOND, request_burst_per_user=BURST),
]


def refused_total(servers: Servers) -> float:
    metrics = servers.apps["mcp"].state.runtime.metrics
    value = metrics.registry.get_sample_value(
        "mcpuc_mcp_requests_refused_total", {"limit": "requests_per_second_per_user"}
    )
    return value or 0.0


@pytest.mark.parametrize("mode", MODES)
async def test_a_user_flooding_mcp_gets_429_and_other_users_go_on(
    servers: Servers, browser: Browser, mode: str
) -> None:
    flooder, bystander = unique("flooder"), unique("bystander")
    async with (
        elicit(servers, bystander, mode) as waiting,  # a flow in progress, and (legacy) its session
        httpx.AsyncClient(timeout=10) as http,
    ):
        raw = RawMcp(servers, http, mode, bearer(servers, flooder))
        assert (await raw.open()).status_code == 200
        before = refused_total(servers)
        async with attack(servers, browsers=[browser]) as a:
            answers = await asyncio.gather(*(raw.send("tools/list") for _ in range(3 * BURST)))
            refused = [answer for answer in answers if answer.status_code == 429]
            a.check(len(refused) >= BURST, f"the flood past the burst is refused: {len(refused)}")
            for answer in refused[:3]:
                a.status(answer, 429)
                a.check(int(answer.headers["retry-after"]) >= 1, "Retry-After names a wait")
                error = answer.json()["error"]
                a.check(
                    error["code"] == -32600 and "Too many requests for this user" in error["message"],
                    "a JSON-RPC error naming the limit",
                )
            a.check(refused_total(servers) - before == len(refused), "each refusal counted")
        # The bystander's flow, session and connection are untouched by the flood.
        await connect_fully(browser, servers, waiting.url, bystander)
        await settled(waiting)
        result = await retry(waiting)
        assert not getattr(result, "is_error", True), result
        async with mcp_client(servers, unique("another"), mode) as (client, _):
            assert (await client.list_tools()).tools
