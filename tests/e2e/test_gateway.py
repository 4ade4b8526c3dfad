"""Remote MCP servers as providers, end to end over real sockets (docs/gateway.md): the kit's
OAuth-protected MCP stand-in (mock_providers/providers/mcp_downstream) behind our server, on both
revisions; discovery and dynamic registration at start-up, the connect link, the retried call
answered by the downstream, and one user's session and token never another's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.downstream import DownstreamServer
from mock_providers.testing.servers import DemoServers

PROVIDER = "down"
MODES = ["legacy", "2026-07-28"]


@pytest.fixture
def downstream() -> Iterator[DownstreamServer]:
    running = DownstreamServer().start()
    yield running
    running.stop()


@pytest.fixture
async def stack(tmp_path: Path, downstream: DownstreamServer) -> AsyncIterator[DemoServers]:
    servers = DemoServers(tmp_path / "data")
    provider = await downstream.resolved_provider(servers.demo.settings, PROVIDER)
    servers.providers = {PROVIDER: provider}
    servers.start()
    yield servers
    servers.stop()


async def connect(
    stack: DemoServers, mode: str, user: str, login: str, tool: str, arguments: dict[str, Any]
) -> Any:
    async with Browser() as browser, mcp_client(stack, user, mode, on_url=accept) as (client, _):
        link = await connect_url(client, tool, arguments)
        page = await browser.complete_connect(link.url, username=user, login=login)
        assert page.status_code == 200, page.text
        return await retry(client, link, tool, arguments)


@pytest.mark.parametrize("mode", MODES)
async def test_a_downstream_tool_answers_after_the_connect_link(
    stack: DemoServers, downstream: DownstreamServer, mode: str
) -> None:
    result = await connect(stack, mode, "alice", "alice-there", f"{PROVIDER}_echo", {"text": "hello"})
    assert not result.is_error, result
    assert result.content[0].text == "hello"
    assert downstream.stand_in.calls == [("echo", "alice-there")]
