"""Caps on what one user can hold open on a replica: 2025-11-25 sessions and concurrent requests.

Each 2025-11-25 session holds server memory until its idle timeout (30 minutes), and each request
in flight may hold an SSE stream. Without caps, one authenticated script can open sessions until
the replica runs out of memory. Past a cap the answer is HTTP 429 with a JSON-RPC error that
says which limit was hit; other users are unaffected. (2026-07-28 requests open no session.)

The SDK offers only a global `max_sessions` (answered with 503). The per-user count reads the
session manager's record of who owns each session (`_session_owners`, the map the SDK itself
uses to refuse a session to another credential): private, but exact, and the SDK version is
pinned (pyproject.toml). Sessions end however the SDK ends them (DELETE, idle timeout, crash),
and the count follows without bookkeeping of ours.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import principal_components
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import ASGIApp, Receive, Scope, Send

SESSION_HEADER = b"mcp-session-id"
VERSION_HEADER = b"mcp-protocol-version"
HANDSHAKE_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
RETRY_AFTER_SECONDS = 30


def user_of(scope: Scope) -> tuple[str | None, str | None] | None:
    """The authenticated caller as (issuer, subject), whatever client it uses, or None before
    the SDK's bearer middleware has set one."""
    user = scope.get("user")
    if not isinstance(user, AuthenticatedUser):
        return None
    _client, issuer, subject = principal_components(user.access_token)
    return issuer, subject


def _user_of_owner(owner: Mapping[str, Any]) -> tuple[str | None, str | None]:
    return owner.get("issuer"), owner.get("subject")  # the SDK's AuthorizationContext


def opens_a_session(scope: Scope) -> bool:
    """A POST without a session id on a handshake-era protocol: the SDK would create a session."""
    if scope.get("method") != "POST":
        return False
    headers = dict(scope["headers"])
    if SESSION_HEADER in headers:
        return False
    version = headers.get(VERSION_HEADER)
    return version is None or version.decode("latin-1") in HANDSHAKE_VERSIONS


class SessionLimits:
    """Wraps the SDK session manager's ASGI app (inside the bearer check, so the user is known)."""

    def __init__(
        self,
        app: ASGIApp,
        owners: Callable[[], Mapping[str, Any]],
        *,
        sessions_per_user: int,
        sessions_per_replica: int,
        requests_per_user: int,
    ) -> None:
        self._app = app
        self._owners = owners
        self.sessions_per_user = sessions_per_user
        self.sessions_per_replica = sessions_per_replica
        self.requests_per_user = requests_per_user
        # Requests in flight per user. Entries leave when their count drops to zero, so the map
        # is bounded by the users with a request open right now.
        self._in_flight: Counter[tuple[str | None, str | None]] = Counter()

    @classmethod
    def around(cls, manager: StreamableHTTPSessionManager, **limits: int) -> SessionLimits:
        """Install the caps on `manager`, behind its request-body limit (before it serves)."""
        body_limit = manager.asgi_app
        wrapper = cls(body_limit.app, lambda: manager._session_owners, **limits)
        body_limit.app = wrapper
        return wrapper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = user_of(scope) if scope["type"] == "http" else None
        if user is None:
            await self._app(scope, receive, send)
            return
        if opens_a_session(scope):
            owners = self._owners()
            if len(owners) >= self.sessions_per_replica:
                await _too_many(send, "This server has too many open MCP sessions; try again shortly.")
                return
            held = sum(1 for owner in owners.values() if _user_of_owner(owner) == user)
            if held >= self.sessions_per_user:
                await _too_many(
                    send,
                    f"Too many open MCP sessions for this user (limit {self.sessions_per_user}); "
                    "close one (HTTP DELETE) or let an idle one expire.",
                )
                return
        if self._in_flight[user] >= self.requests_per_user:
            await _too_many(
                send, f"Too many requests in progress for this user (limit {self.requests_per_user})."
            )
            return
        self._in_flight[user] += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self._in_flight[user] -= 1
            if self._in_flight[user] <= 0:
                del self._in_flight[user]

    def in_flight(self, user: tuple[str | None, str | None]) -> int:
        return self._in_flight.get(user, 0)


async def _too_many(send: Send, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
