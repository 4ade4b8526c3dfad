"""The application factory: MCP server + browser routes + health, one Starlette app."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from connect_routes import browser_routes
from connect_routes.browser_session import session_middleware
from connect_routes.error_pages import ERROR_PAGES
from connect_routes.headers import add_security_headers
from service.http.drain import Drain
from service.http.request_pass import RequestPass
from service.mcp.bearer import token_verifier
from service.mcp.broker import ConnectionBroker
from service.mcp.gateway.moves import AuthorizationServerMoves
from service.mcp.gateway.names import Namespaces, require_unshadowed_tool_names
from service.mcp.gateway.pool import DownstreamSessions
from service.mcp.gateway.proxy import Gateway
from service.mcp.sdk.affinity import SessionAffinityMiddleware
from service.mcp.sdk.hooks import SessionManager, adopt_session_manager, check_sdk_hooks
from service.mcp.sdk.session_limits import SessionLimits
from service.mcp.sdk.sse_resumption import RETRY_INTERVAL_MS
from service.mcp.sdk.sse_resumption import install as install_sse_resumption
from service.mcp.server import ObservedMCPServer
from service.mcp.tool_packages import load_tool_packages, register_tool_packages
from service.mcp.tools import register_tools
from service.observability.metrics import serve_metrics
from service.providers.addresses import resolve_host
from service.providers.catalogue import ProviderConfig
from service.providers.mcp_downstream import authorization_server_moved, resolve_downstream
from service.providers.protected_resource import Challenge
from service.providers.registration import client_metadata_document
from service.runtime import CLIENT_NAME, Runtime, downstream_context
from service.settings import Settings, SettingsError
from service.urls import CLIENT_METADATA_PATH, LOOPBACK_HOSTS, MCP_PATH, is_loopback
from token_store import StoreUnavailable

INSTRUCTIONS = (
    "Tools here act on the user's behalf at third-party services. When a tool needs an account "
    "the user has not connected, it asks the client to open a connect URL in the user's browser."
)


def package_version() -> str:
    """This package's version for `serverInfo.version` (empty when run from an uninstalled tree)."""
    try:
        return version("mcp-url-connect")
    except PackageNotFoundError:
        return ""


def build_mcp_server(settings: Settings, runtime: Runtime) -> tuple[ObservedMCPServer, ConnectionBroker]:
    server = ObservedMCPServer(
        "mcp-url-connect",
        metrics=runtime.metrics,
        tracing=runtime.tracing,
        version=package_version(),
        instructions=INSTRUCTIONS,
        token_verifier=token_verifier(settings, runtime.http),
        auth=AuthSettings(
            issuer_url=settings.auth_issuer,  # type: ignore[arg-type]  # pydantic coerces str
            resource_server_url=settings.resource_url,  # type: ignore[arg-type]
            validate_token_resource=True,
        ),
        # Keys from configuration so every replica can open every requestState; a state lives as
        # long as the flow it resumes (one lifetime, `elicitation_ttl`).
        # mutant: broker.request_state_ttl ", ttl=settings.elicitation_ttl" -> ""
        request_state_security=RequestStateSecurity(
            keys=settings.request_state_key_list(), ttl=settings.elicitation_ttl
        ),
    )
    broker = ConnectionBroker(
        settings, runtime.store, runtime.hub, runtime.lifecycle, runtime.flow, runtime.provider_calls
    )
    register_tools(server, broker, runtime)
    packages = load_tool_packages(settings.tools, entry_points_too=settings.tool_entry_points)
    register_tool_packages(packages, server, broker)
    gateway = build_gateway(settings, runtime, broker, server)
    if gateway is not None:
        server.serve_gateway(gateway)
    return server, broker


def build_gateway(
    settings: Settings, runtime: Runtime, broker: ConnectionBroker, server: ObservedMCPServer
) -> Gateway | None:
    """Remote MCP servers' tools beside ours (docs/gateway.md), or None when none is configured.
    Each must have been resolved (`service.runtime.resolve_providers`), and their namespaces may
    shadow no tool (`require_unshadowed_tool_names`)."""
    namespaces = Namespaces(settings.providers.values())
    if not namespaces:
        return None
    for provider in namespaces.providers:
        if not provider.resolved:
            raise SettingsError(
                f"providers.{provider.name}: a remote MCP server is discovered before the app is built "
                "(service.runtime.resolve_providers; `serve` does it)"
            )
    try:
        require_unshadowed_tool_names(namespaces.prefixes, server.tool_names)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    sessions = DownstreamSessions(runtime.outbound)
    return Gateway(namespaces, broker, runtime.lifecycle, runtime.store, sessions, downstream_moves(runtime))


def downstream_moves(runtime: Runtime) -> AuthorizationServerMoves:
    """Following a remote MCP server to another authorization server while we serve: its metadata
    read again and the provider resolved again with the runtime's outbound HTTP and store, its
    entry replaced in the providers every part reads by name."""
    settings = runtime.settings
    providers = settings.providers
    assert isinstance(providers, dict)  # pydantic's validated mapping: the one every part reads

    async def moved(provider: ProviderConfig, challenge: Challenge) -> bool:
        return await authorization_server_moved(provider, challenge, runtime.http, resolve_host)

    async def resolve(provider: ProviderConfig) -> ProviderConfig:
        context = downstream_context(settings, provider.name, runtime.store, clock=runtime.clock)
        return await resolve_downstream(provider, runtime.http, context)

    def counted(provider: str, outcome: str) -> None:
        runtime.metrics.downstream_moves.labels(provider=provider, outcome=outcome).inc()

    return AuthorizationServerMoves(providers, moved, resolve, counted=counted)


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """DNS-rebinding protection: accept only our public host (and loopback in development)."""
    public = urlsplit(settings.public_url)
    hosts, origins = [public.netloc], [f"{public.scheme}://{public.netloc}"]
    if is_loopback(settings.public_url):
        loopback = [f"[{h}]" if ":" in h else h for h in LOOPBACK_HOSTS]  # IPv6 in brackets
        hosts += [f"{h}:*" for h in loopback]
        origins += [f"http://{h}:*" for h in loopback]
    return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)


def mcp_http_app(
    server: MCPServer[Any], security: TransportSecuritySettings
) -> tuple[Starlette, SessionManager]:
    """The SDK's Streamable HTTP app, serving `/mcp`, and its session manager.

    On 2025-11-25 sessions every SSE stream opens with a priming event (an id, empty data) and a
    `retry` field (MCP 2025-11-25, basic/transports, "Sending Messages to the Server" 6), which
    the SDK sends once each session has an event store (service/mcp/sdk/sse_resumption.py).
    """
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, transport_security=security, retry_interval=RETRY_INTERVAL_MS
    )
    manager = adopt_session_manager(server)
    install_sse_resumption(manager)
    return app, manager


def create_app(settings: Settings, runtime: Runtime | None = None) -> Starlette:
    settings.require_safe_to_serve()  # no server runs on settings that were never checked
    check_sdk_hooks()  # nor on an SDK without what the caps and replay isolation rely on
    runtime = runtime or Runtime(settings)
    server, broker = build_mcp_server(settings, runtime)
    gateway = server.gateway
    mcp_app, sessions = mcp_http_app(server, transport_security(settings))
    SessionLimits.around(
        sessions,
        sessions_per_user=settings.max_sessions_per_user,
        sessions_per_replica=settings.max_sessions_per_replica,
        requests_per_user=settings.max_requests_per_user,
        requests_per_second_per_user=settings.requests_per_second_per_user,
        request_burst_per_user=settings.request_burst_per_user,
        refused=lambda limit: runtime.metrics.mcp_requests_refused.labels(limit=limit.value).inc(),
    )
    drain = Drain(lambda: sessions.live_transports)
    broker.stop_holding_when(lambda: drain.draining)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        """Ready when the store answers and the completion bus is subscribed: a replica that
        could not deliver a completion takes no traffic. A stopping replica is never ready."""
        if drain.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        try:
            await runtime.store.ping()
        except StoreUnavailable:
            return JSONResponse({"status": "unavailable", "store": "unreachable"}, status_code=503)
        if not runtime.completions.ready:
            return JSONResponse(
                {"status": "unavailable", "completion_bus": "not subscribed"}, status_code=503
            )
        return JSONResponse({"status": "ready"})

    async def protected_resource_root(request: Request) -> Response:
        # RFC 9728 §3.1: the SDK serves the `/mcp`-suffixed form; some clients ask the root.
        return JSONResponse(
            {
                "resource": settings.resource_url,
                "authorization_servers": [settings.auth_issuer],
                "bearer_methods_supported": ["header"],
            }
        )

    async def client_metadata(request: Request) -> Response:
        """Our Client ID Metadata Document for a remote MCP server's authorization server
        (docs/gateway.md): public, so cacheable for a while."""
        provider = settings.providers.get(request.path_params["provider"])
        if provider is None or provider.kind != "mcp":
            return JSONResponse({"error": "not_found"}, status_code=404)
        document = client_metadata_document(
            provider.client_metadata_url or settings.client_metadata_url(provider.name),
            settings.callback_url(provider.name),
            CLIENT_NAME,
        )
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})

    mcp_endpoint = SessionAffinityMiddleware(mcp_app, settings.replica_id)
    routes: list[BaseRoute] = [
        # First, for every method: each MCP request would otherwise be matched against every
        # other route before the catch-all mount.
        Route(MCP_PATH, endpoint=mcp_endpoint),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        # mutant: metrics.off_the_public_port true
        *([Route("/metrics", serve_metrics, methods=["GET"])] if settings.metrics_port == 0 else []),
        Route("/.well-known/oauth-protected-resource", protected_resource_root, methods=["GET"]),
        Route(CLIENT_METADATA_PATH, client_metadata, methods=["GET"]),
        *browser_routes(runtime),
        Mount("/", app=mcp_endpoint),  # the SDK's metadata routes (RFC 9728) and its 404s
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Mount() does not run the sub-app's lifespan: run the session manager here.
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(runtime.running())
            await stack.enter_async_context(server.session_manager.run())
            if gateway is not None:
                await stack.enter_async_context(gateway.sessions.running())
            yield

    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                RequestPass,
                drain=drain,
                browser_session=session_middleware(settings),
                security_headers=add_security_headers,
            )
        ],
        lifespan=lifespan,
        exception_handlers=dict(ERROR_PAGES),
    )
    app.state.runtime = runtime
    app.state.drain = drain  # `serve` stops through it (service/ops/cli/serving.py)
    # For embedding, tests and benchmarks: add tools (with `uses(app.state.broker.session, ...)`).
    app.state.mcp_server = server
    app.state.sessions = sessions  # the SDK's session manager with our steps (service/mcp/sdk/hooks.py)
    app.state.broker = broker
    app.state.gateway = gateway
    return app


def metrics_app(runtime: Runtime) -> Starlette:
    """`GET /metrics` alone, for `MCPUC_METRICS_PORT` (the runtime is the main app's)."""
    app = Starlette(routes=[Route("/metrics", serve_metrics, methods=["GET"])])
    app.state.runtime = runtime
    return app
