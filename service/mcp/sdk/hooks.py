"""Every private part of the MCP SDK this server relies on, in one place, each checked at start.

The SDK has no public way yet to do four things we need; `HOOKS` lists each private part we use
instead, what for, and the public API that would replace it (docs/architecture.md repeats the
table for readers). `check_sdk_hooks()` runs before any server is built (`create_app`,
`UrlConnect`): an installed SDK that lacks a hook stops the server with an error naming it, so a
session cap or the per-session replay isolation can never be silently off.

`SessionManager` is the SDK's session manager with our two additions, as a subclass (the way
FastMCP adds its per-session event store):

- admission checks run inside `_admit_session`, which the SDK calls under its session-creation
  lock and which records the new session's owner in the same step: counting and admitting are one
  step (service/mcp/sdk/session_limits.py);
- each admitted session gets an event store of its own, read once per session from
  `event_store` (service/mcp/sdk/sse_resumption.py).

The SDK builds its manager inside `MCPServer.streamable_http_app`, so `adopt_session_manager`
re-classes that instance as a `SessionManager` (`__class__` assignment: the way to give an object
one does not construct the behaviour of a subclass; no state is copied or lost).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import EventStore, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware
from starlette.types import ASGIApp

AdmissionCheck = Callable[[AuthorizationContext | None], None]


class SdkHookMissing(RuntimeError):
    """The installed SDK lacks a private part this server needs; the message names it."""


@dataclass(frozen=True)
class Hook:
    name: str  # the private part, as the SDK spells it
    used_for: str
    public_api_needed: str
    present: Callable[[], bool]


def _has_method(cls: type, name: str) -> Callable[[], bool]:
    return lambda: callable(getattr(cls, name, None))


def _source(cls: type, name: str) -> str:
    try:
        return inspect.getsource(vars(cls)[name])
    except (KeyError, OSError, TypeError):
        return ""


def _sets_instance_attributes(cls: type, *names: str) -> Callable[[], bool]:
    """True when `cls.__init__` assigns every `self.<name>` (read from its source: these are plain
    attributes, which exist only once an instance does)."""

    def present() -> bool:
        source = _source(cls, "__init__")
        return all(f"self.{name} =" in source or f"self.{name}:" in source for name in names)

    return present


HOOKS: tuple[Hook, ...] = (
    Hook(
        "StreamableHTTPSessionManager._admit_session",
        "per-user and per-replica session caps checked in the step that admits a session",
        "an admission callback (or per-principal max_sessions) on the session manager",
        _has_method(StreamableHTTPSessionManager, "_admit_session"),
    ),
    Hook(
        "StreamableHTTPSessionManager._session_owners",
        "counting each user's open sessions",
        "a read-only view of the open sessions and their owners",
        _sets_instance_attributes(StreamableHTTPSessionManager, "_session_owners"),
    ),
    Hook(
        "StreamableHTTPSessionManager._server_instances",
        "the drain: which sessions this replica still holds while it stops",
        "a read-only view of the open sessions (or a drain/close-all API)",
        _sets_instance_attributes(StreamableHTTPSessionManager, "_server_instances"),
    ),
    Hook(
        "StreamableHTTPSessionManager.event_store, read once per admitted session",
        "one SSE event store per session, so a replay never crosses sessions",
        "an event-store factory called per session",
        lambda: "event_store=self.event_store" in _source(StreamableHTTPSessionManager, "_admit_session"),
    ),
    Hook(
        "StreamableHTTPSessionManager.asgi_app.app (RequestBodyLimitMiddleware)",
        "the per-user request caps, served behind the SDK's request-body limit",
        "a middleware slot inside the session manager",
        lambda: (
            _sets_instance_attributes(StreamableHTTPSessionManager, "asgi_app")()
            and _sets_instance_attributes(RequestBodyLimitMiddleware, "app")()
        ),
    ),
    Hook(
        "MCPServer._lowlevel_server._request_handlers",
        "declaring only what we serve: prompts, resources and list-change subscriptions removed",
        "a way to turn off the default handlers (or declare capabilities explicitly)",
        lambda: (
            _sets_instance_attributes(MCPServer, "_lowlevel_server")()
            and _sets_instance_attributes(Server, "_request_handlers")()
        ),
    ),
    Hook(
        "MCPServer._tool_manager",
        "an unknown tool name refused before it becomes a metric label",
        "a public get_tool(name)",
        _sets_instance_attributes(MCPServer, "_tool_manager"),
    ),
)


def check_sdk_hooks(hooks: tuple[Hook, ...] = HOOKS) -> None:
    """Raise SdkHookMissing naming every hook the installed SDK lacks."""
    missing = [hook.name for hook in hooks if not hook.present()]
    # mutant: sdk.hooks_present
    if missing:
        raise SdkHookMissing(
            "the installed mcp SDK lacks what this server relies on: "
            + "; ".join(missing)
            + " (see service/mcp/sdk/hooks.py; install the mcp version pyproject.toml allows)"
        )


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with admission checks and a per-session event store."""

    _admission_checks: list[AdmissionCheck]
    _new_event_store: Callable[[], EventStore] | None

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        # Synchronous, under the SDK's session-creation lock: a check that raises admits nothing.
        for check in self._admission_checks:
            check(requestor)
        return super()._admit_session(requestor)

    @property  # type: ignore[override]  # the SDK's is a plain attribute
    def event_store(self) -> EventStore | None:
        return self._new_event_store() if self._new_event_store is not None else None

    @event_store.setter
    def event_store(self, store: EventStore | None) -> None:
        if store is not None:  # one store for every session would mix their streams on replay
            raise ValueError("SessionManager gives each session its own store: use new_event_store")

    def add_admission_check(self, check: AdmissionCheck) -> None:
        self._admission_checks.append(check)

    def give_each_session_a_store(self, new_event_store: Callable[[], EventStore]) -> None:
        self._new_event_store = new_event_store

    @property
    def session_owners(self) -> Mapping[str, AuthorizationContext]:
        """Who opened each live session (the SDK's own record)."""
        return self._session_owners

    @property
    def live_transports(self) -> Mapping[str, StreamableHTTPServerTransport]:
        """The transports of the sessions this replica holds."""
        return self._server_instances

    @property
    def sessions_app(self) -> ASGIApp:
        """The manager's request handling, inside its request-body limit."""
        app: ASGIApp = self.asgi_app.app
        return app

    @sessions_app.setter
    def sessions_app(self, app: ASGIApp) -> None:
        self.asgi_app.app = app


def adopt_session_manager(server: MCPServer[Any]) -> SessionManager:
    """`server`'s session manager (created by `streamable_http_app`) as a `SessionManager`."""
    manager = server.session_manager
    if manager.event_store is not None:
        raise ValueError("build the app without an event_store: SessionManager gives each session one")
    manager.__class__ = SessionManager
    adopted: SessionManager = manager  # type: ignore[assignment]  # re-classed just above
    adopted._admission_checks = []
    adopted._new_event_store = None
    return adopted


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
