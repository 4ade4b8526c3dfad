"""How the command's servers run: uvicorn servers in one process, stopped together by SIGINT or
SIGTERM, each draining first when it serves a replica (service/http/drain.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Iterator
from contextvars import ContextVar

import uvicorn
from starlette.types import ASGIApp

from service.http.drain import Drain
from service.http.server import DEFAULT_BOUNDS, RequestBounds, loop_factory, server_config
from service.ops.cli.preamble import CommandFailed
from service.settings import EventLoopChoice, event_loop_name

# Which server a log line comes from, when one process runs two (`demo`); set per server task.
_SERVER_LABEL: ContextVar[str] = ContextVar("server_label", default="")


class Server(uvicorn.Server):
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
) -> Server:
    # With a `drain`, tool calls on 2025-11-25 sessions get the grace period too (service/http/drain.py).
    return Server(server_config(app, host, port, keep_alive=keep_alive, grace=grace, bounds=bounds), drain)


async def _serve_labelled(label: str, server: Server) -> bool:
    """Run one server; False if it failed (uvicorn exits the process when it cannot start)."""
    _SERVER_LABEL.set(label)
    try:
        await server.serve()
    except SystemExit:
        return False
    return server.started


async def serve_until_stopped(servers: dict[str, Server]) -> int:
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


def run_until_stopped(servers: dict[str, Server], event_loop: EventLoopChoice = "auto") -> int:
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


def require_free_ports(host: str, options: dict[int, str]) -> None:
    """Refuse, in one line, to start on a port already taken (before any banner or server)."""
    for port, option in options.items():
        if not port_is_free(host, port):
            raise CommandFailed(f"port {port} on {host} is already in use; choose another with {option}")
