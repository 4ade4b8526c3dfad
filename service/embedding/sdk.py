"""Our connect flow inside your own MCP server: the SDK's `MCPServer` and its Starlette app.

    connect = UrlConnect(settings)
    server = MCPServer("acme", token_verifier=YourVerifier(), auth=...,
                       request_state_security=connect.request_state_security())

    @server.tool()
    @uses(connect.session, "github", scopes=("repo",))
    async def my_issues(ctx: Context, api: ProviderSession) -> list[dict]: ...

    app = connect.install(server.streamable_http_app())
    run_server(app, settings)  # service/embedding/serving.py: served as `serve` serves ours

Your authentication stays yours. The one thing we need from it is the user: your token verifier's
`AccessToken` must carry `subject` (the `sub`) and `claims["iss"]` (its issuer), the pair under
which connections are stored and which `/connect` compares with the browser's signed-in user
(service/mcp/identity.py). That issuer must be `settings.auth_issuer`, the OpenID provider the browser
signs in at. docs/embedding.md walks through it.

This module, like service/app.py, is a composition root: it alone (with app.py) brings the
browser routes of connect_routes into a server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.request_state import RequestStateSecurity
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount

from connect_routes import browser_routes
from connect_routes.browser_session import session_middleware
from connect_routes.error_pages import ERROR_PAGES
from connect_routes.headers import add_security_headers
from service.http.request_pass import RequestPass
from service.mcp.broker import ConnectionBroker
from service.mcp.provider_session import SessionFactory
from service.mcp.tools import register_tools
from service.runtime import Runtime
from service.settings import Settings


def request_state_security(settings: Settings) -> RequestStateSecurity:
    """The SDK's sealing of 2026-07-28 `requestState`, keyed from the settings, so that every
    replica opens what another sealed."""
    return RequestStateSecurity(keys=settings.request_state_key_list())


class UrlConnect:
    """The connect flow (store, completion delivery, refresh, browser pages) for a server of yours."""

    def __init__(self, settings: Settings, runtime: Runtime | None = None) -> None:
        self.settings = settings.require_safe_to_serve()
        self.runtime = runtime or Runtime(settings)
        r = self.runtime
        self.broker = ConnectionBroker(settings, r.store, r.hub, r.lifecycle, r.flow, r.http)

    @property
    def session(self) -> SessionFactory:
        """What `@uses` takes: `@uses(connect.session, "github", scopes=(...))`."""
        return self.broker.session

    def request_state_security(self) -> RequestStateSecurity:
        """Pass to your `MCPServer(request_state_security=...)` (2026-07-28 retries)."""
        return request_state_security(self.settings)

    def add_connection_tools(self, server: MCPServer[Any]) -> None:
        """Optional: our `whoami`, `list_connections` and `disconnect` tools on your server."""
        register_tools(server, self.broker, self.runtime)

    def browser_app(self) -> Starlette:
        """The browser half (`/connect`, `/callback/<provider>`, `/login`, `/connections`, the
        stylesheet) with its session cookie, security headers and error pages, behind the request
        pass our own server runs (service/http/request_pass.py): the head and body limits (431,
        413), the single-valued header fields (400), the request id, and a client that goes away
        logged as such, not as an error."""
        bounds = Middleware(
            RequestPass,
            browser_session=session_middleware(self.settings),
            security_headers=add_security_headers,
        )
        app = Starlette(
            routes=browser_routes(self.runtime),
            # mutant: embedding.browser_half_bounded "[bounds]" -> "[session_middleware(self.settings)]"
            middleware=[bounds],
            exception_handlers=dict(ERROR_PAGES),
        )
        app.state.runtime = self.runtime  # the error pages read the settings there
        return app

    def lifespan(self) -> AbstractAsyncContextManager[Runtime]:
        """Opens the store and the completion bus; everything above needs it running."""
        return self.runtime.running()

    def install(self, app: Starlette) -> Starlette:
        """Serve the browser half from `app` (behind its own routes, which keep precedence) and run
        the connect flow in `app`'s lifespan, around the lifespan it already has."""
        routes: list[BaseRoute] = app.router.routes
        routes.append(Mount("/", app=self.browser_app()))
        inner: Callable[[Any], AbstractAsyncContextManager[Any]] = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(served: Any) -> AsyncIterator[Any]:
            async with self.lifespan(), inner(served) as state:
                yield state

        app.router.lifespan_context = lifespan
        return app
