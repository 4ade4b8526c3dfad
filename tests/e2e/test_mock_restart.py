"""A connection outlives a restart of the mock providers: the demo's two listeners on real sockets,
the providers' server stopped and a new one built on the same data dir (what restarting
`mcp-url-connect demo` / `mock-providers` does); the MCP client's next tool calls still succeed,
with the stored access token and then a refresh at the restarted MockHub."""

from __future__ import annotations

from pathlib import Path

import pytest

from mock_providers import create_mock_providers_app
from mock_providers.testing.browser import ScriptedUser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.servers import DemoServers, ThreadedServers
from service.app import create_app
from tests.e2e.readiness import wait_ready

pytestmark = pytest.mark.e2e


async def test_the_next_tool_call_after_a_providers_restart_succeeds(tmp_path: Path) -> None:
    # The demo's configuration (ports, secrets, data dir); its two listeners served separately
    # below, so the providers can stop while the MCP server and its client stay up.
    demo = DemoServers(tmp_path / "data")
    mcp = ThreadedServers([(create_app(demo.demo.settings), demo.port)])
    providers = ThreadedServers([(create_mock_providers_app(demo.demo.providers), demo.providers_port)])
    mcp.start()
    providers.start()
    try:
        await wait_ready(demo)
        async with mcp_client(demo, "alice", "2026-07-28", on_url=accept) as (client, _):
            link = await connect_url(client, "whoami", {})
            await ScriptedUser("alice").approve(link.url, login="octocat")
            connected = await retry(client, link, "whoami", {})
            assert connected.structured_content["login"] == "octocat"

            providers.stop()
            restarted = create_mock_providers_app(demo.demo.providers)
            providers = ThreadedServers([(restarted, demo.providers_port)])
            providers.start()
            hub = restarted.state.mockhub

            again = await client.call_tool("whoami", {})
            assert not again.is_error, again
            assert again.structured_content["login"] == "octocat"
            # The stored access token was accepted: no new consent, no token request.
            assert hub.user_requests == 1 and hub.token_requests == []

            hub.expire_access_tokens()  # reaches the tokens the first run issued
            refreshed = await client.call_tool("whoami", {})
            assert not refreshed.is_error, refreshed
            assert refreshed.structured_content["login"] == "octocat"
            assert hub.refresh_requests == 1 and hub.reuse_detections == 0
            assert [record.ok for record in hub.token_requests] == [True]
    finally:
        providers.stop()
        mcp.stop()
