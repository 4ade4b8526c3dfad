"""The URL-elicitation flow with the official TypeScript MCP SDK as the client (issue 11).

`@modelcontextprotocol/sdk` (exact version in tests/integration/node/package.json) runs
tests/integration/node/ts_client.mjs: protocol 2025-11-25 over Streamable HTTP with the user's
bearer, URL-mode elicitation declared. It calls `whoami`, gets -32042 with the connect URL, waits
for `notifications/elicitation/complete`, then retries. The test plays the user: the kit's scripted
browser walks the dev login, our confirmation page and MockHub's consent for the URL the
TypeScript client printed. docs/clients.md describes what is tested and how.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from mock_providers.testing import FlowError, Mcpuc
from tests.integration.node_clients import NodeClient
from tests.integration.node_servers import need_node

pytestmark = pytest.mark.integration

SDK = "@modelcontextprotocol/sdk"


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
