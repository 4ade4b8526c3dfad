"""examples/embed_sdk.py, an SDK server of an integrator's own with the connect flow embedded
(`UrlConnect`), through the whole flow on both revisions, against the kit's mock providers."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from mcp_url_connect.testing import MODES, FlowError, Mcpuc

EXAMPLE = Path(__file__).parents[2] / "examples" / "embed_sdk.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("embed_sdk", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the module's names through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mcpuc]:
    running = Mcpuc(tmp_path_factory.mktemp("embed") / "data", app=load_example().build_app).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("mode", MODES)
async def test_the_whole_flow_through_the_integrators_server(stack: Mcpuc, mode: str) -> None:
    user = f"embed-{mode}"
    async with stack.client(user, mode=mode) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"hub_login", "list_connections", "disconnect"} <= tools

        link = await stack.connect_url(client, "hub_login", {})
        await stack.browser(user).approve(link.url, login="octocat")
        result = await stack.retry(client, link, "hub_login", {})  # legacy: after the notification
        assert result.structured_content == {"login": "octocat"}

        again = await client.call_tool("hub_login", {})  # connected: no browser
        assert again.structured_content == {"login": "octocat"}
        listed = await client.call_tool("list_connections", {})
        assert "octocat" in str(listed.structured_content)


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
