"""Server processes for the `whoami` table of bench/flow.py, configured like `serve` (MCPUC_*).

    python -m bench.server ours [--request-cpu]   # `serve` plus two tools: whoami_cached and bare
    python -m bench.server sdk    # the SDK's MCPServer with our JwtTokenVerifier and one bare tool
    python -m bench.server sdk-resumable   # the same, its SSE streams primed and resumable as ours

- `whoami_cached`: `whoami` with the connection read from the store once per user, then kept in
  memory: the difference to `whoami` is what the stored token costs (store read, decrypt, lifecycle).
- `--request-cpu`: bench/request_cpu.py around the app, the server's CPU per request at
  `GET /_bench/cpu` (it costs some CPU itself, so the comparisons with the SDK leave it out).
- `bare`: a tool that returns a constant: what our server costs around a tool body (bearer check,
  session limits, metrics, tracing, logging) compared with the bare SDK server's `bare`.
- `sdk-resumable`: the bare SDK server with our transport settings (service/app.py `mcp_http_app`:
  a per-session event store, so every POST's SSE stream opens with a priming event and a `retry`
  field, MCP 2025-11-25 transports). That costs the SDK an event and a socket write per call; the
  plain `sdk` server skips it, so comparing with both separates our own overhead from it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from bench.request_cpu import RequestCpu
from bench.tool_call import add_in_memory_tool
from service.app import create_app, mcp_http_app, transport_security
from service.mcp.bearer import token_verifier
from service.observability.logs import configure_logging
from service.ops.cli.preamble import resolve_providers
from service.ops.cli.serving import build_server, run_until_stopped
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings, load_settings


def ours(settings: Settings, request_cpu: bool = False) -> Starlette:
    app = create_app(settings)
    if request_cpu:
        app.add_middleware(RequestCpu)  # outermost: the whole request, our middleware included
    add_in_memory_tool(app)
    server = app.state.mcp_server

    @server.tool()
    async def bare(ctx: Context[Any, Any]) -> str:
        return "ok"

    return app


def sdk(settings: Settings, resumable: bool = False) -> Starlette:
    http = OutboundHttp(settings.http_timeout).client
    verifier = token_verifier(settings, http)
    server: MCPServer[Any] = MCPServer(
        "bare-sdk",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=settings.auth_issuer,  # type: ignore[arg-type]
            resource_server_url=settings.resource_url,  # type: ignore[arg-type]
            validate_token_resource=True,
        ),
    )

    @server.tool()
    async def bare(ctx: Context[Any, Any]) -> str:
        return "ok"

    if resumable:
        mcp_app, _sessions = mcp_http_app(server, transport_security(settings))
    else:
        mcp_app = server.streamable_http_app(
            streamable_http_path="/mcp", transport_security=transport_security(settings)
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[Route("/healthz", healthz), Mount("/", app=mcp_app)], lifespan=mcp_app.router.lifespan_context
    )
    return app


def main() -> int:
    kind, options = sys.argv[1], sys.argv[2:]
    settings = asyncio.run(resolve_providers(load_settings().require_safe_to_serve()))
    configure_logging(settings.log_level, settings.log_format, settings.replica_id)
    if kind == "ours":
        app = ours(settings, request_cpu="--request-cpu" in options)
    else:
        app = sdk(settings, resumable=kind == "sdk-resumable")
    # All three on the runtime `serve` uses (service/http/server.py): the comparison is of the
    # code around a tool, not of event loops.
    server = build_server(app, settings.host, settings.port)
    return run_until_stopped({"mcp": server}, settings.event_loop)


if __name__ == "__main__":
    sys.exit(main())
