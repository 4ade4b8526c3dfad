"""How the servers run: the event loop (setting `event_loop`), the HTTP parser, the bounds on
request heads.

By default uvloop (libuv): measured with bench/flow.py on a 2-core machine, it cuts the server's
CPU per request by 10-20 % against asyncio's own loop (docs/performance.md). `auto` means what
uvicorn's `--loop auto` means: uvloop where it is installed (it is a dependency everywhere but on
Windows, where it has no build), else asyncio's. Naming `uvloop` where it is not installed is a
configuration error (`Settings.require_safe_to_serve`), not a silent fallback; the choice and
the bounds below are settings (service/settings.py owns their defaults).

The HTTP parser stays h11 (uvicorn's pure-Python one), not uvicorn's faster httptools: httptools
accepts header fields of any size (h11 stops at 16 KiB) and keeps trailing whitespace in field
values, which RFC 9110 §5.5 says a recipient excludes (docs/performance.md, "Tried and not taken").

uvicorn has no timeout on a request: a connection that sends part of a head, or a head and then a
body one byte now and then, stays open forever, and enough of them use up the process's file
descriptors, after which no client is served. `BoundedRequestH11Protocol` closes a connection
whose head is not complete `request_head_timeout_seconds` after the connection opened or its
previous response ended, or whose body is not complete `request_body_timeout_seconds` after its
head, and keeps at most `max_connections_awaiting_head` waiting for either (the longest-waiting
one is closed first; never more than half the process's open-file limit), so a client that sends
its request promptly is served while slow ones are open (docs/deploy.md, "Slow clients"; nginx's
`client_header_timeout` and buffered bodies do the same in front of a proxied replica). Not
uvicorn's `limit_concurrency`: it counts the slow connections too and answers every request 503
while they are open. The same protocol refuses a request that gives its body's length twice
(RFC 9112 §6.1).

`server_config` is how every server of ours is configured (`serve`, `demo`, and `run_server` for
an embedding server: service/embedding/serving.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Literal

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.settings import (
    MAX_CONNECTIONS_AWAITING_HEAD,
    REQUEST_BODY_TIMEOUT_SECONDS,
    REQUEST_HEAD_TIMEOUT_SECONDS,
    EventLoopChoice,
    Settings,
    event_loop_name,
)

if sys.platform != "win32":
    import resource

logger = logging.getLogger(__name__)

# RFC 9110 §15.5.9, sent only to a connection that had begun a request and has no answer begun
# (an idle keep-alive connection is closed silently: its client may be sending a request on it at
# that moment).
REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For `asyncio.Runner(loop_factory=...)`; None is asyncio's own loop."""
    if event_loop_name(choice) == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def require_one_body_framing(fields: Iterable[tuple[bytes, bytes]]) -> None:
    """Refuse a request that declares its body's length twice, as h11 refuses a malformed one.

    RFC 9112 §6.1: "A server MAY reject a request that contains both Content-Length and
    Transfer-Encoding or process such a request in accordance with the Transfer-Encoding alone.
    Regardless, the server MUST close the connection after responding to such a request to avoid
    the potential attacks" (a proxy that frames by Content-Length would pass on, inside one body,
    a second request that this server answers: §11.2, request smuggling). uvicorn answers the
    `RemoteProtocolError` with 400 and closes the connection.
    """
    names = {name for name, _ in fields}  # h11 gives names in lower case
    # mutant: server.one_body_framing
    if b"content-length" in names and b"transfer-encoding" in names:
        raise h11.RemoteProtocolError("Content-Length and Transfer-Encoding together", 400)


class _OneFramingConnection(h11.Connection):
    """h11's server side, with `require_one_body_framing` on each request head."""

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        event = super().next_event()
        if isinstance(event, h11.Request):
            require_one_body_framing(event.headers)
        return event


class BoundedRequestH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete within
    `head_timeout` seconds (of the connection opening, or of its previous response ending), or
    whose body is not complete within `body_timeout` seconds of its head. At most `max_waiting`
    connections of one server wait for a head or a body: past that the one waiting longest is
    closed, so slow clients cannot use up the file descriptors a prompt client needs. A
    connection waits from when it opens, or from the first byte of its next head.

    RFC 9112 §9.5: "Servers will usually have some timeout value beyond which they will no
    longer maintain an inactive connection"; RFC 9110 §15.5.9: 408 when "the server did not
    receive a complete request message within the time that it was prepared to wait".
    """

    head_timeout = REQUEST_HEAD_TIMEOUT_SECONDS
    body_timeout = REQUEST_BODY_TIMEOUT_SECONDS
    max_waiting = MAX_CONNECTIONS_AWAITING_HEAD
    # The connections of one server waiting for a head or a body, oldest first (`bounded_protocol`
    # gives each server class its own).
    waiting: OrderedDict[BoundedRequestH11Protocol, None] = OrderedDict()
    _deadline: asyncio.TimerHandle | None = None
    _awaiting: Literal["head", "body"] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        size = self.config.h11_max_incomplete_event_size
        self.conn = _OneFramingConnection(h11.SERVER, *([] if size is None else [size]))
        super().connection_made(transport)
        self._await_head()
        self._queue()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting == "head" and self not in self.waiting:
            self._queue()  # a kept-alive connection has begun its next head

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            self._stop_waiting()  # closed, or handed to the WebSocket protocol (an upgrade)
        elif state is h11.SEND_BODY:
            if self._awaiting != "body":
                self._stop_waiting()  # the head is complete
                self._await_body()
        elif state is h11.IDLE:
            if self._awaiting != "head":
                # Between requests (after its response, or its body if the answer came first): an
                # idle kept-alive connection is left to uvicorn's keep-alive timeout, and a proxy
                # may be sending its next request on it, so it waits in line from its first byte.
                self._stop_waiting()
                self._await_head()
        else:
            self._stop_waiting()  # the request is complete, or the connection ended

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        # mutant: server.head_timeout none
        self._deadline = self.loop.call_later(self.head_timeout, self._time_out)
        self._awaiting = "head"

    def _await_body(self) -> None:
        # mutant: server.body_timeout none
        self._deadline = self.loop.call_later(self.body_timeout, self._time_out)
        self._awaiting = "body"
        # mutant: server.body_waiters_counted
        self._queue()

    def _queue(self) -> None:
        self.waiting[self] = None
        # mutant: server.max_waiting_heads
        while len(self.waiting) > self.max_waiting:
            next(iter(self.waiting))._time_out()

    def _stop_waiting(self) -> None:
        self.waiting.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._awaiting = None

    def _time_out(self) -> None:
        awaiting, state = self._awaiting, self.conn.their_state
        self._stop_waiting()
        if self.transport.is_closing():
            return
        if awaiting == "head" and state is h11.IDLE:
            begun, _closed = self.conn.trailing_data
            if begun:
                self.transport.write(REQUEST_TIMEOUT)
        elif awaiting == "body" and state is h11.SEND_BODY:
            if self.conn.our_state is h11.SEND_RESPONSE:  # no answer begun
                self.transport.write(REQUEST_TIMEOUT)
            if self.cycle is not None and not self.cycle.response_complete:
                # The app learns the client is gone now, as uvicorn's `connection_lost` would
                # tell it a moment later (and whatever it sends is dropped, not written).
                self.cycle.disconnected = True
                self.cycle.message_event.set()
        else:
            return
        self.transport.close()


@dataclasses.dataclass(frozen=True)
class RequestBounds:
    """How long a request's head and body may take, and how many connections may wait for them."""

    head_timeout: float = REQUEST_HEAD_TIMEOUT_SECONDS
    body_timeout: float = REQUEST_BODY_TIMEOUT_SECONDS
    max_waiting: int = MAX_CONNECTIONS_AWAITING_HEAD


def request_bounds(settings: Settings) -> RequestBounds:
    return RequestBounds(
        settings.request_head_timeout_seconds,
        settings.request_body_timeout_seconds,
        settings.max_connections_awaiting_head,
    )


DEFAULT_BOUNDS = RequestBounds()


def waiting_within_file_limit(max_waiting: int) -> int:
    """`max_waiting`, or half the process's open-file limit (`ulimit -n`) where that is lower: the
    other half stays for prompt clients, streams, the store and outbound connections. A
    connection waiting for a request holds a descriptor, and past the limit the server cannot
    accept (the clients get their connection reset), so a bound over it bounds nothing."""
    if sys.platform == "win32":  # no such limit to read; the bound stays as set
        return max_waiting
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    half = max(1, soft // 2) if soft != resource.RLIM_INFINITY else max_waiting
    # mutant: server.waiting_within_file_limit
    if half < max_waiting:
        logger.warning(
            "at most %d connections wait for a request, not %d (MCPUC_MAX_CONNECTIONS_AWAITING_HEAD): "
            "half the open-file limit of %d; raise `ulimit -n` for more",
            half,
            max_waiting,
            soft,
        )
        return half
    return max_waiting


def bounded_protocol(bounds: RequestBounds = DEFAULT_BOUNDS) -> type[BoundedRequestH11Protocol]:
    """A protocol class for uvicorn's `http` option: one per server, with these bounds."""
    attributes = {
        "head_timeout": bounds.head_timeout,
        "body_timeout": bounds.body_timeout,
        "max_waiting": waiting_within_file_limit(bounds.max_waiting),
        "waiting": OrderedDict(),
    }
    return type("BoundedRequestH11Protocol", (BoundedRequestH11Protocol,), attributes)


def server_config(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    keep_alive: float = 5.0,
    grace: float = 20.0,
    bounds: RequestBounds = DEFAULT_BOUNDS,
) -> uvicorn.Config:
    """uvicorn's configuration for one of our servers.

    log_config=None: uvicorn's loggers propagate to the root handler and its redacting filter.
    `grace` (timeout_graceful_shutdown): after SIGTERM, requests in flight get that long to
    finish. h11 by class: "auto" would switch to httptools wherever something installs it, which
    accepts header fields of any size; ours bounds how long, and how many, connections wait for a
    request.
    """
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        http=bounded_protocol(bounds),
        lifespan="on",
        timeout_keep_alive=int(keep_alive),
        timeout_graceful_shutdown=int(grace),
    )
