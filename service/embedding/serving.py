"""Serving an embedding server as `mcp-url-connect serve` serves ours.

A host that embeds the connect flow (service/embedding/sdk.py) and starts plain `uvicorn.run`
has no bound on how long a request head or body may take, nor on how many connections wait for
one: a few hundred slow clients then hold every file descriptor. `run_server` runs the host's app
on the same server as `serve` (service/http/server.py: the bounded h11 protocol, the chosen event
loop, keep-alive and graceful shutdown from the settings) with our redacting logging.
"""

from __future__ import annotations

import asyncio
import logging

import uvicorn
from starlette.types import ASGIApp

from service.http.server import loop_factory, request_bounds, server_config
from service.observability.logs import configure_logging
from service.settings import Settings, event_loop_name

logger = logging.getLogger(__name__)


def run_server(app: ASGIApp, settings: Settings) -> None:
    """Serve `app` on `settings.host`:`settings.port` until SIGINT or SIGTERM, as `serve` serves
    its own app: request heads and bodies bounded in time and in number
    (`request_head_timeout_seconds`, `request_body_timeout_seconds`,
    `max_connections_awaiting_head`), a request that frames its body twice refused, the h11
    parser, `event_loop`, `keep_alive_seconds`, `shutdown_grace_seconds`; logs through our
    redacting handler (`log_level`, `log_format`)."""
    configure_logging(settings.log_level, settings.log_format, settings.replica_id)
    config = server_config(
        app,
        settings.host,
        settings.port,
        keep_alive=settings.keep_alive_seconds,
        grace=settings.shutdown_grace_seconds,
        bounds=request_bounds(settings),
    )
    logger.info("event loop: %s", event_loop_name(settings.event_loop))
    with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
        runner.run(uvicorn.Server(config).serve())
