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

uvicorn has no timeout on a request head: a connection that sends part of a head and then one
byte now and then stays open forever, and enough of them use up the process's file descriptors,
after which no client is served. `BoundedHeadH11Protocol` closes a connection whose head is not
complete `request_head_timeout_seconds` after the connection opened or its previous response
ended, and keeps at most `max_connections_awaiting_head` waiting (the longest-waiting one is
closed first), so a client that sends its head promptly is served while slow ones are open
(docs/deploy.md, "Slow clients"; nginx's `client_header_timeout` does the same in front of a
proxied replica). Not uvicorn's `limit_concurrency`: it counts the slow connections too
and answers every request 503 while they are open.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.settings import (
    MAX_CONNECTIONS_AWAITING_HEAD,
    REQUEST_HEAD_TIMEOUT_SECONDS,
    EventLoopChoice,
    event_loop_name,
)

# RFC 9110 §15.5.9, sent only to a connection that had begun a head (an idle keep-alive
# connection is closed silently: its client may be sending a request on it at that moment).
REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """For `asyncio.Runner(loop_factory=...)`; None is asyncio's own loop."""
    if event_loop_name(choice) == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


class BoundedHeadH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete within
    `head_timeout` seconds (of the connection opening, or of its previous response ending). At
    most `max_waiting` connections of one server wait for a head: past that the one waiting
    longest is closed, so slow heads cannot use up the file descriptors a prompt client needs.
    A connection waits from when it opens, or from the first byte of its next head.

    RFC 9112 §9.5: "Servers will usually have some timeout value beyond which they will no
    longer maintain an inactive connection"; RFC 9110 §15.5.9: 408 when "the server did not
    receive a complete request message within the time that it was prepared to wait".
    """

    head_timeout = REQUEST_HEAD_TIMEOUT_SECONDS
    max_waiting = MAX_CONNECTIONS_AWAITING_HEAD
    # The connections of one server waiting for a head, oldest first (`with_head_timeout` gives
    # each server class its own).
    waiting: OrderedDict[BoundedHeadH11Protocol, None] = OrderedDict()
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()
        self._queue_for_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self not in self.waiting:
            self._queue_for_head()  # a kept-alive connection has begun its next head

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a head arrived (or the connection ended)
            self._stop_waiting()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # An idle kept-alive connection is not queued (uvicorn's keep-alive timeout closes it,
        # and a proxy may be sending its next request on it): only from its first byte on.
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        # mutant: server.head_timeout none
        self._head_timer = self.loop.call_later(self.head_timeout, self._close_waiting)

    def _queue_for_head(self) -> None:
        self.waiting[self] = None
        # mutant: server.max_waiting_heads
        while len(self.waiting) > self.max_waiting:
            next(iter(self.waiting))._close_waiting()

    def _stop_waiting(self) -> None:
        self.waiting.pop(self, None)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _close_waiting(self) -> None:
        self._stop_waiting()
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            return
        begun, _closed = self.conn.trailing_data
        if begun:
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


def with_head_timeout(
    seconds: float = REQUEST_HEAD_TIMEOUT_SECONDS, max_waiting: int = MAX_CONNECTIONS_AWAITING_HEAD
) -> type[BoundedHeadH11Protocol]:
    """A protocol class for uvicorn's `http` option: one per server, with these bounds."""
    attributes = {"head_timeout": seconds, "max_waiting": max_waiting, "waiting": OrderedDict()}
    return type("BoundedHeadH11Protocol", (BoundedHeadH11Protocol,), attributes)
