"""Attacks by a malicious remote MCP server (docs/gateway.md, docs/threat-model.md "Remote MCP
servers as providers"): the kit's stand-in served on a loopback port, told to lie.

At start-up: metadata for another resource, metadata named on another origin, no PKCE, an
authorization server for another resource, an authorization server naming another issuer; each
stops the start with the step named, before any user is sent anywhere. At the callback: a wrong
`iss`, refused before the code is redeemed. At run time: a downstream's tool named like ours lands
in its own namespace. (Huge and endless answers, a token for another audience, HTML and identity:
tests/e2e/test_gateway.py.) DNS rebinding: a name that resolves to a public address when checked
and inside when connected to gets no request, at start-up or later."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from mock_providers.providers.mcp_downstream.server import McpDownstream, MetadataMode
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.downstream import DownstreamServer
from mock_providers.testing.servers import DemoServers, ThreadedServers, free_port
from service.providers.addresses import Resolve
from service.providers.catalogue import ProviderConfig, ProviderError, build_provider
from service.providers.mcp_downstream import DOWNSTREAM_ACCOUNT
from service.runtime import resolve_providers, start_up_outbound
from service.settings import Settings
from token_store import Connection, ConnectionKey, KeyRing, TokenSet, UserRef, open_store

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


class Counted:
    """An ASGI app that counts the HTTP requests reaching it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.requests += 1
        await self.app(scope, receive, send)


async def public_at_check_time(host: str) -> list[str]:
    """The first DNS answer, the one the URL checks see: a public address."""
    return ["93.184.216.34"]


async def test_a_name_that_rebinds_to_a_private_address_gets_no_request(tmp_path: Path) -> None:
    """DNS rebinding: the downstream's name resolves to a public address when its URLs are checked,
    and to this machine when we connect (the system resolver's answer for `localhost`). Every
    connection's peer is checked: discovery stops before a byte reaches the downstream."""
    port = free_port()
    stand_in = McpDownstream(f"http://localhost:{port}", name="Rebinding")
    counted = Counted(stand_in.app)
    served = ThreadedServers([(counted, port)])
    served.start()
    settings = DemoServers(tmp_path / "data").demo.settings
    table = {"kind": "mcp", "url": stand_in.url, "display_name": "Rebinding"}
    try:
        with pytest.raises(ProviderError, match="did not answer"):
            await resolve_with(settings, table, public_at_check_time)
        assert counted.requests == 0
        assert stand_in.authorization.registrations == []
        # The same downstream allowed on a private network: reached, discovered, registered with.
        resolved = await resolve_with(
            settings, {**table, "allow_private_network": True}, public_at_check_time
        )
        assert resolved.resolved and counted.requests > 0
    finally:
        served.stop()


async def resolve_with(settings: Settings, table: dict[str, Any], resolve: Resolve) -> ProviderConfig:
    outbound = start_up_outbound(settings.http_timeout)
    store = await open_store(settings.effective_store_url, KeyRing.parse(settings.encryption_keys))
    try:
        providers = {PROVIDER: build_provider(PROVIDER, table, {})}
        resolved = await resolve_providers(
            settings.replace(providers=providers), outbound.client, store, resolve=resolve
        )
    finally:
        await store.close()
        await outbound.aclose()
    return resolved.providers[PROVIDER]


async def test_a_downstream_that_now_resolves_inside_is_sent_no_token_and_no_code(
    tmp_path: Path, downstream: DownstreamServer
) -> None:
    """After discovery, the downstream's and its authorization server's names point inside (here:
    the resolved provider served without `allow_private_network`, its addresses being loopback):
    neither a user's token nor a code reaches them, and the user gets a clear error."""
    servers = DemoServers(tmp_path / "data")
    resolved = await downstream.resolved_provider(servers.demo.settings, PROVIDER)
    servers.providers = {PROVIDER: resolved.model_copy(update={"allow_private_network": False})}
    discovery = len(downstream.stand_in.request_headers)  # the probes, at start-up
    servers.start()
    try:
        # Alice holds a grant the downstream accepts: her session's connection is refused.
        alice = UserRef(servers.demo.settings.auth_issuer, "alice")
        token = downstream.stand_in.authorization._issue(resolved.client_id, ["read"], resolved.resource, "a")
        tokens = TokenSet(token.access_token, scopes=("read",), issuer=resolved.issuer)
        key = ConnectionKey(alice, PROVIDER, DOWNSTREAM_ACCOUNT)
        await servers.apps["mcp"].state.runtime.store.put_connection(Connection(key, tokens, "a", 1.0, 1.0))
        async with mcp_client(servers, "alice", "legacy", on_url=accept) as (client, _):
            refused = await client.call_tool(f"{PROVIDER}_echo", {"text": "x"})
        assert refused.is_error and "Evil did not open a session" in str(refused.content)
        # Bob signs in there: the code is never sent to its token endpoint.
        async with Browser() as browser, mcp_client(servers, "bob", "legacy", on_url=accept) as (client, _):
            link = await connect_url(client, f"{PROVIDER}_echo", {"text": "x"})
            page = await browser.complete_connect(link.url, username="bob")
            assert page.status_code == 502
    finally:
        servers.stop()
    assert len(downstream.stand_in.request_headers) == discovery
    assert downstream.stand_in.authorization.token_requests == []
