"""Serve ASGI apps under uvicorn on free loopback ports, from a background thread with its own loop.

A thread (rather than the test's event loop) lets one running stack outlive a test's loop (module
scope) and lets synchronous code, benchmarks included, start and stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import uvicorn

from mock_providers import create_mock_providers_app
from mock_providers.demo import Demo, build_demo, demo_metrics_url
from mock_providers.presets import with_preset_providers
from service.app import create_app, metrics_app
from service.http.server import DEFAULT_BOUNDS, RequestBounds, bounded_protocol, request_bounds
from service.mcp.tool_packages import RegisterTools
from service.observability.tracing import Tracing
from service.ops.admin_api import admin_app
from service.providers.catalogue import ProviderConfig
from service.runtime import Runtime
from service.settings import Settings

HOST = "127.0.0.1"
START_TIMEOUT = 15.0
POLL_SECONDS = 0.005

# Builds an MCP server's ASGI app from the stack's settings.
AppFactory = Callable[[Settings], Any]
# Wraps an app before it is served (e.g. to record every exchange): (name, app) -> app.
Wrap = Callable[[str, Any], Any]


def _ports_outside_the_ephemeral_range() -> range:
    """Ports the kernel never gives an outgoing connection: a port it picked for us (bind to 0)
    could be taken by a client's connect() before our server binds it again."""
    try:
        low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(20000, low) if low > 21000 else range(high + 1, 55000)


_PORTS = _ports_outside_the_ephemeral_range()
_handed_out: set[int] = set()  # never the same port twice to one test process


def free_port() -> int:
    """A loopback port nothing listens on, outside the ephemeral range, not handed out before."""
    for _ in range(500):
        port = _PORTS.start + secrets.randbelow(len(_PORTS))
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((HOST, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {_PORTS.start}-{_PORTS.stop - 1}")


class _Server(uvicorn.Server):
    """uvicorn's Server, told to exit by an event rather than by its 0.1 s polling loop: a test's
    teardown then waits only for uvicorn's own shutdown."""

    def __init__(self, config: uvicorn.Config, exit_requested: asyncio.Event) -> None:
        super().__init__(config)
        self.exit_requested = exit_requested

    async def main_loop(self) -> None:
        # on_tick(0) refreshes the Date header, as uvicorn's own loop does once a second.
        while not await self.on_tick(0):
            with anyio.move_on_after(1.0):
                await self.exit_requested.wait()
            if self.exit_requested.is_set():
                return


class ThreadedServers:
    """Several apps served from one background thread and event loop, on the HTTP protocol our
    servers run (service/http/server.py: request heads and bodies bounded by `bounds`)."""

    def __init__(self, apps: Sequence[tuple[Any, int]], bounds: RequestBounds = DEFAULT_BOUNDS) -> None:
        self._configs = [
            uvicorn.Config(app, host=HOST, port=port, log_config=None, http=bounded_protocol(bounds))
            for app, port in apps
        ]
        self._servers: list[_Server] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit_requested: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        ready = threading.Event()

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._exit_requested = asyncio.Event()
            self._servers = [_Server(config, self._exit_requested) for config in self._configs]
            ready.set()
            await asyncio.gather(*(s.serve() for s in self._servers))

        self._thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not (ready.is_set() and all(s.started for s in self._servers)):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("servers did not start")
            time.sleep(POLL_SECONDS)

    def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True
        if self._loop is not None and self._exit_requested is not None and not self._loop.is_closed():
            # RuntimeError: the loop closed meanwhile, so the servers are gone already.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._exit_requested.set)
        if self._thread is not None:
            self._thread.join(timeout=START_TIMEOUT)


def _unwrapped(name: str, app: Any) -> Any:
    return app


@dataclass
class DemoServers:
    """Both listeners of the demo: the MCP server (`apps["mcp"]`) and the dev AS + mock providers
    (`apps["providers"]`), with a fresh data dir. `overrides` are Settings fields; `providers`
    are added next to the demo's `mockhub`; `tools` adds tools before the servers start; `wrap`
    wraps each app as it is served. The demo (settings, secrets in the data dir) exists from
    construction, so its URLs can be registered elsewhere before the servers start."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    providers_port: int = field(default_factory=free_port)
    overrides: dict[str, Any] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: RegisterTools | None = None
    # Builds the MCP server's app from the demo's settings instead of `create_app`: an
    # integrator's own server with the connect flow embedded (docs/embedding.md).
    app: AppFactory | None = None
    # Also `github`, `google` and `slack` from their presets, served by the mocks at the real
    # APIs' paths (mock_providers/presets.py): the kit's default, so tools for them run unchanged.
    presets: bool = False
    wrap: Wrap = _unwrapped
    tracing: Tracing | None = None  # the MCP server's spans go there (default: OTEL_* variables)
    # The MCP server's clock (TTLs, expiry): a test moves it forward instead of sleeping.
    clock: Callable[[], float] = time.time
    demo: Demo = field(init=False)
    apps: dict[str, Any] = field(init=False, default_factory=dict)
    _threaded: ThreadedServers | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        # Metrics on a port of their own, as `serve` does by default: a free one, not 9464.
        overrides = {"metrics_port": free_port(), **self.overrides}
        if self.app is not None:
            # A server of your own may verify tokens with a JWKS URL it is given (FastMCP's
            # JWTVerifier needs one up front): name the dev AS's keys in the settings it gets.
            overrides.setdefault("auth_jwks_url", f"http://{HOST}:{self.providers_port}/jwks.json")
        self.demo = build_demo(HOST, self.port, self.providers_port, self.data_dir, **overrides)
        if self.presets:
            self.demo = with_preset_providers(self.demo)

    def start(self) -> DemoServers:
        settings = self.demo.settings
        if self.providers:
            settings = settings.replace(providers={**settings.providers, **self.providers})
            self.demo = replace(self.demo, settings=settings)
        if self.app is not None and self.tools is not None:
            raise ValueError("`tools` adds to our server; an `app` of your own registers its tools itself")
        self.apps = {
            "providers": create_mock_providers_app(self.demo.providers),
            "mcp": (
                self.app(settings)
                if self.app is not None
                else create_app(settings, Runtime(settings, tracing=self.tracing, clock=self.clock))
            ),
        }
        if self.tools is not None:
            self.tools(self.apps["mcp"].state.mcp_server, self.apps["mcp"].state.broker)
        served = [
            (self.wrap("providers", self.apps["providers"]), self.providers_port),
            (self.wrap("mcp", self.apps["mcp"]), self.port),
        ]
        if settings.metrics_port and self.app is None:  # an app of your own serves its own metrics
            self.apps["metrics"] = metrics_app(self.apps["mcp"].state.runtime)
            served.append((self.wrap("metrics", self.apps["metrics"]), settings.metrics_port))
        if settings.admin_port and self.app is None:  # the admin API, as `serve` runs it
            self.apps["admin"] = admin_app(self.apps["mcp"].state.runtime)
            served.append((self.wrap("admin", self.apps["admin"]), settings.admin_port))
        self._threaded = ThreadedServers(served, request_bounds(settings))
        self._threaded.start()
        return self

    def stop(self) -> None:
        if self._threaded is not None:
            self._threaded.stop()

    @property
    def mcp_url(self) -> str:
        return self.demo.settings.resource_url

    @property
    def public_url(self) -> str:
        return self.demo.settings.public_url

    @property
    def metrics_url(self) -> str:
        """`GET /metrics`: on its own port, or on the main one when `metrics_port` is 0."""
        settings = self.demo.settings
        return demo_metrics_url(settings) if settings.metrics_port else f"{self.public_url}/metrics"

    @property
    def mockhub(self) -> Any:
        return self.apps["providers"].state.mockhub

    @property
    def store_file(self) -> Path:
        return self.data_dir.resolve() / "store.sqlite3"
