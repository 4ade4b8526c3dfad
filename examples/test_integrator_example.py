"""An integrator's own tool, tested with the mcpuc kit on both protocol revisions.

Run with `pytest examples/test_integrator_example.py` once mcp-url-connect[testing] is installed.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses
from mcp_url_connect.testing import MODES, FlowError, Mcpuc


@pytest.fixture(scope="session")
def mcpuc_tools() -> Any:
    """Our tool, added to the kit's MCP server before it starts."""

    def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
        @server.tool(description="The caller's MockHub login.")
        @uses(broker.session, "mockhub", scopes=("read:user",))
        async def hub_login(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
            profile = await api.get_json(api.provider.userinfo_url)  # MockHub's /mockhub/user
            return {"login": profile["login"]}

    return register


@pytest.mark.parametrize("mode", MODES)
async def test_connect_use_refresh_and_reconnect(mcpuc: Mcpuc, mode: str) -> None:
    async with mcpuc.client("alice", mode=mode) as client:
        # Not connected yet: the tool answers with a URL elicitation; alice approves in her browser.
        link = await mcpuc.connect_url(client, "hub_login", {})
        await mcpuc.browser("alice").approve(link.url, login="octocat")
        result = await mcpuc.retry(client, link, "hub_login", {})
        assert result.structured_content == {"login": "octocat"}

        # Connected: the next call needs no browser.
        result = await client.call_tool("hub_login", {})
        assert result.structured_content == {"login": "octocat"}

        # The access token expires at the provider: the server refreshes it, once, invisibly.
        before = mcpuc.providers.refreshes
        mcpuc.providers.expire_access_tokens()
        result = await client.call_tool("hub_login", {})
        assert result.structured_content == {"login": "octocat"}
        assert mcpuc.providers.refreshes == before + 1

        # The user revokes the app at the provider: the call that finds out says so, for the
        # model to read (its requests may have been half done), and the next call asks to
        # connect again.
        mcpuc.providers.revoke("octocat")
        gone = await client.call_tool("hub_login", {})
        assert gone.is_error and gone.structured_content["reconnect"] is True
        again = await mcpuc.connect_url(client, "hub_login", {})
        assert again.elicitation_id != link.elicitation_id
        await mcpuc.browser("alice").approve(again.url, login="octocat")
        result = await mcpuc.retry(client, again, "hub_login", {})
        assert result.structured_content == {"login": "octocat"}


@pytest.mark.parametrize("mode", MODES)
async def test_denied_at_the_provider(mcpuc: Mcpuc, mode: str) -> None:
    async with mcpuc.client("bob", mode=mode) as client:
        link = await mcpuc.connect_url(client, "hub_login", {})
        await mcpuc.browser("bob").deny(link.url)
        # The retry says what happened (on 2025-11-25 after the completion notification, which
        # a failed flow sends too) ...
        retry = await mcpuc.retry(client, link, "hub_login", {})
        assert retry.is_error and "declined" in retry.content[0].text
        # ... and the call after that asks again.
        again = await mcpuc.connect_url(client, "hub_login", {})
        assert again.elicitation_id != link.elicitation_id


@pytest.mark.parametrize("mode", MODES)
async def test_someone_elses_link_is_refused(mcpuc: Mcpuc, mode: str) -> None:
    async with mcpuc.client("alice", mode=mode) as client:
        link = await mcpuc.connect_url(client, "hub_login", {})
        with pytest.raises(FlowError) as refused:
            await mcpuc.browser("mallory").approve(link.url)
        assert refused.value.page == "Not your link"
