"""The SDK's own MCP client, pointed at the demo with a dev bearer token, recording what it sees."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mock_providers import mint_access_token

ElicitHandler = Callable[[mcp_types.ElicitRequestURLParams], Awaitable[str]]


@dataclass
class Recorder:
    """Everything the client received, for assertions and leak scans."""

    notifications: list[Any] = field(default_factory=list)
    elicitations: list[Any] = field(default_factory=list)
    session_ids: set[str] = field(default_factory=set)  # Mcp-Session-Id values the server issued
    completed: anyio.Event = field(default_factory=anyio.Event)

    async def on_message(self, message: Any) -> None:
        self.notifications.append(message)
        if isinstance(message, mcp_types.ElicitCompleteNotification):
            self.completed.set()

    def completed_ids(self) -> list[str]:
        return [
            m.params.elicitation_id
            for m in self.notifications
            if isinstance(m, mcp_types.ElicitCompleteNotification)
        ]


class Target(Protocol):
    """Where the client connects, and whose dev AS keys sign its bearer token."""

    @property
    def data_dir(self) -> Path: ...

    @property
    def mcp_url(self) -> str: ...


@asynccontextmanager
async def mcp_client(
    servers: Target,
    user: str,
    mode: str,
    *,
    on_url: ElicitHandler | None = None,
    recorder: Recorder | None = None,
) -> AsyncIterator[tuple[Client, Recorder]]:
    """A connected client for `user`; `on_url` (or none: no URL-mode capability) answers elicitations."""
    recorder = recorder or Recorder()
    token = mint_access_token(servers.data_dir, user)

    async def record_session(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            recorder.session_ids.add(response.headers["mcp-session-id"])

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=30, event_hooks={"response": [record_session]}
    )
    callback = None
    if on_url is not None:
        handler = on_url

        async def callback(ctx: Any, params: Any) -> mcp_types.ElicitResult:
            recorder.elicitations.append(params)
            action = await handler(params)
            return mcp_types.ElicitResult(action=action)  # type: ignore[arg-type]

    async with Client(
        streamable_http_client(servers.mcp_url, http_client=http),
        mode=mode,
        message_handler=recorder.on_message,
        elicitation_callback=callback,
    ) as client:
        yield client, recorder
