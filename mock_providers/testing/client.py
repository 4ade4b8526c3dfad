"""The SDK's own MCP client (mcp 2.3 `Client`), pointed at the stack with a dev bearer token,
recording what it sees; and the URL-elicitation round trip on either protocol revision."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import URL_ELICITATION_REQUIRED

from mock_providers import mint_access_token
from mock_providers.testing.declared import DeclaredElicitation
from mock_providers.testing.tls import client_tls

ElicitHandler = Callable[[mcp_types.ElicitRequestURLParams], Awaitable[str]]
MODES = ("legacy", "2026-07-28")  # the two revisions: -32042 + notification, InputRequiredResult
ACCEPT: mcp_types.InputResponses = {"connect": mcp_types.ElicitResult(action="accept")}
#: What a client declares as `capabilities.elicitation` (docs/clients.md): URL mode (the kit's
#: default), form mode only (most clients in use), or no elicitation at all.
Elicitation = Literal["url", "form", "none"]
ELICITATIONS: tuple[Elicitation, ...] = ("url", "form", "none")


@dataclass
class Recorder:
    """Everything the client received, for assertions and leak scans."""

    notifications: list[Any] = field(default_factory=list)
    elicitations: list[Any] = field(default_factory=list)
    session_ids: set[str] = field(default_factory=set)  # Mcp-Session-Id values the server issued
    completed: anyio.Event = field(default_factory=anyio.Event)  # set by the first completion
    _arrived: anyio.Event = field(default_factory=anyio.Event, repr=False)

    async def on_message(self, message: Any) -> None:
        self.notifications.append(message)
        if isinstance(message, mcp_types.ElicitCompleteNotification):
            self.completed.set()
            self._arrived.set()

    def completed_ids(self) -> list[str]:
        return [
            m.params.elicitation_id
            for m in self.notifications
            if isinstance(m, mcp_types.ElicitCompleteNotification)
        ]

    async def wait_completed(self, elicitation_id: str, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Until notifications/elicitation/complete for `elicitation_id` arrived (legacy revision);
        TimeoutError after `timeout` seconds."""
        with anyio.fail_after(timeout):
            while elicitation_id not in self.completed_ids():
                self._arrived = anyio.Event()  # no await since the check: no message can slip by
                await self._arrived.wait()


class Target(Protocol):
    """Where the client connects, and whose dev AS keys sign its bearer token."""

    @property
    def data_dir(self) -> Path: ...

    @property
    def mcp_url(self) -> str: ...


async def accept(params: Any) -> str:
    """Declares URL-mode support; the kit's client answers "accept" and lets the test open the URL."""
    return "accept"


@asynccontextmanager
async def mcp_client(
    servers: Target,
    user: str,
    mode: str,
    *,
    on_url: ElicitHandler | None = None,
    recorder: Recorder | None = None,
    token: str | None = None,
    elicitation: Elicitation = "url",
    local_address: str | None = None,
) -> AsyncIterator[tuple[Client, Recorder]]:
    """A connected client for `user`; `on_url` (or none: no URL-mode capability) answers elicitations.
    `elicitation="form"` declares form mode only and `"none"` no elicitation, as most clients in
    use do: the server then answers with the link in a tool error. With `local_address` it
    connects from that source address (a loopback one: 127.0.0.x)."""
    recorder = recorder or Recorder()
    bearer = token or mint_access_token(servers.data_dir, user)

    async def record_session(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            recorder.session_ids.add(response.headers["mcp-session-id"])

    transport = httpx2.AsyncHTTPTransport(verify=client_tls(), local_address=local_address)
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=30,
        event_hooks={"response": [record_session]},
        transport=DeclaredElicitation(transport, {"form": {}}) if elicitation == "form" else transport,
    )
    if elicitation == "form":
        on_url = on_url or accept  # the SDK declares URL mode too; DeclaredElicitation takes it back
    elif elicitation == "none":
        on_url = None
    callback: Any = None  # the SDK's ElicitationFnT
    if on_url is not None:
        handler = on_url

        async def callback(ctx: Any, params: Any) -> mcp_types.ElicitResult:
            recorder.elicitations.append(params)
            action = await handler(params)
            return mcp_types.ElicitResult(action=action)  # type: ignore[arg-type]

    async with Client(
        streamable_http_client(servers.mcp_url, http_client=http),
        mode=mode,  # type: ignore[arg-type]
        message_handler=recorder.on_message,
        elicitation_callback=callback,
    ) as client:
        yield client, recorder


async def legacy_elicitation(
    client: Client, tool: str = "whoami", arguments: dict[str, Any] | None = None
) -> UrlElicitationRequiredError:
    """Call `tool` expecting the 2025-11-25 answer, -32042 URLElicitationRequiredError; return it."""
    try:
        await client.call_tool(tool, arguments or {})
    except MCPError as raised:
        if raised.error.code != URL_ELICITATION_REQUIRED:
            raise
        return UrlElicitationRequiredError.from_error(raised.error)
    raise AssertionError(f"{tool} answered without asking for a connection")


@dataclass(frozen=True)
class ConnectLink:
    """A connect link the server gave: the URL to open, its elicitation id, on 2026-07-28 the
    requestState the retry must echo, and `via`: a URL elicitation, or (for a client without
    URL mode) the link in a tool error, whose `text` is what the model reads."""

    url: str
    elicitation_id: str
    request_state: str | None = None
    via: Literal["elicitation", "tool_error"] = "elicitation"
    text: str = ""


async def connect_url(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> ConnectLink:
    """Call `tool`, expecting a connect link: a URL elicitation on either revision, or for a
    client without URL mode the tool error carrying it (docs/clients.md)."""
    try:
        first = await client.session.call_tool(tool, arguments or {}, allow_input_required=True)
    except MCPError as raised:
        if raised.error.code != URL_ELICITATION_REQUIRED:
            raise
        [elicitation] = UrlElicitationRequiredError.from_error(raised.error).elicitations
        return ConnectLink(str(elicitation.url), str(elicitation.elicitation_id))
    if isinstance(first, mcp_types.CallToolResult) and first.is_error:
        facts = first.structured_content or {}
        if "connect_url" in facts:
            [content] = first.content
            text = content.text if isinstance(content, mcp_types.TextContent) else ""
            return ConnectLink(facts["connect_url"], facts["elicitation_id"], via="tool_error", text=text)
    if not isinstance(first, mcp_types.InputRequiredResult):
        raise AssertionError(f"{tool} answered without asking for a connection: {first}")
    [request] = (first.input_requests or {}).values()
    url = str(request.params.url)  # type: ignore[union-attr]
    return ConnectLink(url, parse_qs(urlsplit(url).query)["elicitationId"][0], first.request_state)


async def retry(
    client: Client, link: ConnectLink, tool: str, arguments: dict[str, Any] | None = None
) -> mcp_types.CallToolResult:
    """The client's retry once the browser leg is done: on 2026-07-28 with the accepted answer and
    the link's requestState; on the legacy revision, and after a link in a tool error, a plain
    call."""
    if link.request_state is None:
        return await client.call_tool(tool, arguments or {})
    result = await client.session.call_tool(
        tool,
        arguments or {},
        allow_input_required=True,
        input_responses=ACCEPT,
        request_state=link.request_state,
    )
    if not isinstance(result, mcp_types.CallToolResult):
        raise AssertionError(f"{tool} still waits for input: {result}")
    return result
