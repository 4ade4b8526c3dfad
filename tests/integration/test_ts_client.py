"""The URL-elicitation flow with the official TypeScript MCP SDK as the client: v1 on 2025-11-25,
v2 on 2026-07-28.

`@modelcontextprotocol/sdk` (exact version in tests/integration/node/package.json) runs
tests/integration/node/ts_client.mjs: protocol 2025-11-25 over Streamable HTTP with the user's
bearer, URL-mode elicitation declared. It calls `whoami`, gets -32042 with the connect URL, waits
for `notifications/elicitation/complete`, then retries. The test plays the user: the kit's scripted
browser walks the dev login, our confirmation page and MockHub's consent for the URL the
TypeScript client printed. docs/clients.md describes what is tested and how.

`@modelcontextprotocol/client` (v2) runs tests/integration/node/ts_v2_client.mjs on 2026-07-28 with
its own input_required handling at its defaults: it accepts the URL elicitation, then re-sends the
call with requestState, at most 10 times. Each leg is held while the flow is pending
(`retry_wait_seconds`), so the user's browser leg may take minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest

from mock_providers.testing import FlowError, Mcpuc
from tests.integration.node_clients import NodeClient
from tests.integration.node_servers import need_node

pytestmark = pytest.mark.integration

SDK = "@modelcontextprotocol/sdk"
SDK_V2 = "@modelcontextprotocol/client"
V2_MAX_ROUNDS = 10  # the v2 client's default inputRequired.maxRounds
BROWSER_LEG = 180.0  # seconds from the client's "accept" to the user's consent at MockHub


@pytest.fixture
def node() -> str:
    """Node.js with the SDK installed (a fixture, so a skip names the test that needed it)."""
    return need_node(SDK, (18, 0))


def ts_client(node: str, mcpuc: Mcpuc, user: str, tmp_path: Path) -> NodeClient:
    env = {"MCPUC_BEARER": mcpuc.token(user)}  # not in argv, where `ps` would show it
    return NodeClient(node, "ts_client.mjs", [mcpuc.mcp_url, "whoami"], env, tmp_path / "ts-client.log")


async def test_ts_sdk_client_connects_through_url_elicitation(
    node: str, mcpuc: Mcpuc, tmp_path: Path
) -> None:
    async with ts_client(node, mcpuc, "alice", tmp_path) as run:
        hello = await run.expect("initialized")
        assert hello["protocolVersion"] == "2025-11-25"

        # The TypeScript SDK recognised -32042 as URLElicitationRequiredError with one URL elicitation.
        asked = await run.expect("elicitation")
        assert asked["mode"] == "url"
        link = urlsplit(asked["url"])
        assert link.path == "/connect"
        assert parse_qs(link.query)["elicitationId"] == [asked["elicitationId"]]
        assert asked["url"].startswith(mcpuc.mcp_url.removesuffix("/mcp"))

        # The user opens the link in a browser, signs in as alice and approves at MockHub.
        await mcpuc.browser("alice").approve(asked["url"], login="octocat")

        # The client was told on its session (2025-11-25), then its retry shows the account.
        done = await run.expect("completed")
        assert done["elicitationId"] == asked["elicitationId"]
        answer = await run.expect("result")
        assert await run.exit_code() == 0

    result = answer["result"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["login"] == "octocat"
    assert '"login": "octocat"' in result["content"][0]["text"]
    # URL mode on 2025-11-25 is -32042 only: the server never sent elicitation/create.
    assert not [e for e in run.events if e["event"] == "unexpected_elicit_request"]


async def test_ts_sdk_client_link_opened_by_someone_else_is_refused(
    node: str, mcpuc: Mcpuc, tmp_path: Path
) -> None:
    async with ts_client(node, mcpuc, "alice", tmp_path) as run:
        asked = await run.expect("elicitation")
        with pytest.raises(FlowError) as refused:
            await mcpuc.browser("mallory").approve(asked["url"])
        assert refused.value.page == "Not your link"
        # Mallory's visit used nothing up: alice opens the same link and her client carries on.
        await mcpuc.browser("alice").approve(asked["url"], login="octocat")
        assert (await run.expect("completed"))["elicitationId"] == asked["elicitationId"]
        assert (await run.expect("result"))["result"]["structuredContent"]["login"] == "octocat"


@pytest.fixture
def node_v2() -> str:
    return need_node(SDK_V2, (20, 0))


def ts_v2_client(node: str, mcpuc: Mcpuc, user: str, tmp_path: Path) -> NodeClient:
    env = {"MCPUC_BEARER": mcpuc.token(user)}
    return NodeClient(node, "ts_v2_client.mjs", [mcpuc.mcp_url, "whoami"], env, tmp_path / "ts-v2-client.log")


def legs_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "leg"]


async def test_ts_v2_client_answers_input_required_by_itself(
    node_v2: str, mcpuc: Mcpuc, tmp_path: Path
) -> None:
    async with ts_v2_client(node_v2, mcpuc, "v2-user", tmp_path) as run:
        asked = await run.expect("elicitation")
        assert asked["mode"] == "url"
        assert urlsplit(asked["url"]).path == "/connect"
        # The client accepted at once and re-sent the call; that leg is held while the user is
        # in the browser, and answers once the flow completes.
        await mcpuc.browser("v2-user").approve(asked["url"], login="octocat")
        answer = await run.expect("result")
        assert await run.exit_code() == 0

    first, *retries = legs_of(run.events)
    assert not first["requestState"] and not first["inputResponses"]
    assert retries and retries[0]["requestState"] and retries[0]["inputResponses"]
    result = answer["result"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["login"] == "octocat"


@pytest.mark.slow
@pytest.mark.timeout(BROWSER_LEG + 300)
async def test_ts_v2_client_waits_out_a_three_minute_browser_leg(
    node_v2: str, mcpuc: Mcpuc, tmp_path: Path
) -> None:
    """A user who takes three minutes to sign in and consent: the client's 10 rounds suffice,
    because each leg is held while the flow is pending. Real time: the client has no fake clock."""
    async with ts_v2_client(node_v2, mcpuc, "v2-slow-user", tmp_path) as run:
        asked = await run.expect("elicitation")
        await anyio.sleep(BROWSER_LEG)
        await mcpuc.browser("v2-slow-user").approve(asked["url"], login="octocat")
        answer = await run.expect("result", within=60.0)
        assert await run.exit_code() == 0

    _, *retries = legs_of(run.events)
    assert 1 <= len(retries) <= V2_MAX_ROUNDS, retries
    assert all(leg["requestState"] for leg in retries)
    assert answer["result"]["structuredContent"]["login"] == "octocat"
    print("legs (ms since start):", [(leg["ms"], leg["inputResponses"]) for leg in legs_of(run.events)])
