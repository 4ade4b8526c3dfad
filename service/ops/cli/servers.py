"""The commands that run servers: `serve` (a replica), and for development `demo` (the whole flow
on one machine), `mock-providers` (the dev AS and MockHub alone) and `dev-token`.

The development commands import `mock_providers` inside the command: the production packages
never depend on the mock providers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from service.http.server import request_bounds
from service.mcp.sdk.hooks import SdkHookMissing
from service.observability.logs import configure_logging
from service.ops.cli.preamble import (
    CommandFailed,
    Subcommands,
    add_command,
    configuration_error,
    configured,
    resolve_providers,
    say,
)
from service.ops.cli.serving import Server, build_server, require_free_ports, run_until_stopped
from service.settings import DEFAULT_DATA_DIR, SettingsError
from token_store import StoreUnavailable

#: `mock-providers` options that set a MockHub knob of the same name (docs/mock-providers.md).
MOCKHUB_KNOB_OPTIONS = (
    "token_endpoint_mode",
    "api_mode",
    "hang_seconds",
    "iss_mode",
    "access_token_ttl",
    "refresh_token_lifetime",
    "rotate_refresh_tokens",
    "revoke_grant_on_reuse",
)


def cmd_demo(args: argparse.Namespace) -> int:
    from mock_providers import create_mock_providers_app
    from mock_providers.demo import banner, build_demo
    from service.app import create_app, metrics_app

    configure_logging(args.log_level)
    providers_port = args.providers_port or args.port + 1
    metrics_port = args.metrics_port or args.port + 2
    if providers_port == args.port:
        raise configuration_error(ValueError(f"--port and --providers-port are both {args.port}"))
    if metrics_port in (args.port, providers_port):
        raise configuration_error(ValueError(f"--metrics-port {metrics_port} is taken by another server"))
    try:
        demo = build_demo(
            args.host,
            args.port,
            providers_port,
            args.data_dir,
            presets=True,  # github, google and slack too, served by the mocks (docs/tools.md)
            metrics_port=metrics_port,
            tools=args.tools,
        )
    except SettingsError as exc:
        raise configuration_error(SettingsError(f"{exc} (the demo runs on a loopback host only)")) from None
    options = {
        args.port: "--port N (or `make demo PORT=N`)",
        providers_port: "--providers-port N (or `make demo PROVIDERS_PORT=N`)",
        metrics_port: "--metrics-port N",
    }
    if args.downstream:
        options[args.port + 3] = "--port N (the remote MCP stand-in takes PORT+3)"
    require_free_ports(args.host, options)
    downstream = _demo_downstream(args.port + 3) if args.downstream else None
    try:
        if downstream is not None:
            demo = asyncio.run(_with_demo_downstream(demo, downstream))
        app = create_app(demo.settings)
        servers = {
            "providers": build_server(create_mock_providers_app(demo.providers), args.host, providers_port),
            "mcp": build_server(
                app,
                args.host,
                args.port,
                bounds=request_bounds(demo.settings),
            ),
            "metrics": build_server(metrics_app(app.state.runtime), args.host, metrics_port),
        }
    except (ValueError, SdkHookMissing) as exc:  # a malformed key or URL, an SDK without a hook
        if downstream is not None:
            downstream.stop()
        raise configuration_error(exc) from None
    say(*banner(demo).splitlines())
    if downstream is not None:
        say(
            f"  Remote MCP server (stand-in)   {downstream.url}",
            f"    its tools here read {DEMO_DOWNSTREAM}_<tool> (docs/gateway.md); "
            f'call "{DEMO_DOWNSTREAM}_connect" first',
        )
    try:
        return run_until_stopped(servers)
    finally:
        if downstream is not None:
            downstream.stop()


DEMO_DOWNSTREAM = "downstream"  # the provider name of `demo --downstream`'s remote MCP server


def _demo_downstream(port: int) -> Any:
    """`demo --downstream`: the kit's OAuth-protected MCP stand-in on `port` (docs/gateway.md)."""
    from mock_providers.testing.downstream import DownstreamServer

    return DownstreamServer(port=port, name="Downstream").start()


async def _with_demo_downstream(demo: Any, downstream: Any) -> Any:
    """The demo with the stand-in as provider `downstream`, discovered and registered with as
    `serve` does at start-up (the registration kept in the demo's store)."""
    provider = await downstream.resolved_provider(demo.settings, DEMO_DOWNSTREAM)
    settings = demo.settings.replace(providers={**demo.settings.providers, DEMO_DOWNSTREAM: provider})
    return replace(demo, settings=settings)


def cmd_serve(args: argparse.Namespace) -> int:
    from service.app import create_app, metrics_app

    settings = configured(args)
    # Logging first: discovery and the app factory log too, and only our handler redacts.
    configure_logging(settings.log_level, settings.log_format, settings.replica_id)
    try:
        settings = asyncio.run(resolve_providers(settings))
        app = create_app(settings)
    # ProviderError, a bad key, an SDK without a hook; no store for a dynamic registration
    except (ValueError, SdkHookMissing, StoreUnavailable) as exc:
        raise configuration_error(exc) from None
    timing = {"keep_alive": settings.keep_alive_seconds, "grace": settings.shutdown_grace_seconds}
    server = build_server(
        app,
        settings.host,
        settings.port,
        **timing,
        drain=app.state.drain,
        bounds=request_bounds(settings),
    )
    servers: dict[str, Server] = {"mcp": server}
    if settings.metrics_port:
        # Metrics on their own port only (not on the public one): the operator binds it privately.
        servers["metrics"] = build_server(
            metrics_app(app.state.runtime), settings.host, settings.metrics_port
        )
    if settings.admin_port:
        from service.ops.admin_api import admin_app

        # The admin API on its own port only (docs/admin.md), like the metrics.
        servers["admin"] = build_server(admin_app(app.state.runtime), settings.host, settings.admin_port)
    return run_until_stopped(servers, settings.event_loop)


def cmd_mock_providers(args: argparse.Namespace) -> int:
    from mock_providers import create_mock_providers_app
    from mock_providers.admin import apply_knobs
    from mock_providers.demo import build_dev_setup, write_serve_env
    from mock_providers.store import delete_state

    configure_logging(args.log_level)
    public_url = args.public_url or f"http://{args.host}:{args.port}"
    knobs = {name: getattr(args, name) for name in MOCKHUB_KNOB_OPTIONS if getattr(args, name) is not None}
    try:
        setup = build_dev_setup(args.mcp_public_url, public_url, args.data_dir)
    except ValueError as exc:  # SettingsError included
        raise configuration_error(exc) from None
    # Before --reset-state: that port may be a running mock-providers on this state.
    require_free_ports(args.host, {args.port: "--port N"})
    try:
        if args.reset_state:
            delete_state(setup.providers.data_dir)
        app = create_mock_providers_app(setup.providers)
        apply_knobs(app.state.mockhub, knobs)
    except ValueError as exc:
        raise configuration_error(exc) from None
    env_file = write_serve_env(setup)
    state = app.state.mock_store.path
    say(
        f"mock providers (development only): dev AS {public_url}, mockhub {public_url}/mockhub",
        f"configuration for `mcp-url-connect serve` replicas: {env_file} (secrets, mode 0600)",
        f"codes, tokens and clients kept in {state} (--reset-state forgets them)",
        f"knobs: {public_url}/_admin/<provider> from this machine",
        *(f"  mockhub {name} = {value!r}" for name, value in knobs.items()),
    )
    return run_until_stopped({"providers": build_server(app, args.host, args.port)})


def cmd_dev_token(args: argparse.Namespace) -> int:
    from mock_providers import NoDevKeys, mint_access_token

    try:
        say(mint_access_token(args.data_dir, args.sub))
    except NoDevKeys as exc:
        raise CommandFailed(str(exc)) from None
    return 0


def add_parsers(sub: Subcommands) -> None:
    demo = add_command(
        sub,
        "demo",
        cmd_demo,
        "run the whole flow locally: MCP server, dev AS, mock provider",
        configured=False,
    )
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.add_argument("--providers-port", type=int, default=0, help="dev AS + mockhub port (default PORT+1)")
    demo.add_argument("--metrics-port", type=int, default=0, help="GET /metrics port (default PORT+2)")
    demo.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    demo.add_argument("--log-level", default="INFO")
    demo.add_argument(
        "--downstream",
        action="store_true",
        help="also serve an OAuth-protected remote MCP server (PORT+3) behind ours (docs/gateway.md)",
    )
    demo.add_argument(
        "--tools",
        default=os.environ.get("MCPUC_TOOLS", ""),
        metavar="REFS",
        help="tool packages to serve, package.module:function, comma-separated (MCPUC_TOOLS)",
    )
    add_command(sub, "serve", cmd_serve, "run the MCP server configured by MCPUC_* variables")

    mock = add_command(
        sub,
        "mock-providers",
        cmd_mock_providers,
        "run the dev AS and mockhub alone (development only)",
        configured=False,
    )
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=8001)
    mock.add_argument(
        "--public-url", default="", help="URL browsers and replicas use (default http://HOST:PORT)"
    )
    mock.add_argument("--mcp-public-url", required=True, help="public URL of the MCP server (or its proxy)")
    mock.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    mock.add_argument("--log-level", default="INFO")
    mock.add_argument(
        "--reset-state", action="store_true", help="forget the codes, tokens and clients kept in DATA_DIR"
    )
    hub = mock.add_argument_group("MockHub knobs (also settable at POST /_admin/mockhub)")
    modes = ("ok", "junk", "500", "hang")
    hub.add_argument("--token-endpoint-mode", choices=modes, help="how /mockhub/token answers (default ok)")
    hub.add_argument("--api-mode", choices=modes, help="how /mockhub/user answers (default ok)")
    hub.add_argument("--hang-seconds", type=float, help="how long 'hang' lasts before a 504 (default 3600)")
    hub.add_argument("--iss-mode", choices=("correct", "omit", "wrong"), help="RFC 9207 iss value")
    hub.add_argument("--access-token-ttl", type=int, help="seconds (default 28800)")
    hub.add_argument("--refresh-token-lifetime", type=int, help="seconds (default: never expire)")
    hub.add_argument(
        "--rotate-refresh-tokens",
        action=argparse.BooleanOptionalAction,
        help="a refresh returns a new refresh token and retires the old one (default yes)",
    )
    hub.add_argument(
        "--revoke-grant-on-reuse",
        action=argparse.BooleanOptionalAction,
        help="a retired refresh token presented again revokes its grant (default yes)",
    )

    token = add_command(
        sub,
        "dev-token",
        cmd_dev_token,
        "print a bearer token for SUB signed by the demo's dev AS keys",
        configured=False,
    )
    token.add_argument("sub")
    token.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
