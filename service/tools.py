"""The tools. Each reaches a provider through `@uses` (which connects first when needed);
none ever returns a token."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from service.broker import ConnectionBroker
from service.disconnect import disconnect_all
from service.errors import ProviderFailure
from service.identity import current_caller
from service.mcp_errors import mcp_errors
from service.provider_session import ProviderSession, uses
from service.runtime import Runtime


def register_tools(server: MCPServer[Any], broker: ConnectionBroker, runtime: Runtime) -> None:
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
            return await runtime.lifecycle.describe(await runtime.store.list_connections(caller.user))

    @server.tool(description="Disconnect the caller's account(s) at a provider and revoke the grant there.")
    async def disconnect(ctx: Context[Any, Any], provider: str) -> dict[str, Any]:
        with mcp_errors():
            config = broker.provider(provider)  # unknown provider -> clear error
            caller = current_caller(ctx)
            done = await disconnect_all(runtime.store, config, caller.user, runtime.outbound)
        return {
            "provider": provider,
            "disconnected": [d.account for d in done],
            "labels": [d.label for d in done],  # parallel to `disconnected`: what the user calls them
            "revoked": [d.account for d in done if d.revoked],
        }

    register_example_tools(server, broker)


def register_example_tools(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    """Tools for the real services, registered when the provider is configured (docs/providers.md)."""
    if "github" in broker.providers:

        @server.tool(description="Your GitHub profile (login, name, public repos).")
        @uses(broker.session, "github", scopes=("read:user",))
        async def github_profile(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
            user = await api.get_json("/user")
            return {k: user.get(k) for k in ("login", "name", "public_repos", "html_url")}

    if "google" in broker.providers:

        @server.tool(description="Your Google account's OpenID profile (email, name).")
        @uses(broker.session, "google", scopes=("openid", "email", "profile"))
        async def google_profile(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
            info = await api.get_json(api.provider.userinfo_url)
            return {k: info.get(k) for k in ("email", "name", "email_verified")}

    if "slack" in broker.providers:

        @server.tool(description="Who you are in your Slack workspace (user and team).")
        @uses(broker.session, "slack", scopes=("users:read",))
        async def slack_identity(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
            answer = await api.get_json("/auth.test")
            if not answer.get("ok"):
                raise ProviderFailure("Slack", "api", f"Slack: {str(answer.get('error'))[:64]}")
            return {k: answer.get(k) for k in ("user", "user_id", "team", "team_id")}


async def _profile(api: ProviderSession) -> dict[str, Any]:
    profile = await api.get_json(api.provider.userinfo_url)
    if not isinstance(profile, dict):
        raise ProviderFailure(
            api.provider.display_name, "api", f"{api.provider.display_name}: unexpected answer"
        )
    return profile
