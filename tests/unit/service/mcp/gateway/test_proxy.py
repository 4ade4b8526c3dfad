"""What our clients get of a downstream: its tools renamed, its results without HTML or `_meta`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolResult,
    EmbeddedResource,
    Icon,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from service.errors import InvalidToolArgument, ProviderApiError
from service.mcp.errors import STORE_DOWN, ConnectionNeeded, tool_error
from service.mcp.gateway.moves import AuthorizationServerMoves
from service.mcp.gateway.names import Namespaces
from service.mcp.gateway.proxy import Gateway, connect_tool, downstream_error, offered_tool, passed_on
from service.providers.catalogue import ProviderConfig
from service.providers.protected_resource import Challenge
from token_store import Connection, ConnectionKey, StoreUnavailable, TokenSet, UserRef

LINEAR = ProviderConfig(
    name="linear", kind="mcp", url="https://mcp.linear.example/mcp", display_name="Linear"
)


def test_a_downstream_tool_is_offered_under_our_name_without_its_meta_or_icons() -> None:
    tool = Tool(
        name="create_issue",
        description="Create\nan issue " + "x" * 10_000,
        input_schema={"type": "object", "properties": {"title": {"type": "string"}}},
        icons=[Icon(src="https://tracker.example/icon.png")],
        _meta={"ui": {"resourceUri": "ui://linear/app"}},
    )
    offered = offered_tool(LINEAR, tool)
    assert offered is not None and offered.name == "linear_create_issue"
    assert offered.description is not None and offered.description.startswith("Linear: Create")
    assert len(offered.description) < 4200
    assert offered.input_schema == tool.input_schema
    assert offered.icons is None and offered.meta is None
    assert offered_tool(LINEAR, Tool(name="bad name", input_schema={"type": "object"})) is None
    assert connect_tool(LINEAR).name == "linear_connect"


def test_results_pass_without_meta_and_never_as_html() -> None:
    result = CallToolResult(
        content=[
            TextContent(type="text", text="ok", _meta={"x": 1}),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="https://x.example/p", mime_type="text/html; charset=utf-8", text="<script>"
                ),
            ),
            ResourceLink(type="resource_link", uri="https://x.example/p", name="p", mime_type="text/html"),
        ],
        structured_content={"id": 7},
        is_error=True,
        _meta={"io.example/secret": "x"},
    )
    passed = passed_on(result)
    assert passed.meta is None and passed.is_error and passed.structured_content == {"id": 7}
    text, embedded, link = passed.content
    assert isinstance(text, TextContent) and text.meta is None and text.text == "ok"
    assert isinstance(embedded, EmbeddedResource) and embedded.resource.mime_type == "text/plain"
    assert isinstance(link, ResourceLink) and link.mime_type == "text/plain"


def test_downstream_errors_keep_invalid_params_and_are_bounded() -> None:
    invalid = downstream_error(LINEAR, MCPError(code=INVALID_PARAMS, message="title\nis required"))
    assert isinstance(invalid, InvalidToolArgument) and str(invalid) == "Linear: title is required"
    other = downstream_error(LINEAR, MCPError(code=-32000, message="boom " * 200))
    assert isinstance(other, ProviderApiError) and len(str(other)) < 320


class Broker:
    """The broker's `require`, recording the scopes asked for (a new grant: it asks)."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def require(self, ctx: object, provider: str, scopes: list[str]) -> object:
        self.asked.append(list(scopes))
        raise ConnectionNeeded(tool_error("connect"))


async def never(*_: object) -> Any:
    raise AssertionError("no downstream moves here")


NO_MOVES = AuthorizationServerMoves({}, never, never)


def connection_with(*scopes: str) -> Connection:
    key = ConnectionKey(UserRef("https://as.example", "alice"), "linear", "default")
    return Connection(key, TokenSet(access_token="t", scopes=scopes), "Linear", 1.0, 1.0)


async def test_a_step_up_asks_for_the_union_once_and_never_again_for_what_was_granted() -> None:
    broker = Broker()
    gateway = Gateway(Namespaces([LINEAR]), broker, None, None, None, NO_MOVES)  # type: ignore[arg-type]
    step_up: Any = gateway._step_up
    with pytest.raises(ConnectionNeeded):
        await step_up(None, LINEAR, connection_with("read"), Challenge(403, "insufficient_scope", ("write",)))
    assert broker.asked == [["read", "write"]]
    # Already granted (or nothing named): the refusal is the tool's answer, no new question.
    for challenged in (("read",), (), None):
        granted = connection_with("read", "write")
        with pytest.raises(ConnectionNeeded) as refused:
            await step_up(None, LINEAR, granted, Challenge(403, "insufficient_scope", challenged))
        outcome = refused.value.outcome
        assert isinstance(outcome, CallToolResult) and outcome.is_error
    assert broker.asked == [["read", "write"]]


async def test_a_store_failure_while_listing_is_a_clear_json_rpc_error() -> None:
    class Down:
        async def get_connection(self, *args: object) -> None:
            raise StoreUnavailable("down")

    gateway = Gateway(Namespaces([LINEAR]), None, None, Down(), None, NO_MOVES)  # type: ignore[arg-type]
    ctx = SimpleNamespace(protocol_version="2025-11-25", headers={})
    token = AccessToken(
        token="t", client_id="c", scopes=[], subject="alice", claims={"iss": "https://as.example"}
    )
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        with pytest.raises(MCPError) as raised:
            await gateway.list_tools(ctx)  # type: ignore[arg-type]
    finally:
        auth_context_var.reset(reset)
    assert raised.value.error.code == INTERNAL_ERROR and raised.value.error.message == STORE_DOWN
