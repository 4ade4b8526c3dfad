"""Remote MCP servers as providers, end to end over real sockets (docs/gateway.md): the kit's
OAuth-protected MCP stand-in (mock_providers/providers/mcp_downstream: the MCP SDK's own server and
authorization server) behind our server, on both revisions. Discovery and dynamic registration at
start-up, the connect link, the retried call answered by the downstream, the tool list per user,
refresh and reconnect on 401, step-up on 403, and one user's session and token never another's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import URL_ELICITATION_REQUIRED

from mock_providers import mint_access_token
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import accept, connect_url, mcp_client, retry
from mock_providers.testing.downstream import DownstreamServer
from mock_providers.testing.servers import DemoServers, free_port
from tests.support.settle import eventually, succeeds
from token_store import ConnectionStatus, KeyRing, UserRef, open_store

PROVIDER = "down"
REPO_ROOT = Path(__file__).resolve().parents[2]
MODES = ["legacy", "2026-07-28"]


@pytest.fixture
def downstream() -> Iterator[DownstreamServer]:
    running = DownstreamServer().start()
    yield running
    running.stop()


@asynccontextmanager
async def gateway_stack(
    tmp_path: Path, downstream: DownstreamServer, **fields: Any
) -> AsyncIterator[DemoServers]:
    """The demo with the stand-in as provider `down` (its `fields` added), resolved as `serve` does."""
    servers = DemoServers(tmp_path / "data")
    servers.providers = {
        PROVIDER: await downstream.resolved_provider(servers.demo.settings, PROVIDER, **fields)
    }
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
async def stack(tmp_path: Path, downstream: DownstreamServer) -> AsyncIterator[DemoServers]:
    async with gateway_stack(tmp_path, downstream) as servers:
        yield servers


async def connected_call(
    stack: DemoServers, mode: str, user: str, login: str, tool: str, arguments: dict[str, Any]
) -> mcp_types.CallToolResult:
    """Call `tool` as `user`, who has no connection yet: open the link as `login` there, retry."""
    async with Browser() as browser, mcp_client(stack, user, mode, on_url=accept) as (client, _):
        link = await connect_url(client, tool, arguments)
        page = await browser.complete_connect(link.url, username=user, login=login)
        assert page.status_code == 200, page.text
        return await retry(client, link, tool, arguments)


def text_of(result: mcp_types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))


def assert_no_downstream_token(downstream: DownstreamServer, *seen: Any) -> None:
    blob = json.dumps(
        [s.model_dump(mode="json") if hasattr(s, "model_dump") else s for s in seen], default=str
    )
    issued = downstream.stand_in.authorization.issued_access_tokens
    assert issued
    for token in issued:
        assert token not in blob


@pytest.mark.parametrize("mode", MODES)
async def test_a_downstream_tool_answers_after_the_connect_link(
    stack: DemoServers, downstream: DownstreamServer, mode: str
) -> None:
    result = await connected_call(stack, mode, "alice", "alice-there", f"{PROVIDER}_echo", {"text": "hello"})
    assert not result.is_error, result
    assert text_of(result) == "hello"
    assert downstream.stand_in.calls == [("echo", "alice-there")]
    assert_no_downstream_token(downstream, result)
    # Discovery registered us dynamically, once, and every token request named the resource.
    assert len(downstream.stand_in.authorization.registrations) == 1
    assert {r["resource"] for r in downstream.stand_in.authorization.token_requests} == {downstream.url}


@pytest.mark.parametrize("mode", MODES)
async def test_one_users_session_and_token_are_never_anothers(
    stack: DemoServers, downstream: DownstreamServer, mode: str
) -> None:
    alice = await connected_call(stack, mode, "alice", "alice-there", f"{PROVIDER}_whoami", {})
    bob = await connected_call(stack, mode, "bob", "bob-there", f"{PROVIDER}_whoami", {})
    assert alice.structured_content is not None and alice.structured_content["sub"] == "alice-there"
    assert bob.structured_content is not None and bob.structured_content["sub"] == "bob-there"
    async with mcp_client(stack, "alice", mode) as (client, _):
        again = await client.call_tool(f"{PROVIDER}_whoami", {})
    assert again.structured_content is not None and again.structured_content["sub"] == "alice-there"
    pool = stack.apps["mcp"].state.gateway.sessions
    sessions = [
        pool.find(PROVIDER, UserRef(stack.demo.settings.auth_issuer, user)) for user in ("alice", "bob")
    ]
    assert all(sessions) and sessions[0] is not sessions[1]
    assert sessions[0].token.access_token != sessions[1].token.access_token
    # Each MCP request reached the downstream with its user's token, never one of ours.
    ours = {mint_access_token(stack.data_dir, user) for user in ("alice", "bob")}
    sent = {h.get("authorization", "") for h in downstream.stand_in.request_headers}
    assert not {f"Bearer {token}" for token in ours} & sent
    assert_no_downstream_token(downstream, alice, bob, again)


async def test_tools_are_listed_per_user_and_a_session_told_when_they_change(
    stack: DemoServers, downstream: DownstreamServer
) -> None:
    async with (
        Browser() as browser,
        mcp_client(stack, "alice", "legacy", on_url=accept) as (client, recorder),
    ):
        before = {tool.name for tool in (await client.list_tools()).tools}
        assert f"{PROVIDER}_connect" in before and f"{PROVIDER}_echo" not in before
        assert "whoami" in before  # ours, beside theirs
        link = await connect_url(client, f"{PROVIDER}_connect")
        await browser.complete_connect(link.url, username="alice", login="alice-there")
        connected = await retry(client, link, f"{PROVIDER}_connect")
        assert connected.structured_content is not None and connected.structured_content["connected"]
        assert f"{PROVIDER}_echo" in connected.structured_content["tools"]
        changed = [m for m in recorder.notifications if isinstance(m, mcp_types.ToolListChangedNotification)]
        assert len(changed) == 1
        after = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert f"{PROVIDER}_connect" not in after
    echo = after[f"{PROVIDER}_echo"]
    assert echo.description is not None and echo.description.startswith("Downstream: ")
    assert echo.input_schema["properties"]["text"]["type"] == "string"
    async with mcp_client(stack, "bob", "legacy") as (client, _):
        others = {tool.name for tool in (await client.list_tools()).tools}
    assert f"{PROVIDER}_connect" in others and f"{PROVIDER}_echo" not in others


@pytest.mark.parametrize("mode", MODES)
async def test_a_downstream_tool_error_stays_a_tool_error(
    stack: DemoServers, downstream: DownstreamServer, mode: str
) -> None:
    result = await connected_call(
        stack, mode, "alice", "alice-there", f"{PROVIDER}_fail", {"message": "no such issue"}
    )
    assert result.is_error
    assert "no such issue" in text_of(result)


async def test_an_expired_token_is_refreshed_and_the_call_goes_through(
    stack: DemoServers, downstream: DownstreamServer
) -> None:
    await connected_call(stack, "legacy", "alice", "alice-there", f"{PROVIDER}_echo", {"text": "one"})
    downstream.stand_in.authorization.expire_access_tokens()
    async with mcp_client(stack, "alice", "legacy") as (client, _):
        result = await client.call_tool(f"{PROVIDER}_echo", {"text": "two"})
    assert text_of(result) == "two"
    grants = [r["grant_type"] for r in downstream.stand_in.authorization.token_requests]
    assert grants == ["authorization_code", "refresh_token"]


async def test_a_token_for_another_audience_asks_the_user_to_connect_again(
    stack: DemoServers, downstream: DownstreamServer
) -> None:
    """The downstream's authorization server starts issuing tokens for another resource: the
    downstream refuses them (401), a refresh does not help, and the call asks for a new
    connection once (no loop); the connection is marked for re-authorization."""
    await connected_call(stack, "legacy", "alice", "alice-there", f"{PROVIDER}_echo", {"text": "one"})
    authorization = downstream.stand_in.authorization
    authorization.audience = "https://another.example/mcp"
    authorization.expire_access_tokens()
    async with mcp_client(stack, "alice", "legacy", on_url=accept) as (client, _):
        with pytest.raises(MCPError) as raised:
            await client.call_tool(f"{PROVIDER}_echo", {"text": "two"})
    assert raised.value.error.code == URL_ELICITATION_REQUIRED
    assert [r["grant_type"] for r in authorization.token_requests].count("refresh_token") == 1
    settings = stack.demo.settings
    store = await open_store(settings.effective_store_url, KeyRing.parse(settings.encryption_keys))
    try:
        stored = await store.get_connection(UserRef(settings.auth_issuer, "alice"), PROVIDER)
    finally:
        await store.close()
    assert stored is not None and stored.status is ConnectionStatus.NEEDS_REAUTHORIZATION


@pytest.mark.parametrize("mode", MODES)
async def test_insufficient_scope_steps_up_to_the_union_of_scopes(
    stack: DemoServers, downstream: DownstreamServer, mode: str
) -> None:
    await connected_call(stack, mode, "alice", "alice-there", f"{PROVIDER}_echo", {"text": "one"})
    async with Browser() as browser, mcp_client(stack, "alice", mode, on_url=accept) as (client, _):
        link = await connect_url(client, f"{PROVIDER}_admin_reset")
        await browser.complete_connect(link.url, username="alice", login="alice-there")
        result = await retry(client, link, f"{PROVIDER}_admin_reset")
        assert text_of(result) == "reset"
        echoed = await client.call_tool(f"{PROVIDER}_whoami", {})
    assert echoed.structured_content is not None
    assert set(echoed.structured_content["scopes"]) >= {"read", "admin"}


async def test_an_answer_too_large_ends_as_an_error_without_its_content(
    tmp_path: Path, downstream: DownstreamServer
) -> None:
    async with gateway_stack(tmp_path, downstream, max_result_bytes=64 * 1024) as stack:
        await connected_call(stack, "legacy", "alice", "alice-there", f"{PROVIDER}_echo", {"text": "one"})
        async with mcp_client(stack, "alice", "legacy") as (client, _):
            refused = await client.call_tool(f"{PROVIDER}_huge", {"size": 200_000})
            # A provider failure is a tool error the model reads (docs/tools.md), never its content.
            assert refused.is_error and text_of(refused).startswith("Downstream: ")
            assert "xxxx" not in text_of(refused)
            # The pool let the broken session go; the next call opens another.
            assert text_of(await client.call_tool(f"{PROVIDER}_echo", {"text": "after"})) == "after"


async def test_a_silent_downstream_is_given_up_at_the_call_deadline(
    tmp_path: Path, downstream: DownstreamServer
) -> None:
    async with gateway_stack(tmp_path, downstream, call_timeout_seconds=1) as stack:
        await connected_call(stack, "legacy", "alice", "alice-there", f"{PROVIDER}_echo", {"text": "one"})
        async with mcp_client(stack, "alice", "legacy") as (client, _):
            refused = await client.call_tool(f"{PROVIDER}_slow", {"seconds": 60})
    assert refused.is_error and "did not answer within 1 s" in text_of(refused)


async def test_html_from_the_downstream_is_never_passed_as_html(
    stack: DemoServers, downstream: DownstreamServer
) -> None:
    result = await connected_call(stack, "legacy", "alice", "alice-there", f"{PROVIDER}_page", {})
    [block] = result.content
    assert isinstance(block, mcp_types.EmbeddedResource)
    assert block.resource.mime_type == "text/plain"


async def test_the_downstream_learns_nothing_of_our_user(
    stack: DemoServers, downstream: DownstreamServer
) -> None:
    await connected_call(stack, "legacy", "alice", "alice-there", f"{PROVIDER}_echo", {"text": "hi"})
    for headers in downstream.stand_in.request_headers:
        sent = json.dumps(headers)
        assert "alice" not in sent.replace("alice-there", "")  # only its own account name, in its token
        assert stack.public_url not in sent


async def test_disconnect_closes_the_session_and_the_next_call_asks_again(
    stack: DemoServers, downstream: DownstreamServer
) -> None:
    await connected_call(stack, "legacy", "alice", "alice-there", f"{PROVIDER}_echo", {"text": "one"})
    async with mcp_client(stack, "alice", "legacy", on_url=accept) as (client, _):
        done = await client.call_tool("disconnect", {"provider": PROVIDER})
        assert done.structured_content is not None and done.structured_content["revoked"] == ["default"]
        with pytest.raises(MCPError) as raised:
            await client.call_tool(f"{PROVIDER}_echo", {"text": "two"})
    assert raised.value.error.code == URL_ELICITATION_REQUIRED
    assert (
        stack.apps["mcp"].state.gateway.sessions.find(
            PROVIDER, UserRef(stack.demo.settings.auth_issuer, "alice")
        )
        is None
    )


def test_the_demo_serves_a_downstream_with_one_flag(tmp_path: Path) -> None:
    """`mcp-url-connect demo --downstream`: the stand-in on PORT+3, discovered and registered with
    at start, its connect tool listed to a user who is not connected yet."""
    port = free_port()
    argv = ["demo", "--downstream", "--port", str(port), "--data-dir", str(tmp_path)]
    argv += ["--providers-port", str(free_port()), "--metrics-port", str(free_port())]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "service.ops.cli", *argv]
    demo = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        eventually(
            lambda: succeeds(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz"), httpx.HTTPError),
            "the demo",
            within=60,
        )
        target = SimpleNamespace(data_dir=tmp_path, mcp_url=f"http://127.0.0.1:{port}/mcp")
        listed = anyio.run(tool_names, target)
        assert "downstream_connect" in listed
        metadata = httpx.get(f"http://127.0.0.1:{port + 3}/.well-known/oauth-protected-resource/mcp").json()
        assert metadata["resource"] == f"http://127.0.0.1:{port + 3}/mcp"
        demo.send_signal(signal.SIGTERM)
        output, _ = demo.communicate(timeout=20)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0
    assert f"Remote MCP server (stand-in)   http://127.0.0.1:{port + 3}/mcp" in output


async def tool_names(target: Any) -> list[str]:
    async with mcp_client(target, "alice", "legacy") as (client, _):
        return [tool.name for tool in (await client.list_tools()).tools]


def test_our_client_id_metadata_document_is_served_per_remote_server(stack: DemoServers) -> None:
    settings = stack.demo.settings
    document = httpx.get(f"{stack.public_url}/oauth/client-metadata/{PROVIDER}").json()
    assert document["client_id"] == settings.client_metadata_url(PROVIDER)
    assert document["redirect_uris"] == [settings.callback_url(PROVIDER)]
    assert document["token_endpoint_auth_method"] == "none"
    for other in ("mockhub", "nobody"):  # only remote MCP servers have one
        assert httpx.get(f"{stack.public_url}/oauth/client-metadata/{other}").status_code == 404
