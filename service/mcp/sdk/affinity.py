"""Session affinity for several replicas: the MCP session ids a replica issues carry its name.

2025-11-25 sessions live in one process (the SDK keeps them in memory), so a proxy must route
`Mcp-Session-Id: <replica>.<id>` to <replica>. The SDK mints the id itself (uuid4), so this
pure-ASGI middleware adds the prefix on the way out and removes it on the way in. The prefix is
a routing label, not a secret; the SDK still checks that a session belongs to the caller.
"""

from __future__ import annotations

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = MCP_SESSION_ID_HEADER.encode()  # as ASGI names headers


class SessionAffinityMiddleware:
    def __init__(self, app: ASGIApp, replica_id: str) -> None:
        self.app = app
        self.prefix = f"{replica_id}."

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.prefix.strip("."):
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        scope["headers"] = [self._inbound(name, value) for name, value in scope["headers"]]

        async def outbound(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                session_id = headers.get(MCP_SESSION_ID_HEADER)
                if session_id is not None:
                    headers[MCP_SESSION_ID_HEADER] = self.prefix + session_id
            await send(message)

        await self.app(scope, receive, outbound)

    def _inbound(self, name: bytes, value: bytes) -> tuple[bytes, bytes]:
        # A session id without our prefix is left as is: the SDK answers 404 for an unknown
        # session, which tells a misrouted client to start a new one.
        if name == HEADER and value.startswith(self.prefix.encode()):
            return name, value[len(self.prefix) :]
        return name, value
