"""The example tools. Each finds the caller's token through the broker; none ever returns one."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from service.broker import ConnectionBroker, connected, store_errors_as_mcp_errors
from service.identity import current_caller
from service.provider_api import ProviderApiError, fetch_userinfo
from service.runtime import Runtime


def register_tools(server: MCPServer[Any], broker: ConnectionBroker, runtime: Runtime) -> None:
    @server.tool(
        description="Show the caller's profile at a connected provider (connects it first if needed)."
    )
    @connected
    async def whoami(ctx: Context[Any, Any], provider: str = "mockhub") -> dict[str, Any]:
        connection = await broker.require(ctx, provider)
        config = broker.provider(provider)
        try:
            return await fetch_userinfo(runtime.http, config, connection.tokens.access_token)
        except ProviderApiError as exc:
            if exc.unauthorized:
                # The grant is gone at the provider: forget it, so the next call connects again.
                with store_errors_as_mcp_errors():
                    await runtime.store.delete_connection(connection.key)
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None

    @server.tool(description="List the caller's connections (provider, account, scopes, times; no secrets).")
    async def list_connections(ctx: Context[Any, Any]) -> list[dict[str, Any]]:
        caller = current_caller(ctx)
        with store_errors_as_mcp_errors():
            return [c.describe() for c in await runtime.store.list_connections(caller.user)]

    @server.tool(description="Delete the caller's stored connection(s) to a provider.")
    async def disconnect(ctx: Context[Any, Any], provider: str) -> dict[str, Any]:
        broker.provider(provider)  # unknown provider -> clear error
        caller = current_caller(ctx)
        with store_errors_as_mcp_errors():
            deleted = await runtime.store.delete_connections(caller.user, provider)
        return {"provider": provider, "disconnected": [c.key.account for c in deleted]}
