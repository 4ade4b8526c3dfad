"""Attacks by a malicious remote MCP server (docs/gateway.md, docs/threat-model.md "Remote MCP
servers as providers"): the kit's stand-in served on a loopback port, told to lie.

At start-up: metadata for another resource, metadata named on another origin, no PKCE, an
authorization server for another resource, an authorization server naming another issuer; each
stops the start with the step named, before any user is sent anywhere. At the callback: a wrong
`iss`, refused before the code is redeemed. At run time: a downstream's tool named like ours lands
in its own namespace. (Huge and endless answers, a token for another audience, HTML and identity:
tests/e2e/test_gateway.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from mock_providers.providers.mcp_downstream.server import MetadataMode
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.downstream import DownstreamServer
from mock_providers.testing.servers import DemoServers
from service.providers.catalogue import ProviderError

PROVIDER = "evil"


@pytest.fixture
def downstream() -> Iterator[DownstreamServer]:
    running = DownstreamServer(name="Evil").start()
    yield running
    running.stop()


@pytest.mark.parametrize(
    ("mode", "step"),
    [
        ("resource_mismatch", "protected-resource metadata is for another resource"),
        ("foreign_metadata", "metadata on another origin"),
        ("no_s256", "does not advertise PKCE S256"),
        ("other_resource", "authorization server does not serve this resource"),
        ("issuer_mismatch", "names another issuer"),
    ],
)
async def test_lying_metadata_stops_the_start(
    tmp_path: Path, downstream: DownstreamServer, mode: MetadataMode, step: str
) -> None:
    downstream.stand_in.metadata_mode = mode
    servers = DemoServers(tmp_path / "data")
    with pytest.raises(ProviderError, match=step):
        await downstream.resolved_provider(servers.demo.settings, PROVIDER)
    assert downstream.stand_in.authorization.registrations == []  # never registered with a liar


@asynccontextmanager
async def serving(tmp_path: Path, downstream: DownstreamServer) -> AsyncIterator[DemoServers]:
    servers = DemoServers(tmp_path / "data")
    servers.providers = {PROVIDER: await downstream.resolved_provider(servers.demo.settings, PROVIDER)}
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


async def test_a_wrong_iss_is_refused_before_the_code_is_redeemed(
    tmp_path: Path, downstream: DownstreamServer
) -> None:
    async with serving(tmp_path, downstream) as servers:
        downstream.stand_in.authorization.iss_mode = "wrong"
        async with Browser() as browser, mcp_client(servers, "alice", "legacy", on_url=accept) as (client, _):
            link = await connect_url(client, f"{PROVIDER}_echo", {"text": "x"})
            page = await browser.complete_connect(link.url, username="alice")
            assert page.status_code == 400
            result = await retry(client, link, f"{PROVIDER}_echo", {"text": "x"})
    assert result.is_error  # the flow failed; no connection was stored
    assert downstream.stand_in.authorization.token_requests == []
    assert downstream.stand_in.calls == []


async def test_a_downstream_tool_named_like_ours_stays_in_its_namespace(
    tmp_path: Path, downstream: DownstreamServer
) -> None:
    """The stand-in has a `whoami` of its own: ours stays ours, its is `evil_whoami`."""
    async with (
        serving(tmp_path, downstream) as servers,
        Browser() as browser,
        mcp_client(servers, "alice", "legacy", on_url=accept) as (client, _),
    ):
        link = await connect_url(client, f"{PROVIDER}_whoami")
        await browser.complete_connect(link.url, username="alice", login="alice-there")
        theirs = await retry(client, link, f"{PROVIDER}_whoami")
        assert theirs.structured_content is not None and theirs.structured_content["sub"] == "alice-there"
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names.count("whoami") == 1 and f"{PROVIDER}_whoami" in names
        with pytest.raises(MCPError) as ours:  # our whoami asks for mockhub, never the downstream
            await client.call_tool("whoami", {})
    assert ours.value.error.code == -32042
    assert [call for call in downstream.stand_in.calls if call[0] == "whoami"] == [("whoami", "alice-there")]
