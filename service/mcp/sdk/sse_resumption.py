"""Resumable SSE streams for 2025-11-25 sessions: the priming event, the `retry` field, a bounded replay.

MCP 2025-11-25, basic/transports, "Sending Messages to the Server" item 6: a server that opens an
SSE stream SHOULD first send an event with an id and empty data, priming the client to reconnect
with `Last-Event-ID`; a `retry` field tells the client how long to wait before it does. The SDK's
transport sends both once it has an `EventStore` (and a retry interval); this module supplies one.

One store per session, not one per server: the SDK names a POST stream after the client's JSON-RPC
request id, which every session reuses ("1", "2", ...), so a shared store would mix the streams of
different sessions, and of different users, on replay ("Resumability and Redelivery": the server
MUST NOT replay messages that would have been delivered on a different stream). The SDK takes one
store for all its sessions, so `install` gives each session's transport a store of its own as the
session manager admits it (`SessionManager`, service/mcp/sdk/hooks.py). The store lives and dies with
its session, on the replica that holds it (session affinity routes the reconnecting GET there).

Bounded: a session keeps only its last `MAX_EVENTS` events. A client that reconnects with an id
older than that gets an empty stream that ends, as it would without resumability; so does one
whose stream had already ended with its response, once the events after its id are replayed.
The 2026-07-28 revision has no resumable streams (transports, "Resumable SSE streams via
`Last-Event-ID` are not supported"); the SDK mints no priming event on it.
"""

from __future__ import annotations

from collections import OrderedDict

from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse

from service.mcp.sdk.hooks import SessionManager

# The `retry` field (milliseconds) sent with each priming event: how long a client whose
# connection dropped waits before it reconnects with `Last-Event-ID`.
RETRY_INTERVAL_MS = 1000
# Events one session keeps for replay (tool results here are small JSON documents), and the bytes
# they may hold: a client picks its request ids (up to the 4 MiB body limit) and each one is kept
# twice, as the stream's name and in the response, so a count alone would let one session pin
# gigabytes. What does not fit is dropped, oldest first; its stream then replays as unknown.
MAX_EVENTS = 32
MAX_BYTES = 256 * 1024


class SessionEventStore(EventStore):
    """One session's recent SSE events, for replay after a dropped connection.

    Event ids are a counter: unique within the session (all the spec asks), and meaningful only
    to this session's store, which only requests the SDK has matched to the session's owner reach.
    """

    def __init__(self, max_events: int = MAX_EVENTS, max_bytes: int = MAX_BYTES) -> None:
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._next_id = 0
        self._bytes = 0
        # event id -> (stream, message, size); None is a priming event (a cursor, nothing to replay).
        self._events: OrderedDict[int, tuple[StreamId, JSONRPCMessage | None, int]] = OrderedDict()

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._next_id += 1
        size = len(stream_id) + (len(message.model_dump_json(by_alias=True)) if message is not None else 0)
        self._events[self._next_id] = (stream_id, message, size)
        self._bytes += size
        while self._events and (len(self._events) > self._max_events or self._bytes > self._max_bytes):
            _, (_, _, dropped) = self._events.popitem(last=False)
            self._bytes -= dropped
        return str(self._next_id)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send the events of `last_event_id`'s stream that came after it. Returns the stream,
        for the SDK to go on sending its new messages on this connection; None when it is
        unknown (never issued by this session, or already dropped) or finished."""
        last = _parse_id(last_event_id)
        if last is None or last not in self._events:
            return None
        stream_id, _, _ = self._events[last]
        # A snapshot: sending awaits, and the session may store events meanwhile.
        stream = [(i, m) for i, (s, m, _) in self._events.items() if s == stream_id]
        for event_id, message in stream:
            if event_id > last and message is not None:
                await send_callback(EventMessage(message, str(event_id)))
        # A POST stream ends with its request's response, and nothing comes after it: end the
        # replay there (transports, "After the JSON-RPC response has been sent, the server
        # SHOULD terminate the SSE stream") instead of holding a connection, one of the user's
        # requests in flight (service/mcp/sdk/session_limits.py), open for messages that cannot come.
        if any(isinstance(m, JSONRPCResponse | JSONRPCError) for _, m in stream):
            return None
        return stream_id

    @property
    def retained_bytes(self) -> int:
        return self._bytes

    @property
    def retained(self) -> int:
        # Not __len__: the SDK tests the store for truth (`if not self._event_store`).
        return len(self._events)


def _parse_id(text: str) -> int | None:
    # The client's Last-Event-ID header: only our own decimal ids are meaningful.
    if not (0 < len(text) <= 20 and text.isascii() and text.isdigit()):
        return None
    return int(text)


def install(manager: SessionManager, max_events: int = MAX_EVENTS) -> None:
    """Give each session `manager` admits its own `SessionEventStore` (before it serves)."""
    # mutant: sse_resumption.store_per_session "lambda: SessionEventStore(max_events)" -> \
    #   "(lambda shared: lambda: shared)(SessionEventStore(max_events))"
    manager.give_each_session_a_store(lambda: SessionEventStore(max_events))
