"""How a tool's answer changes when the user must act first, and how store failures surface.

`require` (service/broker.py) raises `ConnectionNeeded` carrying the answer for the protocol
revision in use; `@connected` on the tool turns it into that answer on the wire.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, CallToolResult, InputRequiredResult

from token_store import StoreUnavailable

P = ParamSpec("P")
R = TypeVar("R")


class ConnectionNeeded(Exception):
    """Raised by `require`; `outcome` is what the tool answers instead of its result."""

    def __init__(self, outcome: CallToolResult | InputRequiredResult | MCPError) -> None:
        super().__init__("connection needed")
        self.outcome = outcome


STORE_DOWN = "The token store is unavailable; try again shortly"


@contextlib.contextmanager
def store_errors_as_mcp_errors() -> Iterator[None]:
    """DESIGN invariant 8: a store failure is a clear JSON-RPC error, never a half answer."""
    try:
        yield
    except StoreUnavailable:
        raise MCPError(code=INTERNAL_ERROR, message=STORE_DOWN) from None


def connected(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[Any]]:
    """Decorator for tools that call `broker.require`: turns `ConnectionNeeded` into the answer."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            return await fn(*args, **kwargs)
        except ConnectionNeeded as need:
            if isinstance(need.outcome, MCPError):
                raise need.outcome from None
            return need.outcome

    return wrapper
