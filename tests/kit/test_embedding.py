"""examples/embed_sdk.py and examples/embed_fastmcp.py, servers of an integrator's own (on the
SDK's MCPServer and on FastMCP) with the connect flow embedded (`UrlConnect`), through the whole
flow on both revisions, against the kit's mock providers."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from mcp_url_connect.testing import MODES, FlowError, Mcpuc
from service.http.request_limits import MAX_REQUEST_BODY_BYTES, MAX_REQUEST_HEAD_BYTES
from tests.security.rpc import RawMcp
from tests.support.settle import wait_until

EXAMPLES = Path(__file__).parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the module's names through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=["embed_sdk", "embed_fastmcp"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mcpuc]:
    example = load_example(request.param)
    running = Mcpuc(tmp_path_factory.mktemp(request.param) / "data", app=example.build_app).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("mode", MODES)
async def test_the_whole_flow_through_the_integrators_server(stack: Mcpuc, mode: str) -> None:
    user = f"embed-{mode}"
    async with stack.client(user, mode=mode) as client:
        assert "hub_login" in {tool.name for tool in (await client.list_tools()).tools}

        link = await stack.connect_url(client, "hub_login", {})
        await stack.browser(user).approve(link.url, login="octocat")
        result = await stack.retry(client, link, "hub_login", {})  # legacy: after the notification
        assert result.structured_content == {"login": "octocat"}

        again = await client.call_tool("hub_login", {})  # connected: no browser
        assert again.structured_content == {"login": "octocat"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_url_mode_gets_the_link_with_its_facts(stack: Mcpuc, mode: str) -> None:
    """The link in a tool error keeps its `structuredContent` through the integrator's server (on
    FastMCP: the adapter's `_answer`), the same link while unopened, then the tool's answer."""
    user = f"embed-form-{mode}"
    async with httpx.AsyncClient() as http:
        raw = RawMcp(stack, http, mode, stack.token(user), capabilities={"elicitation": {"form": {}}})  # type: ignore[arg-type]
        if mode == "legacy":
            await raw.open()
        first = (await raw.call_tool("hub_login"))["result"]
        assert first["isError"] is True, first
        facts = first["structuredContent"]
        assert facts["provider"] == "mockhub"
        assert facts["connect_url"] in first["content"][0]["text"]
        again = (await raw.call_tool("hub_login"))["result"]
        assert again["structuredContent"] == facts
        assert again["content"][0]["text"].startswith("Still waiting for you to connect MockHub at ")
        await stack.browser(user).approve(facts["connect_url"], login="octocat")
        done = (await raw.call_tool("hub_login"))["result"]
        assert done["structuredContent"] == {"login": "octocat"}, done


async def test_our_connection_tools_on_the_sdk_server(tmp_path: Path) -> None:
    """`add_connection_tools` (the SDK server only) serves the caller's own connections."""
    stack = Mcpuc(tmp_path / "data", app=load_example("embed_sdk").build_app).start()
    try:
        await list_after_connecting(stack)
    finally:
        stack.stop()


async def list_after_connecting(stack: Mcpuc) -> None:
    async with stack.client("embed-lister", mode="legacy") as client:
        link = await stack.connect_url(client, "hub_login", {})
        await stack.browser("embed-lister").approve(link.url, login="octocat")
        await stack.retry(client, link, "hub_login", {})
        listed = await client.call_tool("list_connections", {})
        assert [c["account_label"] for c in listed.structured_content["result"]] == ["octocat"]


async def test_the_connect_link_is_refused_to_another_user(stack: Mcpuc) -> None:
    """The user comes from the integrator's verifier (`sub` + `iss`), and /connect still checks
    that the browser's user is that user."""
    async with stack.client("embed-alice", mode="legacy") as client:
        link = await stack.connect_url(client, "hub_login", {})
        with pytest.raises(FlowError) as refused:
            await stack.browser("embed-mallory").approve(link.url)
        assert refused.value.status == 403
        await stack.browser("embed-alice").approve(link.url)  # still usable by its owner
        result = await stack.retry(client, link, "hub_login", {})
        assert result.structured_content == {"login": "octocat"}


async def test_a_token_the_integrators_verifier_refuses_gets_401(stack: Mcpuc) -> None:
    import httpx

    async with httpx.AsyncClient() as http:
        answer = await http.post(
            stack.mcp_url,
            headers={"Authorization": "Bearer not-a-jwt", "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
    assert answer.status_code == 401


@pytest.mark.parametrize("mode", MODES)
async def test_the_browser_half_refuses_what_our_server_refuses(
    stack: Mcpuc, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`install(app)` brings the request pass our server runs: a head over 16 KiB in one piece
    gets 431, a body over 1 MiB 413, a repeated single-valued field 400, and a body abandoned
    half-sent is an INFO line, not an ERROR; another user's flow completes meanwhile."""
    caplog.set_level(logging.INFO)
    origin = stack.mcp_url.removesuffix("/mcp")
    host, port = origin.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    fill = "f" * (MAX_REQUEST_HEAD_BYTES + 1024)
    writer.write(f"GET /connections HTTP/1.1\r\nHost: {host}:{port}\r\nX-Fill: {fill}\r\n\r\n".encode())
    assert (await reader.readline()).split()[1] == b"431"
    writer.close()
    async with httpx.AsyncClient(base_url=origin) as http:
        body = b"csrf=" + b"a" * MAX_REQUEST_BODY_BYTES
        assert (await http.post("/logout", content=body, headers={"Origin": origin})).status_code == 413
        twice = [("Authorization", "Bearer a"), ("Authorization", "Bearer b")]
        repeated = await http.get("/connections", headers=twice)
        assert repeated.status_code == 400 and "authorization" in repeated.text
        cookie = (await http.get("/login", params={"next": "/connections"})).headers["set-cookie"]
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST /logout HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: {origin}\r\n"
        f"Cookie: {cookie.split(';', 1)[0]}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        "Content-Length: 100\r\n\r\ncsrf=ab".encode()
    )
    await writer.drain()
    writer.close()

    user = f"embed-bounded-{mode}"
    async with stack.client(user, mode=mode) as client:
        link = await stack.connect_url(client, "hub_login", {})
        await stack.browser(user).approve(link.url, login="octocat")
        result = await stack.retry(client, link, "hub_login", {})
        assert result.structured_content == {"login": "octocat"}
    gone = "client went away before its request was read: POST /logout"
    await wait_until(lambda: any(r.getMessage() == gone for r in caplog.records), "the abandoned body's line")
    assert [r.levelno for r in caplog.records if r.getMessage() == gone] == [logging.INFO]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
