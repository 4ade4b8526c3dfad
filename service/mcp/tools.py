"""This server's own tools: `whoami`, `list_connections`, `disconnect`. Tools for other services
come from tool packages (service/mcp/tool_packages.py; examples/provider_tools is one). None ever
returns a token."""

from __future__ import annotations

from typing import Any, Protocol

from mcp.server.mcpserver import Context, MCPServer

from service.errors import ProviderFailure
from service.flow.disconnect import disconnect_all
from service.flow.lifecycle import TokenLifecycle
from service.mcp.broker import ConnectionBroker
from service.mcp.errors import mcp_errors
from service.mcp.identity import current_caller
from service.mcp.provider_session import ProviderSession, uses
from service.observability.webhooks import ConnectionEvents
from service.providers.outbound_http import OutboundHttp
from token_store import Store


class ToolParts(Protocol):
    """What these tools use of the process's long-lived objects (service/runtime.py's `Runtime`
    is one): named here so this layer does not import the composition above it."""

    @property
    def store(self) -> Store: ...
    @property
    def lifecycle(self) -> TokenLifecycle: ...
    @property
    def outbound(self) -> OutboundHttp: ...
    @property
    def connection_events(self) -> ConnectionEvents: ...


def register_tools(server: MCPServer[Any], broker: ConnectionBroker, parts: ToolParts) -> None:
    @server.tool(
        description="Show the caller's profile at a connected provider (connects it first if needed)."
    )
    @uses(broker.session)
    async def whoami(
        ctx: Context[Any, Any], api: ProviderSession, provider: str = "mockhub", account: str | None = None
    ) -> dict[str, Any]:
        return await _profile(api)

    @server.tool(description="List the caller's connections: provider, account, scopes, status, times.")
    async def list_connections(ctx: Context[Any, Any]) -> list[dict[str, Any]]:
        with mcp_errors():
            caller = current_caller(ctx)
            return await parts.lifecycle.describe(await parts.store.list_connections(caller.user))

    @server.tool(description="Disconnect the caller's account(s) at a provider and revoke the grant there.")
    async def disconnect(ctx: Context[Any, Any], provider: str) -> dict[str, Any]:
        with mcp_errors():
            config = broker.provider(provider)  # unknown provider -> clear error
            caller = current_caller(ctx)
            done = await disconnect_all(
                parts.store, config, caller.user, parts.outbound, parts.connection_events
            )
        return {
            "provider": provider,
            "disconnected": [d.account for d in done],
            "labels": [d.label for d in done],  # parallel to `disconnected`: what the user calls them
            "revoked": [d.account for d in done if d.revoked],
        }


async def _profile(api: ProviderSession) -> dict[str, Any]:
    profile = await api.get_json(api.provider.userinfo_url)
    if not isinstance(profile, dict):
        raise ProviderFailure(
            api.provider.display_name, "api", f"{api.provider.display_name}: unexpected answer"
        )
    return profile
