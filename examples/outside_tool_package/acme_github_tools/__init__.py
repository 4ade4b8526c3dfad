"""Acme's GitHub tools: every repository of the caller (GitHub pages them 100 at a time) and
opening an issue. Served once the package is installed beside mcp-url-connect; each tool connects
the caller's GitHub account first when needed (`@uses`)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_url_connect import ConnectionBroker, ProviderSession, uses


def register(server: MCPServer[Any], broker: ConnectionBroker) -> None:
    """The `mcp_url_connect.tools` entry point (pyproject.toml)."""
    if "github" not in broker.providers:  # serve the tools only where GitHub is configured
        return

    @server.tool(description="Your repositories, most recently pushed first (at most `limit`).")
    @uses(broker.session, "github", scopes=("repo",))
    async def my_repos(ctx: Context[Any, Any], api: ProviderSession, limit: int = 300) -> dict[str, Any]:
        repos = api.pages("/user/repos", params={"per_page": 100, "sort": "pushed"}, max_items=limit)
        names = [repo["full_name"] async for repo in repos]
        return {"repos": names, "more": repos.truncated}

    @server.tool(description="Open an issue in a repository (owner/name).")
    @uses(broker.session, "github", scopes=("repo",))
    async def open_issue(
        ctx: Context[Any, Any], api: ProviderSession, repo: str, title: str, body: str = ""
    ) -> dict[str, Any]:
        issue = await api.post_json(f"/repos/{repo}/issues", {"title": title, "body": body})
        return {"number": issue["number"], "url": issue["html_url"]}
