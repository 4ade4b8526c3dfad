"""2026-07-28: requestState is attacker-controlled input (patterns-mrtr.mdx). Driven by hand here."""

from __future__ import annotations

import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import mcp_client
from mock_providers.testing.servers import DemoServers

pytestmark = [pytest.mark.e2e, pytest.mark.demo_settings(retry_wait_seconds=0.5)]
MODERN = "2026-07-28"
ACCEPT = {"connect": mcp_types.ElicitResult(action="accept")}


async def _never(params: object) -> str:
    raise AssertionError("driven by hand")


async def first_round(client: object) -> mcp_types.InputRequiredResult:
    result = await client.session.call_tool("whoami", {}, allow_input_required=True)  # type: ignore[attr-defined]
    assert isinstance(result, mcp_types.InputRequiredResult)
    assert result.request_state
    [request] = (result.input_requests or {}).values()
    assert request.params.mode == "url"  # type: ignore[union-attr]
    return result


async def test_request_state_is_single_use(servers: DemoServers) -> None:
    async with mcp_client(servers, "alice", MODERN, on_url=_never) as (client, _):
        first = await first_round(client)
        again = await client.session.call_tool(
            "whoami", {}, allow_input_required=True, input_responses=ACCEPT, request_state=first.request_state
        )
        # Flow still in progress after the wait: state only, no second prompt for the user.
        assert isinstance(again, mcp_types.InputRequiredResult)
        assert not again.input_requests
        assert again.request_state and again.request_state != first.request_state
        with pytest.raises(MCPError) as replay:
            await client.session.call_tool(
                "whoami",
                {},
                allow_input_required=True,
                input_responses=ACCEPT,
                request_state=first.request_state,
            )
        assert replay.value.error.code == mcp_types.INVALID_PARAMS
        assert "already used" in replay.value.error.message


async def test_tampered_request_state_is_rejected(servers: DemoServers) -> None:
    async with mcp_client(servers, "alice", MODERN, on_url=_never) as (client, _):
        first = await first_round(client)
        assert first.request_state is not None
        state = first.request_state
        flipped = state[:20] + ("A" if state[20] != "A" else "B") + state[21:]
        with pytest.raises(MCPError):
            await client.session.call_tool(
                "whoami", {}, allow_input_required=True, input_responses=ACCEPT, request_state=flipped
            )


async def test_request_state_of_another_user_is_rejected(servers: DemoServers, browser: Browser) -> None:
    async with mcp_client(servers, "alice", MODERN, on_url=_never) as (alice, _):
        first = await first_round(alice)
    # Mallory (who connected her own account) replays Alice's state: the SDK's principal binding refuses.
    async with mcp_client(servers, "mallory", MODERN, on_url=_never) as (mallory, _):
        with pytest.raises(MCPError):
            await mallory.session.call_tool(
                "whoami",
                {},
                allow_input_required=True,
                input_responses=ACCEPT,
                request_state=first.request_state,
            )


async def test_declined_elicitation_gives_a_tool_error(servers: DemoServers, browser: Browser) -> None:
    async with mcp_client(servers, "alice", MODERN, on_url=_never) as (client, _):
        first = await first_round(client)
        result = await client.session.call_tool(
            "whoami",
            {},
            allow_input_required=True,
            input_responses={"connect": mcp_types.ElicitResult(action="decline")},
            request_state=first.request_state,
        )
        assert isinstance(result, mcp_types.CallToolResult)
        assert result.is_error
        assert "declined" in result.content[0].text  # type: ignore[union-attr]
        # The declined link stops working (and stops counting against the pending limit).
        [request] = (first.input_requests or {}).values()
        page = await browser.complete_connect(request.params.url, username="alice")  # type: ignore[union-attr]
        assert page.status_code == 409


async def test_retry_after_completion_returns_the_result(servers: DemoServers, browser: Browser) -> None:
    async with mcp_client(servers, "alice", MODERN, on_url=_never) as (client, _):
        first = await first_round(client)
        [request] = (first.input_requests or {}).values()
        page = await browser.complete_connect(request.params.url, username="alice")  # type: ignore[union-attr]
        assert page.status_code == 200
        result = await client.session.call_tool(
            "whoami", {}, allow_input_required=True, input_responses=ACCEPT, request_state=first.request_state
        )
        assert isinstance(result, mcp_types.CallToolResult)
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["login"] == "octocat"
