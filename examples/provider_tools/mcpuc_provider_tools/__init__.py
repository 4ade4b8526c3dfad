"""Profile tools for the real GitHub, Google and Slack: a tool package, as an operator writes one.

Each tool is registered only when the server has a provider of that name configured (from its
preset, docs/providers.md), and reaches it through `@uses`, which connects the caller first when
needed. None returns a token.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderFailure, ProviderSession, uses


def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    """The `mcp_url_connect.tools` entry point (pyproject.toml)."""
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
