"""SSE priming events, the `retry` field and replay after a dropped connection (2025-11-25 sessions),
on the app `create_app` serves `/mcp` with (`service.app.mcp_http_app`), in process."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from mcp.server.streamable_http import EventMessage
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import JSONRPCNotification, JSONRPCResponse

from service.app import mcp_http_app
from service.mcp.sdk.sse_resumption import RETRY_INTERVAL_MS, SessionEventStore
from service.mcp.server import ObservedMCPServer
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing

ORIGIN = "http://127.0.0.1:8000"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
NO_REBINDING_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)


def sse_events(body: str) -> list[dict[str, str]]:
    """An SSE body as its events, each a dict of its fields (`id`, `data`, `retry`, `event`)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        if fields:
            events.append(fields)
    return events


@contextlib.asynccontextmanager
async def served() -> AsyncIterator[httpx.AsyncClient]:
    server = ObservedMCPServer("t", metrics=Metrics(), tracing=Tracing())

    @server.tool()
    async def echo(text: str) -> str:
        return text

    app, _sessions = mcp_http_app(server, NO_REBINDING_CHECK)
    async with (
        server.session_manager.run(),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ORIGIN) as client,
    ):
        yield client


async def open_session(client: httpx.AsyncClient) -> str:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    opened = await client.post(
        "/mcp", headers=HEADERS, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    )
    session = opened.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await client.post("/mcp", headers={**HEADERS, "Mcp-Session-Id": session}, json=initialized)
    return session


async def echo_call(client: httpx.AsyncClient, session: str, text: str, version: str) -> list[dict[str, str]]:
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }
    headers = {**HEADERS, "Mcp-Session-Id": session, "Mcp-Protocol-Version": version}
    response = await client.post("/mcp", headers=headers, json=call)
    assert response.headers["content-type"].startswith("text/event-stream")
    return sse_events(response.text)


async def reconnect(client: httpx.AsyncClient, session: str, last_event_id: str) -> list[dict[str, str]]:
    """GET with Last-Event-ID, as a client resuming a dropped stream does: what it replays. The
    stream must end by itself (httpx's ASGITransport waits for the whole body), as one whose
    response was already sent does."""
    headers = {
        "Accept": "text/event-stream",
        "Mcp-Session-Id": session,
        "Mcp-Protocol-Version": "2025-11-25",
        "Last-Event-ID": last_event_id,
    }
    with anyio.fail_after(5):
        response = await client.get("/mcp", headers=headers)
    assert response.status_code == 200, response.text
    return sse_events(response.text)


async def test_each_sse_stream_opens_with_a_priming_event_that_carries_retry() -> None:
    """MCP 2025-11-25, basic/transports, "Sending Messages to the Server" 6."""
    async with served() as client:
        session = await open_session(client)
        events = await echo_call(client, session, "hello", "2025-11-25")
    priming, answer = events
    assert priming["data"] == "" and priming["id"] and priming["retry"] == str(RETRY_INTERVAL_MS)
    assert "hello" in answer["data"] and int(answer["id"]) > int(priming["id"])


async def test_a_client_before_2025_11_25_gets_no_priming_event() -> None:
    # It could not parse an event with empty data (the SDK's own rule, kept).
    async with served() as client:
        session = await open_session(client)
        events = await echo_call(client, session, "hello", "2025-06-18")
    assert len(events) == 1 and "hello" in events[0]["data"]


async def test_a_dropped_stream_is_replayed_from_its_last_event_id_within_its_own_session() -> None:
    async with served() as client:
        alice, bob = await open_session(client), await open_session(client)
        alice_priming, _ = await echo_call(client, alice, "for-alice", "2025-11-25")
        bob_priming, _ = await echo_call(client, bob, "for-bob", "2025-11-25")
        # Both sessions named their stream "2" (the request id); each replay stays in its session.
        for session, priming, text in ((alice, alice_priming, "for-alice"), (bob, bob_priming, "for-bob")):
            replayed = await reconnect(client, session, priming["id"])
            assert len(replayed) == 1 and text in replayed[0]["data"]


def response(n: int) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=n, result={"n": n})


def progress(n: int) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params={"progress": n})


async def replay(store: SessionEventStore, last: str) -> tuple[str | None, list[tuple[str | None, Any]]]:
    sent: list[tuple[str | None, Any]] = []

    async def collect(event: EventMessage) -> None:
        sent.append((event.event_id, event.message))

    return await store.replay_events_after(last, collect), sent


async def test_the_store_replays_later_events_of_the_same_stream_only() -> None:
    store = SessionEventStore()
    first = await store.store_event("a", None)  # a priming event: a cursor, never replayed
    await store.store_event("a", progress(1))
    await store.store_event("b", progress(2))
    last = await store.store_event("a", progress(3))
    stream, sent = await replay(store, first)
    # The stream has no response yet: the SDK goes on sending its messages on this connection.
    assert stream == "a" and [m.params["progress"] for _, m in sent] == [1, 3]
    assert sent[-1][0] == last
    assert await replay(store, last) == ("a", [])


async def test_a_stream_that_ended_with_its_response_is_not_kept_open() -> None:
    store = SessionEventStore()
    first = await store.store_event("7", None)
    await store.store_event("7", progress(1))
    last = await store.store_event("7", response(7))
    stream, sent = await replay(store, first)
    assert stream is None and [m for _, m in sent] == [progress(1), response(7)]
    assert await replay(store, last) == (None, [])


@pytest.mark.parametrize(
    "last_event_id", ["", "0", "99", "-1", "1.0", "x", "\u0663", "9" * 40]
)  # \u0663: a digit, not ASCII
async def test_the_store_ignores_ids_it_never_issued(last_event_id: str) -> None:
    store = SessionEventStore()
    await store.store_event("a", progress(1))
    await store.store_event("a", progress(2))
    assert await replay(store, last_event_id) == (None, [])


async def test_the_store_keeps_only_its_last_events() -> None:
    store = SessionEventStore(max_events=3)
    ids = [await store.store_event("a", progress(n)) for n in range(5)]
    assert store.retained == 3
    assert await replay(store, ids[1]) == (None, [])  # dropped: nothing to resume from
    stream, sent = await replay(store, ids[2])
    assert stream == "a" and [m.params["progress"] for _, m in sent] == [3, 4]


async def test_the_store_holds_a_bounded_number_of_bytes_whatever_the_client_sends() -> None:
    # A client chooses its request ids (the stream's name) and they come back in the response: a
    # session sending huge ids must not pin their bytes (the count limit alone would keep 32 of them).
    store = SessionEventStore(max_bytes=64 * 1024)
    huge_id = "9" * 100_000
    for _ in range(5):
        await store.store_event(huge_id, None)
        await store.store_event(huge_id, JSONRPCResponse(jsonrpc="2.0", id=huge_id, result={}))
    assert store.retained_bytes <= 64 * 1024
    small = await store.store_event("1", progress(1))
    assert store.retained_bytes <= 64 * 1024 and store.retained >= 1
    stream, sent = await replay(store, small)
    assert stream == "1" and sent == []  # what fits is still replayable


def test_an_empty_store_still_counts_as_a_store() -> None:
    # The SDK tests `if not self._event_store`: an empty store must not read as none at all.
    assert bool(SessionEventStore())
