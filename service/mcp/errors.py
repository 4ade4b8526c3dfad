"""The one mapping from the domain's errors (`service/errors.py`) to MCP answers.

Tools, the broker and `ProviderSession` raise domain errors; `mcp_errors()` (a context manager)
and `@connected` (a decorator for tools) turn them into JSON-RPC errors here and nowhere else.
`ConnectionNeeded` is not one of them: it carries the answer a tool gives instead of its result
(SDK-shaped, so it lives here and not with the domain's errors), which `@connected` delivers.
docs/threat-model.md, "8. Failure is closed": a store failure is a clear JSON-RPC error, never a
half answer.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolResult,
    InputRequiredResult,
    TextContent,
)

from service.errors import (
    DomainError,
    InvalidToolArgument,
    NotAuthenticated,
    ProviderApiError,
    ProviderFailure,
    TokenExchangeError,
    TooManyPendingElicitations,
)
from token_store import StoreUnavailable

P = ParamSpec("P")
R = TypeVar("R")


class ConnectionNeeded(DomainError):
    """Raised by `broker.require`; `outcome` is what the tool answers instead of its result
    (built for the request's protocol revision by the broker): -32042, an InputRequiredResult,
    or a tool error."""

    def __init__(self, outcome: CallToolResult | InputRequiredResult | MCPError) -> None:
        super().__init__("connection needed")
        self.outcome = outcome


def tool_error(text: str, structured: dict[str, Any] | None = None) -> CallToolResult:
    """A tool's answer that it could not do its work, read by the model: a result with `isError`,
    never a JSON-RPC error (2025-11-25 server/tools.mdx, "Error Handling": tool execution errors
    are reported in the result). `structured` carries the same facts for an agent framework."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=True
    )


STORE_DOWN = "The token store is unavailable; try again shortly"

# The provider modules raise ProviderApiError and TokenExchangeError, whose messages are written
# to be shown (no token, code or response body), so all three read as a provider failure.
PROVIDER_ERRORS = (ProviderFailure, ProviderApiError, TokenExchangeError)


def as_mcp_error(error: Exception) -> MCPError | None:
    """The JSON-RPC error for a domain error, or None for anything else."""
    # mutant: mcp_errors.store_unavailable
    if isinstance(error, StoreUnavailable):
        return MCPError(code=INTERNAL_ERROR, message=STORE_DOWN)
    if isinstance(error, InvalidToolArgument):
        return MCPError(code=INVALID_PARAMS, message=error.message)
    if isinstance(error, TooManyPendingElicitations):
        return MCPError(
            code=INVALID_REQUEST,
            message=(
                f"Too many pending connection requests for {error.provider}; "
                "finish one in the browser or wait a few minutes"
            ),
        )
    if isinstance(error, NotAuthenticated):
        return MCPError(code=INVALID_REQUEST, message="This server requires an authenticated user")
    if isinstance(error, PROVIDER_ERRORS):
        return MCPError(code=INTERNAL_ERROR, message=str(error))
    return None


@contextlib.contextmanager
def mcp_errors() -> Iterator[None]:
    """Raise the JSON-RPC error for any domain error leaving the block (ConnectionNeeded passes:
    it is an answer, not an error; `@connected` delivers it)."""
    try:
        yield
    except ConnectionNeeded:
        raise
    except Exception as exc:
        mapped = as_mcp_error(exc)
        if mapped is None:
            raise
        raise mapped from None


def connected(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[Any]]:
    """Decorator for tools: domain errors become JSON-RPC errors, and `ConnectionNeeded` becomes
    the answer it carries (-32042, an InputRequiredResult, or a tool error)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            with mcp_errors():
                return await fn(*args, **kwargs)
        except ConnectionNeeded as need:
            if isinstance(need.outcome, MCPError):
                raise need.outcome from None
            return need.outcome

    return wrapper
