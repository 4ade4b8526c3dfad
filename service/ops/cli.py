"""Console entry point: `mcp-url-connect demo | serve | mock-providers | keys rotate|retire |
connections list|revoke | store migrate | dev-token`.

The development commands (demo, mock-providers, dev-token) import `mock_providers` inside the
command: the production packages never depend on the mock providers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import getpass
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.types import ASGIApp

from service.errors import UnknownProvider
from service.flow.operator import DEFAULT_REVOKE_CONCURRENCY, DEFAULT_REVOKE_RATE
from service.http.drain import Drain
from service.http.server import DEFAULT_BOUNDS, RequestBounds, loop_factory, request_bounds, server_config
from service.mcp.sdk.hooks import SdkHookMissing
from service.observability.logs import configure_logging
from service.providers.catalogue import ProviderError
from service.settings import (
    DEFAULT_DATA_DIR,
    EventLoopChoice,
    Settings,
    SettingsError,
    event_loop_name,
    load_settings,
)
from token_store import StoreUnavailable

if TYPE_CHECKING:
    from service.runtime import Runtime

# Which server a log line comes from, when one process runs two (`demo`); set per server task.
_SERVER_LABEL: ContextVar[str] = ContextVar("server_label", default="")


class _Server(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to :func:`serve_until_stopped` and, given a
    :class:`~service.http.drain.Drain`, drains before uvicorn's own shutdown.

    uvicorn installs its own handler per server, so with two servers in one process only the
    last one started would hear Ctrl-C and the other would keep the process alive.
    """

    def __init__(self, config: uvicorn.Config, drain: Drain | None = None) -> None:
        super().__init__(config)
        self.drain = drain

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.drain is not None and not self.force_exit:
            await self._drain(self.drain)
        await super().shutdown(sockets)

    async def _drain(self, drain: Drain) -> None:
        """Stop accepting, let the calls in flight finish, end the sessions; then uvicorn's
        shutdown finds only closing connections and gets what is left of the grace period."""
        loop = asyncio.get_running_loop()
        grace = self.config.timeout_graceful_shutdown or 0
        deadline = loop.time() + grace
        drain.begin()
        for listener in self.servers:
            listener.close()  # new connections are refused: the proxy sends them elsewhere
        await drain.wait_idle(grace)
        # Idle keep-alive connections are left for the proxy to close (nginx after 4 s, before
        # our keep-alive ends): closing one ourselves races with a request the proxy may be
        # sending on it, which then fails (a POST is not re-sent). Each answer during the drain carries
        # `Connection: close`, so a reused one closes after its answer.
        idle_until = min(deadline, loop.time() + self.config.timeout_keep_alive + 1)
        # uvicorn keeps no event for "a connection closed": poll, as its own shutdown does.
        while len(self.server_state.connections) > drain.streams and loop.time() < idle_until:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        await drain.close_sessions()
        self.config.timeout_graceful_shutdown = max(1, int(deadline - loop.time()))

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _LabelServerLogs(logging.Filter):
    """Prefix uvicorn's lines with the server's label ("Started server process" etc. appear
    once per server)."""

    def filter(self, record: logging.LogRecord) -> bool:
        label = _SERVER_LABEL.get()
        if label and isinstance(record.msg, str):
            record.msg = f"[{label}] {record.msg}"
        return True


def build_server(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    keep_alive: float = 5.0,
    grace: float = 20.0,
    drain: Drain | None = None,
    bounds: RequestBounds = DEFAULT_BOUNDS,
) -> _Server:
    # With a `drain`, tool calls on 2025-11-25 sessions get the grace period too (service/http/drain.py).
    return _Server(server_config(app, host, port, keep_alive=keep_alive, grace=grace, bounds=bounds), drain)


async def _serve_labelled(label: str, server: _Server) -> bool:
    """Run one server; False if it failed (uvicorn exits the process when it cannot start)."""
    _SERVER_LABEL.set(label)
    try:
        await server.serve()
    except SystemExit:
        return False
    return server.started


async def serve_until_stopped(servers: dict[str, _Server]) -> int:
    """Run the servers until SIGINT/SIGTERM or until any one stops, then stop them all.

    Returns 1 if a server failed or stopped on its own, 0 after a signal.
    """
    loop = asyncio.get_running_loop()
    signalled = False

    def stop_all(*_: object) -> None:
        nonlocal signalled
        for server in servers.values():
            server.force_exit = signalled  # a second Ctrl-C does not wait for open connections
            server.should_exit = True
        signalled = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_all)
    label_filter = _LabelServerLogs()
    uvicorn_log = logging.getLogger("uvicorn.error")
    if len(servers) > 1:
        uvicorn_log.addFilter(label_filter)
    try:
        tasks = [asyncio.create_task(_serve_labelled(label, s)) for label, s in servers.items()]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        stopped_by_signal = signalled
        for server in servers.values():
            server.should_exit = True
        results = await asyncio.gather(*tasks)
    finally:
        uvicorn_log.removeFilter(label_filter)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 0 if stopped_by_signal and all(results) else 1


def run_until_stopped(servers: dict[str, _Server], event_loop: EventLoopChoice = "auto") -> int:
    """`serve_until_stopped` on the chosen event loop (service/http/server.py), after a line
    naming it."""
    logging.getLogger(__name__).info("event loop: %s", event_loop_name(event_loop))
    with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
        return runner.run(serve_until_stopped(servers))


def port_is_free(host: str, port: int) -> bool:
    """Whether `port` can be bound on `host` now (as uvicorn binds it: with SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _busy_port(host: str, options: dict[int, str]) -> int:
    """Refuse, in one line, to start on a port already taken (before any banner or server)."""
    for port, option in options.items():
        if not port_is_free(host, port):
            print(
                f"mcp-url-connect: port {port} on {host} is already in use; choose another with {option}",
                file=sys.stderr,
            )
            return 1
    return 0


def _configuration_error(exc: Exception) -> int:
    print(f"mcp-url-connect: configuration error: {exc}", file=sys.stderr)
    return 2


def cmd_demo(args: argparse.Namespace) -> int:
    from mock_providers import create_mock_providers_app
    from mock_providers.demo import banner, build_demo
    from service.app import create_app, metrics_app

    configure_logging(args.log_level)
    providers_port = args.providers_port or args.port + 1
    metrics_port = args.metrics_port or args.port + 2
    if providers_port == args.port:
        return _configuration_error(ValueError(f"--port and --providers-port are both {args.port}"))
    if metrics_port in (args.port, providers_port):
        return _configuration_error(ValueError(f"--metrics-port {metrics_port} is taken by another server"))
    try:
        demo = build_demo(
            args.host, args.port, providers_port, args.data_dir, metrics_port=metrics_port, tools=args.tools
        )
    except SettingsError as exc:
        return _configuration_error(SettingsError(f"{exc} (the demo runs on a loopback host only)"))
    options = {
        args.port: "--port N (or `make demo PORT=N`)",
        providers_port: "--providers-port N (or `make demo PROVIDERS_PORT=N`)",
        metrics_port: "--metrics-port N",
    }
    if args.downstream:
        options[args.port + 3] = "--port N (the remote MCP stand-in takes PORT+3)"
    if busy := _busy_port(args.host, options):
        return busy
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
        return _configuration_error(exc)
    print(banner(demo), flush=True)
    if downstream is not None:
        print(
            f"  Remote MCP server (stand-in)   {downstream.url}\n"
            f'    its tools here read downstream_<tool> (docs/gateway.md); call "downstream_connect" first\n',
            flush=True,
        )
    try:
        return run_until_stopped(servers)
    finally:
        if downstream is not None:
            downstream.stop()


def _demo_downstream(port: int) -> Any:
    """`demo --downstream`: the kit's OAuth-protected MCP stand-in on `port` (docs/gateway.md)."""
    from mock_providers.testing.downstream import DownstreamServer

    return DownstreamServer(port=port, name="Downstream").start()


async def _with_demo_downstream(demo: Any, downstream: Any) -> Any:
    """The demo with the stand-in as provider `downstream`, discovered and registered with as
    `serve` does at start-up (the registration kept in the demo's store)."""
    from dataclasses import replace

    provider = await downstream.resolved_provider(demo.settings, DEMO_DOWNSTREAM)
    settings = demo.settings.replace(providers={**demo.settings.providers, DEMO_DOWNSTREAM: provider})
    return replace(demo, settings=settings)


DEMO_DOWNSTREAM = "downstream"  # the provider name of `demo --downstream`'s remote MCP server


async def resolve_providers(settings: Settings) -> Settings:
    """Fill providers' endpoints from their discovery metadata and make each remote MCP server a
    provider (`service.runtime.resolve_providers`); refuse to start if it fails. The store is
    opened only when a remote MCP server may need a dynamic registration kept there."""
    from service.runtime import resolve_providers as resolve_all
    from service.runtime import start_up_outbound
    from token_store import KeyRing, open_store

    outbound = start_up_outbound(settings.http_timeout)
    try:
        if not any(p.kind == "mcp" and not p.client_id for p in settings.providers.values()):
            return await resolve_all(settings, outbound.client, _NoRegistrations())
        store = await open_store(
            settings.effective_store_url,
            KeyRing.parse(settings.encryption_keys),
            prefix=settings.redis_prefix,
            wait_replicas=settings.store_wait_replicas,
            wait_timeout=settings.store_wait_timeout,
        )
        try:
            return await resolve_all(settings, outbound.client, store)
        finally:
            await store.close()
    finally:
        await outbound.aclose()


class _NoRegistrations:
    """Registrations for a configuration that needs none (every remote MCP server pre-registered)."""

    async def get_client_registration(self, issuer: str, redirect_uri: str) -> None:
        raise ProviderError("no store opened for a dynamic registration")

    async def add_client_registration(self, registration: Any) -> Any:
        raise ProviderError("no store opened for a dynamic registration")

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        raise ProviderError("no store opened for a dynamic registration")


def cmd_serve(args: argparse.Namespace) -> int:
    from service.app import create_app, metrics_app

    try:
        settings = load_settings(config_file=args.config).require_safe_to_serve()
        # Logging first: discovery and the app factory log too, and only our handler redacts.
        configure_logging(settings.log_level, settings.log_format, settings.replica_id)
        settings = asyncio.run(resolve_providers(settings))
        app = create_app(settings)
    except (
        SettingsError,
        ProviderError,
        ValueError,
        SdkHookMissing,
        StoreUnavailable,
    ) as exc:  # ValueError: a bad key
        return _configuration_error(exc)
    timing = {"keep_alive": settings.keep_alive_seconds, "grace": settings.shutdown_grace_seconds}
    server = build_server(
        app,
        settings.host,
        settings.port,
        **timing,
        drain=app.state.drain,
        bounds=request_bounds(settings),
    )
    servers = {"mcp": server}
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
    except (SettingsError, ValueError) as exc:
        return _configuration_error(exc)
    if busy := _busy_port(args.host, {args.port: "--port N"}):
        return busy  # before --reset-state: that port may be a running mock-providers on this state
    try:
        if args.reset_state:
            delete_state(setup.providers.data_dir)
        app = create_mock_providers_app(setup.providers)
        apply_knobs(app.state.mockhub, knobs)
    except ValueError as exc:
        return _configuration_error(exc)
    env_file = write_serve_env(setup)
    state = app.state.mock_store.path
    print(
        f"mock providers (development only): dev AS {public_url}, mockhub {public_url}/mockhub\n"
        f"configuration for `mcp-url-connect serve` replicas: {env_file} (secrets, mode 0600)\n"
        f"codes, tokens and clients kept in {state} (--reset-state forgets them)\n"
        f"knobs: {public_url}/_admin/<provider> from this machine"
        + "".join(f"\n  mockhub {name} = {value!r}" for name, value in knobs.items()),
        flush=True,
    )
    return run_until_stopped({"providers": build_server(app, args.host, args.port)})


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    from token_store import KeyRing, open_store

    try:
        settings = load_settings(config_file=args.config).require_safe_to_serve()
    except SettingsError as exc:
        return _configuration_error(exc)

    async def rotate() -> int:
        store = await open_store(
            settings.effective_store_url,
            KeyRing.parse(settings.encryption_keys),
            prefix=settings.redis_prefix,
        )
        try:
            return await store.reencrypt_all() + await store.reencrypt_client_registrations()
        finally:
            await store.close()

    count = asyncio.run(rotate())
    print(f"re-encrypted {count} record(s) under the newest key")
    return 0


def cmd_store_migrate(args: argparse.Namespace) -> int:
    """Bring the store's schema up to date, as the server would when it opens the store; for a
    deployment whose replicas connect with a role that may not change the schema (docs/postgres.md).
    MCPUC_STORE_URL then names the schema's owner for this command only."""
    from token_store import KeyRing, StoreUnavailable, open_store

    try:
        settings = load_settings(config_file=args.config).require_safe_to_serve()
    except SettingsError as exc:
        return _configuration_error(exc)

    async def migrate() -> None:
        store = await open_store(
            settings.effective_store_url,
            KeyRing.parse(settings.encryption_keys),
            prefix=settings.redis_prefix,
        )
        await store.close()

    try:
        asyncio.run(migrate())
    except StoreUnavailable as exc:
        print(f"mcp-url-connect: {exc}", file=sys.stderr)
        return 1
    print("store schema is up to date")
    return 0


def cmd_store_copy_from(args: argparse.Namespace) -> int:
    """Copy the connections of another store (the URL in the environment variable `--from-env`,
    never on the command line: it may hold a password) into MCPUC_STORE_URL's, never bringing
    back a connection either store deleted (token_store/store_copy.py): moving a deployment to
    another store (docs/redis.md, "Moving to another store"). Run it before and again after the
    replicas switch."""
    from token_store import CopyWindowClosed, KeyRing, StoreUnavailable, copy_between

    try:
        settings = load_settings(config_file=args.config).require_safe_to_serve()
    except SettingsError as exc:
        return _configuration_error(exc)
    source_url = os.environ.get(args.from_env, "")
    if not source_url:
        print(
            f"mcp-url-connect: store copy-from needs the old store's URL in {args.from_env}", file=sys.stderr
        )
        return 2
    copy = copy_between(
        source_url,
        settings.effective_store_url,
        KeyRing.parse(settings.encryption_keys),
        prefix=settings.redis_prefix,
        new_window=args.new_window,
    )
    try:
        report = asyncio.run(copy)
    except ValueError as exc:  # a URL that names no store
        return _configuration_error(exc)
    except (StoreUnavailable, CopyWindowClosed) as exc:
        print(f"mcp-url-connect: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0


def _operator_run(args: argparse.Namespace, act: Callable[[Runtime], Awaitable[int]]) -> int:
    """Run `act` on a runtime built from the same configuration as `serve` (--config, MCPUC_*):
    the same store, providers and completion bus, so sessions on the replicas hear of it."""
    from service.runtime import Runtime

    try:
        settings = load_settings(config_file=args.config).require_safe_to_serve()
        if getattr(args, "resolve_providers", True):
            settings = asyncio.run(resolve_providers(settings))
        runtime = Runtime(settings)
    except (SettingsError, ProviderError, ValueError) as exc:
        return _configuration_error(exc)
    runtime.run_sweeps = False  # the replicas send webhooks and sweep; a command only acts

    async def run() -> int:
        async with runtime.running():
            return await act(runtime)

    try:
        return asyncio.run(run())
    except StoreUnavailable as exc:
        print(f"mcp-url-connect: {exc}", file=sys.stderr)
        return 1
    except UnknownProvider as exc:
        print(f"mcp-url-connect: {exc}", file=sys.stderr)
        return 2


def _cli_actor() -> str:
    return f"cli:{getpass.getuser()}"


def _print_table(rows: list[dict[str, Any]]) -> None:
    columns = ("sub", "iss", "provider", "account", "account_label", "scopes", "status", "updated_at")
    cells = [
        [
            " ".join(row[c]) if c == "scopes" else _iso(row[c]) if c == "updated_at" else str(row[c])
            for c in columns
        ]
        for row in rows
    ]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(columns)]
    for line in [list(columns), *cells]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def _iso(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat(timespec="seconds")


def cmd_connections_list(args: argparse.Namespace) -> int:
    async def act(runtime: Runtime) -> int:
        rows = await runtime.operator.list_connections(
            _cli_actor(), sub=args.user, iss=args.iss, provider=args.provider
        )
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            _print_table(rows)
            print(f"{len(rows)} connection(s)")
        return 0

    args.resolve_providers = False
    return _operator_run(args, act)


def cmd_connections_revoke(args: argparse.Namespace) -> int:
    if args.all == (args.user is not None):
        print("mcp-url-connect: give either --user SUB or --provider P --all", file=sys.stderr)
        return 2
    if args.all and args.provider is None:
        print("mcp-url-connect: --all needs --provider P", file=sys.stderr)
        return 2
    if args.dry_run and not args.all:
        print("mcp-url-connect: --dry-run goes with --provider P --all", file=sys.stderr)
        return 2

    async def act(runtime: Runtime) -> int:
        operator = runtime.operator
        if args.all:
            counted = await operator.revoke_provider(_cli_actor(), args.provider, dry_run=True)
            print(f"{counted.matched} connection(s) at {args.provider}", flush=True)
            if args.dry_run:
                return 0
            removal = await operator.revoke_provider(
                _cli_actor(), args.provider, rate=args.rate, concurrency=args.concurrency
            )
        else:
            removal = await operator.revoke_user(
                _cli_actor(), args.user, iss=args.iss, provider=args.provider
            )
        if args.json:
            print(json.dumps(removal.summary(), indent=2))
            return 0
        for row in removal.deleted:
            confirmed = "revoked at the provider" if row["revoked"] else "NOT confirmed by the provider"
            who = f"{row['sub']} {row['provider']} {row['account']} ({row['account_label']})"
            print(f"deleted {who}: {confirmed}")
        print(
            f"{len(removal.deleted)} deleted, {removal.revoked} revoked at the provider, "
            f"{removal.flows_ended} flow(s) in progress ended"
        )
        return 0

    args.resolve_providers = not args.dry_run
    return _operator_run(args, act)


def cmd_keys_retire(args: argparse.Namespace) -> int:
    """Refuse while any record is sealed under KID: removing that key would strand it (a token
    set that can no longer be read can no longer be revoked at its provider)."""
    from token_store import KeyRing, open_store

    try:
        settings = load_settings(config_file=args.config).require_safe_to_serve()
        keyring = KeyRing.parse(settings.encryption_keys)
    except (SettingsError, ValueError) as exc:
        return _configuration_error(exc)
    if args.kid == keyring.primary_kid:
        print(f"mcp-url-connect: {args.kid!r} is the primary key; add a newer key first", file=sys.stderr)
        return 1

    async def count() -> int:
        store = await open_store(settings.effective_store_url, keyring, prefix=settings.redis_prefix)
        try:
            sealed = await store.count_sealed_under(args.kid)
            return sealed + await store.count_client_registrations_sealed_under(args.kid)
        finally:
            await store.close()

    try:
        sealed = asyncio.run(count())
    except StoreUnavailable as exc:
        print(f"mcp-url-connect: {exc}", file=sys.stderr)
        return 1
    # mutant: keys.retire_only_unused
    if sealed:
        print(
            f"mcp-url-connect: {sealed} record(s) are sealed only under {args.kid!r}; "
            "run `mcp-url-connect keys rotate` first",
            file=sys.stderr,
        )
        return 1
    print(f"no record is sealed under {args.kid!r}: remove it from MCPUC_ENCRYPTION_KEYS")
    return 0


def cmd_dev_token(args: argparse.Namespace) -> int:
    from mock_providers import NoDevKeys, mint_access_token

    try:
        print(mint_access_token(args.data_dir, args.sub))
    except NoDevKeys as exc:
        print(f"mcp-url-connect: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-url-connect", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the whole flow locally: MCP server, dev AS, mock provider")
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
    demo.set_defaults(func=cmd_demo)

    serve = sub.add_parser("serve", help="run the MCP server configured by MCPUC_* variables")
    serve.add_argument("--config", type=Path, default=None, help="TOML settings file (MCPUC_CONFIG_FILE)")
    serve.set_defaults(func=cmd_serve)

    mock = sub.add_parser("mock-providers", help="run the dev AS and mockhub alone (development only)")
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
    mock.set_defaults(func=cmd_mock_providers)

    keys = sub.add_parser("keys", help="encryption key maintenance")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    rotate = keys_sub.add_parser("rotate", help="re-encrypt every record under the newest key (online)")
    rotate.add_argument("--config", type=Path, default=None)
    rotate.set_defaults(func=cmd_keys_rotate)

    retire = keys_sub.add_parser("retire", help="check that no record is sealed only under KID")
    retire.add_argument("kid")
    retire.add_argument("--config", type=Path, default=None)
    retire.set_defaults(func=cmd_keys_retire)

    connections = sub.add_parser("connections", help="every user's connections (operators)")
    connections_sub = connections.add_subparsers(dest="connections_command", required=True)
    listing = connections_sub.add_parser("list", help="one row per connection, never a secret")
    listing.add_argument("--user", metavar="SUB", default=None)
    listing.add_argument("--iss", default=None)
    listing.add_argument("--provider", metavar="P", default=None)
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--config", type=Path, default=None)
    listing.set_defaults(func=cmd_connections_list)
    revoking = connections_sub.add_parser(
        "revoke", help="delete connections here, then revoke them at the provider (RFC 7009)"
    )
    revoking.add_argument("--user", metavar="SUB", default=None)
    revoking.add_argument("--iss", default=None, help="the user's issuer (default: MCPUC_AUTH_ISSUER)")
    revoking.add_argument("--provider", metavar="P", default=None)
    revoking.add_argument("--all", action="store_true", help="every connection at --provider (incident)")
    revoking.add_argument("--dry-run", action="store_true", help="with --all: count only")
    revoking.add_argument(
        "--rate", type=float, default=DEFAULT_REVOKE_RATE, help="revocations per second (with --all)"
    )
    revoking.add_argument("--concurrency", type=int, default=DEFAULT_REVOKE_CONCURRENCY)
    revoking.add_argument("--json", action="store_true")
    revoking.add_argument("--config", type=Path, default=None)
    revoking.set_defaults(func=cmd_connections_revoke)

    store = sub.add_parser("store", help="store maintenance")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    migrate = store_sub.add_parser("migrate", help="create or upgrade the store's schema (docs/postgres.md)")
    migrate.add_argument("--config", type=Path, default=None)
    migrate.set_defaults(func=cmd_store_migrate)
    copy_from = store_sub.add_parser(
        "copy-from", help="copy another store's connections into this one, deletions kept (docs/redis.md)"
    )
    copy_from.add_argument(
        "--from-env", default="MCPUC_OLD_STORE_URL", help="variable holding the old store's URL"
    )
    copy_from.add_argument(
        "--new-window",
        action="store_true",
        help="open a new copy window (a store that served until now only, never one left behind)",
    )
    copy_from.add_argument("--config", type=Path, default=None)
    copy_from.set_defaults(func=cmd_store_copy_from)

    token = sub.add_parser("dev-token", help="print a bearer token for SUB signed by the demo's dev AS keys")
    token.add_argument("sub")
    token.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    token.set_defaults(func=cmd_dev_token)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
