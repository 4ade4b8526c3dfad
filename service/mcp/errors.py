"""The one mapping from the domain's errors (`service/errors.py`) to MCP answers.

Tools, the broker and `ProviderSession` raise domain errors; they become answers here and nowhere
else, of two kinds (MCP 2025-11-25 and 2026-07-28 server/tools, "Error Handling"):
- protocol errors, JSON-RPC errors the client handles: an unknown tool or provider and bad
  arguments (-32602), the store down (-32603), too many pending connect requests (-32600), no
  authenticated user. `mcp_errors()` (a context manager) raises them.
- tool execution errors, results with `isError` that the model reads and acts on: whatever the
  provider did (`PROVIDER_ERRORS`), with what the model can do about it (`provider_tool_error`).
  `@connected` (a decorator for tools) and the FastMCP adapter return them.
`ConnectionNeeded` is neither: it carries the answer a tool gives instead of its result
(SDK-shaped, so it lives here and not with the domain's errors), which `@connected` delivers.
docs/threat-model.md, "8. Failure is closed": a store failure is a clear JSON-RPC error, never a
half answer.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
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
logger = logging.getLogger(__name__)


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
ProviderError = ProviderFailure | ProviderApiError | TokenExchangeError
# A tool author's message is cut here: the model reads a sentence, not a document.
MAX_TOOL_ERROR_MESSAGE_CHARS = 500


def provider_tool_error(error: ProviderError, provider: str | None = None) -> CallToolResult:
    """The tool error for a provider's failure: what happened (the error's message, written to be
    shown), then what the model can do about it; `structuredContent` carries `provider` (its
    configured name: `provider`, else the error's own), `status`, `retry_after` (whole seconds)
    and `reconnect`."""
    status = getattr(error, "status", None)
    wait = getattr(error, "retry_after", None)
    reconnect = bool(getattr(error, "reconnect", False))
    retry_after = None if wait is None else max(0, math.ceil(wait))
    what = " ".join(str(error).split())[:MAX_TOOL_ERROR_MESSAGE_CHARS].rstrip(".")
    facts = {
        "provider": provider or getattr(error, "provider", "") or None,
        "status": status,
        "retry_after": retry_after,
        "reconnect": reconnect,
    }
    logger.info("tool error from a provider: %s", facts)
    return tool_error(f"{what}. {_advice(status, retry_after, reconnect)}".rstrip(), facts)


def _advice(status: int | None, retry_after: int | None, reconnect: bool) -> str:
    """What the model can do, from the facts alone ("" when the message says it)."""
    if reconnect:
        return (
            "Ask the user to connect this account again: calling this tool again starts that, "
            "with a link for the user to open."
        )
    when = "shortly" if retry_after is None else f"in {retry_after} second{'' if retry_after == 1 else 's'}"
    if status in (403, 429) and retry_after is not None:
        return f"Try again {when}, not before: the provider refuses these requests until then."
    if status is None or status >= 500:
        return f"The fault is on the provider's side; try again {when}."
    if status == 429:
        return "The provider did not say until when; wait a while before trying again."
    if status == 404:
        return "It does not exist, or this account cannot see it: check the names and ids in the arguments."
    if status == 403:
        return "This account may not do it: it lacks the permission, or the connection lacks a scope."
    if status >= 400:
        return "The provider refused the request as sent: check the arguments."
    return ""


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
    return None


@contextlib.contextmanager
def mcp_errors() -> Iterator[None]:
    """Raise the JSON-RPC error for a protocol error leaving the block. A provider's failure and
    `ConnectionNeeded` pass: they are answers, which the tool's boundary (`@connected`, the
    FastMCP middleware) gives."""
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
    """Decorator for tools: protocol errors become JSON-RPC errors, a provider's failure a tool
    error (`provider_tool_error`), and `ConnectionNeeded` the answer it carries (-32042, an
    InputRequiredResult, or a tool error)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            with mcp_errors():
                return await fn(*args, **kwargs)
        except ConnectionNeeded as need:
            if isinstance(need.outcome, MCPError):
                raise need.outcome from None
            return need.outcome
        except PROVIDER_ERRORS as exc:
            return provider_tool_error(exc)

    return wrapper
