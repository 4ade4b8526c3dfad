"""Every private part of the MCP SDK this server relies on, in one place, each checked at start.

The SDK has no public way yet to do four things we need; `HOOKS` lists each private part we use
instead, what for, and the public API that would replace it (docs/architecture.md repeats the
table for readers). `check_sdk_hooks()` runs before any server is built (`create_app`,
`UrlConnect`): it uses each part on a throwaway SDK object and looks for the effect we rely on,
so an installed SDK whose part is gone, renamed or no longer does that stops the server with an
error naming it, and a session cap or the per-session replay isolation can never be silently off.

`SessionManager` adds our two steps to the session manager the SDK builds inside
`MCPServer.streamable_http_app`, on that instance (`adopt_session_manager`):

- admission checks run inside `_admit_session`, which the SDK calls under its session-creation
  lock and which records the new session's owner in the same step: counting and admitting are one
  step (service/mcp/sdk/session_limits.py);
- each admitted session gets an event store of its own, set as the manager's `event_store` for
  the one admission that reads it (service/mcp/sdk/sse_resumption.py).

Installed on the instance rather than by building our own manager: the SDK's app factory wires
its manager into the bearer-auth middleware and routes, which we would otherwise write again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import EventStore, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import ASGIApp

AdmissionCheck = Callable[[AuthorizationContext | None], None]


class SdkHookMissing(RuntimeError):
    """The installed SDK lacks a private part this server needs; the message names it."""


@dataclass(frozen=True)
class Hook:
    name: str  # the private part, as the SDK spells it
    used_for: str
    public_api_needed: str
    works: Callable[[], bool]  # uses the part on throwaway SDK objects; True when it has the effect


# ---- the probes: each uses one part on objects built for it and looks for the effect ------------

PROBE_OWNER = AuthorizationContext(client_id="probe", issuer="https://probe.invalid", subject="probe")


class _ProbeStore(EventStore):
    async def store_event(self, stream_id: Any, message: Any) -> Any:
        raise NotImplementedError  # never called: the probe only checks which store a session gets

    async def replay_events_after(self, last_event_id: Any, send_callback: Any) -> Any:
        raise NotImplementedError


def _admitted(manager: StreamableHTTPSessionManager) -> StreamableHTTPServerTransport:
    transport = manager._admit_session(PROBE_OWNER)
    if not isinstance(transport, StreamableHTTPServerTransport) or not transport.mcp_session_id:
        raise TypeError("no session admitted")
    return transport


def _probe_manager() -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(app=Server("sdk-hook-probe"))


def _admits_a_session() -> bool:
    _admitted(_probe_manager())
    return True


def _records_the_owner() -> bool:
    manager = _probe_manager()
    session = _admitted(manager).mcp_session_id
    owners: Mapping[str, AuthorizationContext] = manager._session_owners
    return session is not None and owners.get(session) == PROBE_OWNER


def _holds_the_transport() -> bool:
    manager = _probe_manager()
    transport = _admitted(manager)
    instances: Mapping[str, StreamableHTTPServerTransport] = manager._server_instances
    return transport.mcp_session_id is not None and instances.get(transport.mcp_session_id) is transport


def _gives_the_session_the_event_store() -> bool:
    manager = _probe_manager()
    store = manager.event_store = _ProbeStore()
    return getattr(_admitted(manager), "_event_store", None) is store


def _handles_requests_inside_the_body_limit() -> bool:
    manager = _probe_manager()
    inner: object = manager.asgi_app.app
    return inner == manager._handle_request


def _drops_a_handler() -> bool:
    server: MCPServer[Any] = MCPServer("sdk-hook-probe")

    @server.prompt()
    def probe() -> str:
        return "probe"

    before = server._lowlevel_server.get_capabilities().prompts
    request_handlers(server).pop("prompts/list")
    return before is not None and server._lowlevel_server.get_capabilities().prompts is None


def _finds_a_tool() -> bool:
    server: MCPServer[Any] = MCPServer("sdk-hook-probe")
    server.add_tool(lambda: "probe", name="probe")
    return has_tool(server, "probe") and not has_tool(server, "absent")


HOOKS: tuple[Hook, ...] = (
    Hook(
        "StreamableHTTPSessionManager._admit_session",
        "per-user and per-replica session caps checked in the step that admits a session",
        "an admission callback (or per-principal max_sessions) on the session manager",
        _admits_a_session,
    ),
    Hook(
        "StreamableHTTPSessionManager._session_owners",
        "counting each user's open sessions",
        "a read-only view of the open sessions and their owners",
        _records_the_owner,
    ),
    Hook(
        "StreamableHTTPSessionManager._server_instances",
        "the drain: which sessions this replica still holds while it stops",
        "a read-only view of the open sessions (or a drain/close-all API)",
        _holds_the_transport,
    ),
    Hook(
        "StreamableHTTPSessionManager.event_store, read once per admitted session",
        "one SSE event store per session, so a replay never crosses sessions",
        "an event-store factory called per session",
        _gives_the_session_the_event_store,
    ),
    Hook(
        "StreamableHTTPSessionManager.asgi_app.app (RequestBodyLimitMiddleware)",
        "the per-user request caps, served behind the SDK's request-body limit",
        "a middleware slot inside the session manager",
        _handles_requests_inside_the_body_limit,
    ),
    Hook(
        "MCPServer._lowlevel_server._request_handlers",
        "declaring only what we serve: prompts, resources and list-change subscriptions removed",
        "a way to turn off the default handlers (or declare capabilities explicitly)",
        _drops_a_handler,
    ),
    Hook(
        "MCPServer._tool_manager",
        "an unknown tool name refused before it becomes a metric label",
        "a public get_tool(name)",
        _finds_a_tool,
    ),
)


def _works(hook: Hook) -> bool:
    try:
        return hook.works()
    except Exception:  # any failure of a probe means the part is not what we rely on
        return False


def check_sdk_hooks(hooks: tuple[Hook, ...] = HOOKS) -> None:
    """Raise SdkHookMissing naming every hook the installed SDK lacks."""
    # The probe sessions are no one's: the manager's "Created new transport" lines would read as
    # sessions in the server's log.
    manager_log = logging.getLogger(StreamableHTTPSessionManager.__module__)
    was_disabled, manager_log.disabled = manager_log.disabled, True
    try:
        missing = [hook.name for hook in hooks if not _works(hook)]
    finally:
        manager_log.disabled = was_disabled
    # mutant: sdk.hooks_present
    if missing:
        raise SdkHookMissing(
            "the installed mcp SDK lacks what this server relies on: "
            + "; ".join(missing)
            + " (see service/mcp/sdk/hooks.py; install the mcp version pyproject.toml allows)"
        )


class SessionManager:
    """Our two steps in one SDK session manager's admission (installed by `adopt_session_manager`),
    and read-only views of what it holds."""

    def __init__(self, sdk: StreamableHTTPSessionManager) -> None:
        if sdk.event_store is not None:  # one store for every session would mix their streams
            raise ValueError("build the app without an event_store: SessionManager gives each session one")
        self._sdk = sdk
        self._admission_checks: list[AdmissionCheck] = []
        self._new_event_store: Callable[[], EventStore] | None = None
        self._admit_in_sdk = sdk._admit_session
        # The SDK calls `self._admit_session(...)`: an attribute of the instance comes before the
        # method of its class, so this manager alone admits through `_admit_session` below.
        sdk._admit_session = self._admit_session  # type: ignore[method-assign]

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        # Synchronous, under the SDK's session-creation lock: a check that raises admits nothing.
        for check in self._admission_checks:
            check(requestor)
        self._sdk.event_store = self._new_event_store() if self._new_event_store is not None else None
        try:
            return self._admit_in_sdk(requestor)
        finally:
            self._sdk.event_store = None  # read by this admission only

    def add_admission_check(self, check: AdmissionCheck) -> None:
        self._admission_checks.append(check)

    def give_each_session_a_store(self, new_event_store: Callable[[], EventStore]) -> None:
        self._new_event_store = new_event_store

    @property
    def session_owners(self) -> Mapping[str, AuthorizationContext]:
        """Who opened each live session (the SDK's own record)."""
        return self._sdk._session_owners

    @property
    def live_transports(self) -> Mapping[str, StreamableHTTPServerTransport]:
        """The transports of the sessions this replica holds."""
        return self._sdk._server_instances

    @property
    def sessions_app(self) -> ASGIApp:
        """The manager's request handling, inside its request-body limit."""
        app: ASGIApp = self._sdk.asgi_app.app
        return app

    @sessions_app.setter
    def sessions_app(self, app: ASGIApp) -> None:
        self._sdk.asgi_app.app = app


def adopt_session_manager(server: MCPServer[Any]) -> SessionManager:
    """`server`'s session manager (created by `streamable_http_app`), with our steps installed."""
    return SessionManager(server.session_manager)


def lowlevel_server(server: MCPServer[Any]) -> Server[Any]:
    """The SDK's low-level server under `server` (`MCPServer._lowlevel_server`): its public
    `add_request_handler` and `create_initialization_options` serve remote MCP servers' tools."""
    lowlevel: Server[Any] = server._lowlevel_server
    return lowlevel


def request_handlers(server: MCPServer[Any]) -> dict[str, Any]:
    """The low-level server's handler table, by JSON-RPC method."""
    handlers: dict[str, Any] = server._lowlevel_server._request_handlers
    return handlers


def has_tool(server: MCPServer[Any], name: str) -> bool:
    return server._tool_manager.get_tool(name) is not None
