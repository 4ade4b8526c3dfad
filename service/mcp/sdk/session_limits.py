"""Caps on what one user can hold open on a replica: 2025-11-25 sessions and concurrent requests.

Each 2025-11-25 session holds server memory until its idle timeout (30 minutes), and each request
in flight may hold an SSE stream. Without caps, one authenticated script can open sessions until
the replica runs out of memory. Past a cap the answer is HTTP 429 with a JSON-RPC error that
says which limit was hit; other users are unaffected. (2026-07-28 requests open no session.)

The SDK offers only a global `max_sessions` (answered with 503). The per-user count reads the
session manager's record of who owns each session (the map the SDK itself uses to refuse a
session to another credential; `SessionManager.session_owners`, service/mcp/sdk/hooks.py). Sessions
end however the SDK ends them (DELETE, idle timeout, crash), and the count follows without
bookkeeping of ours.

The session caps are checked inside the SDK's own admission step (an admission check of
`SessionManager`), which runs under the SDK's session-creation lock and records the new
session's owner without an await in between: counting and admitting are one step, so concurrent
`initialize` calls of one user cannot all pass a count taken before any of them was admitted,
and the check applies to exactly the requests the SDK opens a session for, whatever their
headers say.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import principal_components
from mcp_types import INVALID_REQUEST
from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import SessionCapReached
from service.http.jsonrpc_error import http_error_body
from service.mcp.sdk.hooks import SessionManager

RETRY_AFTER_SECONDS = 30
# The most memory one 2025-11-25 session may hold: its SSE replay budget (sse_resumption.MAX_BYTES,
# 256 KiB) and the session's own objects (about 45 KiB, measured with bench/session_memory.py).
# docs/operations.md ("Memory") sizes max_sessions_per_replica with it.
SESSION_MEMORY_KIB = 300


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
    def around(cls, manager: SessionManager, **limits: int) -> SessionLimits:
        """Install the caps on `manager`, behind its request-body limit and in its admission step
        (before it serves)."""
        wrapper = cls(manager.sessions_app, lambda: manager.session_owners, **limits)
        manager.sessions_app = wrapper
        # Synchronous, under the SDK's session-creation lock: the count and the new owner entry
        # the SDK writes are one step.
        # mutant: caps.admitted_within_caps
        manager.add_admission_check(wrapper.require_room_for_a_session)
        return wrapper

    def require_room_for_a_session(self, requestor: Mapping[str, Any] | None) -> None:
        """Raise SessionCapReached when the replica, or this user, holds as many 2025-11-25
        sessions as the caps allow. Each session holds memory until it ends (its SSE replay
        budget, service/mcp/sdk/sse_resumption.py), so the caps bound the replica's memory
        (docs/operations.md, "Memory")."""
        owners = self._owners()
        # mutant: caps.sessions_per_replica
        if len(owners) >= self.sessions_per_replica:
            raise SessionCapReached("This server has too many open MCP sessions; try again shortly.")
        if requestor is None:
            return
        user = _user_of_owner(requestor)
        held = sum(1 for owner in owners.values() if _user_of_owner(owner) == user)
        # mutant: caps.sessions_per_user
        if held >= self.sessions_per_user:
            raise SessionCapReached(
                f"Too many open MCP sessions for this user (limit {self.sessions_per_user}); "
                "close one (HTTP DELETE) or let an idle one expire."
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = user_of(scope) if scope["type"] == "http" else None
        if user is None:
            await self._serve(scope, receive, send)
            return
        # mutant: caps.requests_per_user
        if self._in_flight[user] >= self.requests_per_user:
            await _too_many(
                send, f"Too many requests in progress for this user (limit {self.requests_per_user})."
            )
            return
        self._in_flight[user] += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self._in_flight[user] -= 1
            if self._in_flight[user] <= 0:
                del self._in_flight[user]

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            # mutant: caps.admitted_within_caps before \
            #   'if b"mcp-session-id" not in dict(scope["headers"]) and (u := user_of(scope)) is not None: ' \
            #   'self.require_room_for_a_session({"issuer": u[0], "subject": u[1]})'
            await self._app(scope, receive, send)
        except SessionCapReached as refusal:  # raised before the SDK answered anything
            await _too_many(send, str(refusal))

    def in_flight(self, user: tuple[str | None, str | None]) -> int:
        return self._in_flight.get(user, 0)


async def _too_many(send: Send, message: str) -> None:
    body = http_error_body(INVALID_REQUEST, message)
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
