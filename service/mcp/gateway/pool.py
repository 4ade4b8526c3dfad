"""Sessions to remote MCP servers, one per (server, user) on this replica, never shared.

A session is the SDK's `Client` over streamable HTTP (service/mcp/gateway/transport.py), opened
on a user's first call and kept for the next ones: the handshake costs a round trip or two, a call
on an open session one. Each runs in a task of the pool's task group (the app's lifespan), and
ends when it has been unused for the server's `session_idle_seconds`, when the gateway closes it
(its token was refused, the user disconnected), when its connection breaks, or at shutdown.

Bounds, per server and replica: `max_sessions` sessions (the least recently used idle one is
closed to make room; with none idle a new one is refused as busy), `max_calls` calls in flight,
and `max_calls_per_user` per user. A call over a bound is refused at once rather than queued: a
slow downstream must not turn into a queue that holds this replica's requests.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Implementation, Tool, ToolListChangedNotification

from service.errors import ProviderApiError
from service.mcp.gateway.transport import UserToken, downstream_http
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from service.providers.protected_resource import Challenge
from token_store import UserRef

logger = logging.getLogger(__name__)

REAP_SECONDS = 5.0  # how often idle sessions are looked for
TOOLS_FRESH_SECONDS = 60.0  # a session's tool list is read again when older than this
CLIENT_INFO = Implementation(name="mcp-url-connect", version="1")  # all a downstream learns of us


class Busy(ProviderApiError):
    """A bound of the pool was reached: the call is refused now, not queued."""


class SessionNotOpened(ProviderApiError):
    """The downstream did not open a session; `challenge` is its Bearer challenge, if it sent one
    (a 401 to the handshake: the token was refused)."""

    def __init__(self, message: str, challenge: Challenge | None) -> None:
        super().__init__(message)
        self.challenge = challenge


class PooledSession:
    """One user's session to one remote MCP server."""

    def __init__(self, provider: ProviderConfig, user: UserRef, token: UserToken, now: float) -> None:
        self.provider = provider
        self.user = user
        self.token = token
        self.client: Client | None = None
        self.failure: BaseException | None = None
        self.closed = False
        self.last_used = now
        self.in_flight = 0
        self.calls = anyio.CapacityLimiter(provider.max_calls_per_user)
        self.tools: list[Tool] | None = None
        self.offered_names: tuple[str, ...] | None = None  # our names for `tools` (the gateway's)
        self.tools_read_at = -math.inf
        self.ready = anyio.Event()
        self._closing = anyio.Event()
        self._scope = anyio.CancelScope()

    async def run(self, outbound: OutboundHttp, forget: Callable[[PooledSession], None]) -> None:
        """Open the session, hold it until `close`, then end it (DELETE, RFC: MCP transports)."""
        try:
            with self._scope:
                http = downstream_http(self.provider, outbound, self.token)
                transport = streamable_http_client(
                    self.provider.url, http_client=http, max_sse_event_size=self.provider.max_result_bytes
                )
                async with (
                    http,
                    Client(
                        transport,
                        mode="auto",
                        cache=None,
                        client_info=CLIENT_INFO,
                        read_timeout_seconds=self.provider.call_timeout_seconds,
                        message_handler=self._on_message,
                    ) as client,
                ):
                    self.client = client
                    self.ready.set()
                    await self._closing.wait()
        except Exception as exc:  # the handshake or the connection failed: the next call opens anew
            self.failure = exc
            logger.info("gateway: session to %s ended: %s", self.provider.name, type(exc).__name__)
        finally:
            self.closed = True
            self.ready.set()
            forget(self)

    def close(self) -> None:
        self.closed = True
        self._closing.set()
        if self.client is None:
            self._scope.cancel()  # still in the handshake

    async def _on_message(self, message: Any) -> None:
        """A downstream that says its tool list changed gets it read again on the next use."""
        if isinstance(message, ToolListChangedNotification):
            self.tools_read_at = -math.inf


class DownstreamSessions:
    """The pool: sessions by (server, user), and the per-server bounds."""

    def __init__(self, outbound: OutboundHttp, clock: Callable[[], float] = anyio.current_time) -> None:
        self._outbound = outbound
        self._clock = clock
        self._sessions: dict[tuple[str, UserRef], PooledSession] = {}
        self._limits: dict[str, anyio.CapacityLimiter] = {}
        self._tasks: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[DownstreamSessions]:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            tasks.start_soon(self._reap)
            try:
                yield self
            finally:
                for session in list(self._sessions.values()):
                    session.close()
                self._tasks = None
                tasks.cancel_scope.cancel()

    def count(self, provider: str) -> int:
        return sum(1 for p, _ in self._sessions if p == provider)

    def find(self, provider: str, user: UserRef) -> PooledSession | None:
        session = self._sessions.get((provider, user))
        return session if session is not None and not session.closed else None

    async def open(self, provider: ProviderConfig, user: UserRef, access_token: str) -> PooledSession:
        """The user's open session to `provider`, opened now if needed, carrying `access_token`."""
        session = self.find(provider.name, user)
        if session is None:
            if self._tasks is None:
                raise ProviderApiError(f"{provider.display_name}: the gateway is not running")
            self._make_room(provider)
            session = PooledSession(provider, user, UserToken(access_token), self._clock())
            self._sessions[(provider.name, user)] = session
            self._tasks.start_soon(session.run, self._outbound, self._forget)
        session.token.access_token = access_token
        with anyio.move_on_after(provider.call_timeout_seconds):
            await session.ready.wait()
        if session.client is None or session.closed:
            session.close()
            failure = f" ({type(session.failure).__name__})" if session.failure else " in time"
            raise SessionNotOpened(
                f"{provider.display_name} did not open a session{failure}", session.token.take_challenge()
            )
        return session

    def close(self, provider: str, user: UserRef) -> None:
        session = self._sessions.get((provider, user))
        if session is not None:
            session.close()

    @asynccontextmanager
    async def calling(self, session: PooledSession) -> AsyncIterator[Client]:
        """One call on `session`, within the per-user and per-server bounds, refused when over."""
        provider = session.provider
        limit = self._limits.setdefault(provider.name, anyio.CapacityLimiter(provider.max_calls))
        try:
            session.calls.acquire_nowait()
        except anyio.WouldBlock:
            raise Busy(
                f"{provider.display_name}: too many of your calls in flight; try again shortly"
            ) from None
        try:
            try:
                limit.acquire_nowait()
            except anyio.WouldBlock:
                raise Busy(f"{provider.display_name} is busy; try again shortly") from None
            session.in_flight += 1
            try:
                assert session.client is not None
                yield session.client
            finally:
                session.in_flight -= 1
                session.last_used = self._clock()
                limit.release()
        finally:
            session.calls.release()

    async def call_tool(self, session: PooledSession, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """`tools/call` on the downstream, ending by the server's `call_timeout_seconds`."""
        provider = session.provider
        async with self.calling(session) as client, broken_session(session):
            with anyio.move_on_after(provider.call_timeout_seconds):
                return await client.call_tool(tool, arguments)
        session.close()  # a call that overran may leave the session wedged
        raise ProviderApiError(
            f"{provider.display_name} did not answer within {provider.call_timeout_seconds:g} s"
        )

    async def list_tools(self, session: PooledSession) -> list[Tool]:
        """The downstream's tools for this user (every page), read again when older than
        TOOLS_FRESH_SECONDS or after the downstream said they changed."""
        if session.tools is not None and self._clock() - session.tools_read_at < TOOLS_FRESH_SECONDS:
            return session.tools
        provider = session.provider
        async with self.calling(session) as client, broken_session(session):
            with anyio.move_on_after(provider.call_timeout_seconds):
                listed = await client.list_tools()
                tools = list(listed.tools)
                cursor = listed.next_cursor
                for _ in range(MAX_TOOL_PAGES):
                    if not cursor:
                        break
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                session.tools, session.tools_read_at = tools[:MAX_TOOLS], self._clock()
                session.offered_names = None
                return session.tools
        session.close()
        raise ProviderApiError(f"{provider.display_name} did not list its tools in time")

    def _make_room(self, provider: ProviderConfig) -> None:
        """Close the least recently used idle session of `provider` when it has `max_sessions`."""
        mine = [s for (p, _), s in self._sessions.items() if p == provider.name and not s.closed]
        if len(mine) < provider.max_sessions:
            return
        idle = [s for s in mine if s.in_flight == 0]
        if not idle:
            raise Busy(f"{provider.display_name} is busy; try again shortly")
        min(idle, key=lambda s: s.last_used).close()

    def _forget(self, session: PooledSession) -> None:
        key = (session.provider.name, session.user)
        if self._sessions.get(key) is session:
            del self._sessions[key]

    async def _reap(self) -> None:
        while True:
            await anyio.sleep(REAP_SECONDS)
            self.close_idle()

    def close_idle(self) -> int:
        """Close every session unused for its server's `session_idle_seconds`; how many."""
        now = self._clock()
        idle = [
            session
            for session in self._sessions.values()
            if session.in_flight == 0 and now - session.last_used > session.provider.session_idle_seconds
        ]
        for session in idle:
            session.close()
        return len(idle)


MAX_TOOL_PAGES = 20  # a downstream that pages on and on is read this far
MAX_TOOLS = 500  # and this many of its tools are offered


@asynccontextmanager
async def broken_session(session: PooledSession) -> AsyncIterator[None]:
    """A session that broke under a request (its stream failed, an answer too large or too slow
    to read) is closed, and the request fails as the provider's: a JSON-RPC error the downstream
    answered (`MCPError`) passes as it is."""
    try:
        yield
    except MCPError:
        raise
    except Exception as exc:
        session.close()
        logger.info("gateway: session to %s broke: %s", session.provider.name, type(exc).__name__)
        raise ProviderApiError(f"{session.provider.display_name}: the connection failed") from None
