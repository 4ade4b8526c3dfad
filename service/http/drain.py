"""Stopping without cutting calls: what a replica does between SIGTERM and exit.

uvicorn, on SIGTERM, stops accepting connections and waits for the open ones to close before it
runs the lifespan shutdown. The MCP standalone GET streams (2025-11-25) never close by
themselves, so uvicorn would wait out its whole grace period, cancel every request still
running (tool calls included: the client sees -32000 "Connection closed") and log "ASGI callable
returned without completing response" once per stream. A :class:`Drain` orders the stop instead:

1. ``begin()``: ``/readyz`` answers 503 from now on (an orchestrator stops routing here), and
   every response says ``Connection: close``, so the proxy's keep-alive connections end after
   their answer (see service/ops/cli/serving.py for why idle ones are left to the proxy to close);
2. ``wait_idle(seconds)``: every request except the GET streams finishes (tool calls included),
   for at most the grace period;
3. ``close_sessions()``: the 2025-11-25 sessions are terminated. Their GET streams end like a
   normal response, so uvicorn's connections close and its shutdown proceeds at once. A client
   that comes back with the session id gets 404 (from nginx, or from the replica that does not
   hold it) and re-initializes, as the 2025-11-25 transport prescribes. From the moment this
   step starts, this replica answers that 404 itself to any request naming a session: a stream
   that just ended frees a kept-alive connection, which the proxy may reuse at once for another
   session's call here; the SDK would accept the call and then fail it with a 500 when its
   session is terminated under it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp_types import INVALID_REQUEST
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from service.http.jsonrpc_error import http_error_body
from service.urls import MCP_PATH

logger = logging.getLogger(__name__)

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode()  # as ASGI names headers
# What the SDK answers for a session it does not hold (and nginx for a replica that is gone).
SESSION_GONE = http_error_body(INVALID_REQUEST, "Session not found")
# On every response while draining: uvicorn then closes the connection after it.
CONNECTION_CLOSE = (b"connection", b"close")


def is_event_stream(scope: Scope) -> bool:
    """The 2025-11-25 standalone stream (``GET /mcp``): open for the session's lifetime, so it is
    not a request to wait for."""
    return scope.get("method") == "GET" and scope.get("path") == MCP_PATH


def names_a_session(scope: Scope) -> bool:
    """A request to the MCP endpoint that carries an ``Mcp-Session-Id``."""
    headers = scope.get("headers", ())
    return scope.get("path") == MCP_PATH and any(name == _SESSION_HEADER for name, _ in headers)


class Drain:
    """Counts requests in flight and stops in order; the app's one pass over each request
    (service/http/request_pass.py) asks it for `refusal`, runs the request through `serve`, and adds
    `CONNECTION_CLOSE` to every response while `draining`.

    ``sessions`` returns the SDK session manager's live transports, by session id.
    """

    def __init__(self, sessions: Callable[[], Mapping[str, StreamableHTTPServerTransport]]) -> None:
        self._sessions = sessions
        self._in_flight = 0
        self._streams = 0
        # Made only while something waits for the requests in flight to end: most requests start
        # and end with nobody waiting, and an event per request costs more than the count.
        self._idle: anyio.Event | None = None
        self.draining = False
        self.closing_sessions = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def streams(self) -> int:
        """GET streams open now (each holds one connection)."""
        return self._streams

    def refusal(self, scope: Scope) -> Response | None:
        """The 404 for a request naming a session once the sessions are closing, or None."""
        if self.closing_sessions and names_a_session(scope):
            return Response(SESSION_GONE, status_code=404, media_type="application/json")
        return None

    async def serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """`app` on this HTTP request, counted: a GET stream among `streams`, anything else among
        the requests in flight that `wait_idle` waits for."""
        if is_event_stream(scope):
            self._streams += 1
            try:
                await app(scope, receive, send)
            finally:
                self._streams -= 1
            return
        self._enter()
        try:
            await app(scope, receive, send)
        finally:
            self._leave()

    def _enter(self) -> None:
        self._in_flight += 1

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None

    async def _until_idle(self) -> None:
        while self._in_flight:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def begin(self) -> None:
        """Readiness goes 503 from here on."""
        if not self.draining:
            logger.info("draining: %d request(s) in flight", self._in_flight)
        self.draining = True

    async def wait_idle(self, seconds: float) -> bool:
        """Until no request (other than the GET streams) is in flight, for at most `seconds`;
        True if that happened in time."""
        with anyio.move_on_after(seconds):
            await self._until_idle()
            return True
        logger.warning("draining: %d request(s) still in flight after %.0f s", self._in_flight, seconds)
        return False

    async def close_sessions(self, settle_seconds: float = 1.0) -> int:
        """Terminate every 2025-11-25 session held here (their GET streams end cleanly). Requests
        naming a session get 404 from now on; those already in flight get `settle_seconds` to end."""
        self.closing_sessions = True
        with anyio.move_on_after(settle_seconds):
            await self._until_idle()
        transports = list(self._sessions().values())
        for transport in transports:
            await transport.terminate()
        if transports:
            logger.info("draining: closed %d session(s)", len(transports))
        return len(transports)
