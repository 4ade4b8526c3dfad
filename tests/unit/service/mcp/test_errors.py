"""The one mapper: protocol errors stay JSON-RPC errors; whatever a provider did becomes a tool
result with `isError` that tells the model what happened and what it can do."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolResult, TextContent

from service.errors import (
    InvalidToolArgument,
    ProviderApiError,
    ProviderFailure,
    TokenExchangeError,
    UnknownProvider,
)
from service.mcp.errors import PROVIDER_ERRORS, ProviderError, connected, provider_tool_error
from token_store import StoreUnavailable


def text_of(result: CallToolResult) -> str:
    [item] = result.content
    assert isinstance(item, TextContent)
    return item.text


@pytest.mark.parametrize(
    ("error", "facts", "advice"),
    [
        (
            ProviderApiError("GitHub answered HTTP 502", provider="github", status=502),
            {"provider": "github", "status": 502, "retry_after": None, "reconnect": False},
            "try again shortly",
        ),
        (
            ProviderApiError(
                "GitHub refused the request for its rate limit (HTTP 429)",
                provider="github",
                status=429,
                retry_after=1799.2,
            ),
            {"provider": "github", "status": 429, "retry_after": 1800, "reconnect": False},
            "Try again in 1800 seconds, not before",
        ),
        (
            ProviderApiError("GitHub answered HTTP 404: Not Found", provider="github", status=404),
            {"provider": "github", "status": 404, "retry_after": None, "reconnect": False},
            "It does not exist, or this account cannot see it",
        ),
        (
            ProviderApiError("GitHub no longer accepts", provider="github", status=401, reconnect=True),
            {"provider": "github", "status": 401, "retry_after": None, "reconnect": True},
            "Ask the user to connect this account again",
        ),
        (
            ProviderApiError("MockHub could not refresh the token", provider="mockhub", retry_after=1.0),
            {"provider": "mockhub", "status": None, "retry_after": 1, "reconnect": False},
            "try again in 1 second.",
        ),
        (
            ProviderFailure("Slack", "api", "Slack: channel_not_found", status=404),
            {"provider": "Slack", "status": 404, "retry_after": None, "reconnect": False},
            "check the names and ids",
        ),
        (
            TokenExchangeError("the token endpoint did not answer within the timeout"),
            {"provider": None, "status": None, "retry_after": None, "reconnect": False},
            "The fault is on the provider's side",
        ),
    ],
)
def test_a_provider_error_is_a_tool_result_saying_what_to_do(
    error: ProviderError, facts: dict[str, Any], advice: str
) -> None:
    result = provider_tool_error(error)
    assert result.is_error is True
    assert result.structured_content == facts
    assert text_of(result).startswith(str(error).rstrip("."))
    assert advice in text_of(result)


def test_the_tools_provider_names_a_tool_authors_failure() -> None:
    result = provider_tool_error(ProviderFailure("Slack", "api", "Slack: not_in_channel"), "slack")
    assert result.structured_content is not None and result.structured_content["provider"] == "slack"


def test_a_tool_authors_long_message_is_cut() -> None:
    text = text_of(provider_tool_error(ProviderFailure("GitHub", "api", "word\n" * 1000)))
    assert len(text) < 700 and "\n" not in text


@pytest.mark.parametrize(
    "error", [cls("x") if cls is not ProviderFailure else cls("P", "api", "x") for cls in PROVIDER_ERRORS]
)
async def test_connected_answers_a_provider_error_with_a_result_never_a_json_rpc_error(
    error: Exception,
) -> None:
    @connected
    async def tool() -> dict[str, Any]:
        raise error

    result = await tool()
    assert isinstance(result, CallToolResult) and result.is_error


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UnknownProvider("Unknown provider 'x'"), INVALID_PARAMS),
        (InvalidToolArgument("bad account"), INVALID_PARAMS),
        (StoreUnavailable("down"), INTERNAL_ERROR),
    ],
)
async def test_protocol_errors_stay_json_rpc_errors(error: Exception, code: int) -> None:
    @connected
    async def tool() -> dict[str, Any]:
        raise error

    with pytest.raises(MCPError) as raised:
        await tool()
    assert raised.value.error.code == code
