"""Browser-facing routes: login at the MCP authorization server, /connect, /callback, connections."""

from __future__ import annotations

from starlette.routing import Route

from connect_routes.connect import ConnectRoutes
from connect_routes.connections_page import ConnectionsPage
from connect_routes.login import Login
from connect_routes.static import static_routes
from service.runtime import Runtime


def browser_routes(runtime: Runtime) -> list[Route]:
    login = Login(runtime.settings, runtime.outbound)
    return [
        *login.routes(),
        *ConnectRoutes(runtime, login).routes(),
        *ConnectionsPage(runtime, login).routes(),
        *static_routes(),
    ]


__all__ = ["browser_routes"]
