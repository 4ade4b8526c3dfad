"""`Mcpuc`: the demo stack (MCP server, dev authorization server, mock providers) as a test sees it.

    stack = Mcpuc(tmp_path).start()
    async with stack.client("alice", mode="2026-07-28") as client:
        link = await stack.connect_url(client, "whoami", {})
        await stack.browser("alice").approve(link.url, login="octocat")
        result = await stack.retry(client, link, "whoami", {})
    stack.stop()

The servers run in a background thread (mock_providers.testing.servers), so one stack can serve
a whole module and any event loop; clients and browsers belong to the test's loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, overload

from mcp import Client

from mock_providers import mint_access_token
from mock_providers.api.stand_in import StandInApi
from mock_providers.providers.mockgoogle.api import GoogleApi
from mock_providers.providers.mockhub.api import GitHubApi
from mock_providers.providers.mockslack.api import SlackApi
from mock_providers.testing.browser import ScriptedUser
from mock_providers.testing.client import (
    ConnectLink,
    Elicitation,
    Recorder,
    accept,
    connect_url,
    mcp_client,
    retry,
)
from mock_providers.testing.providers import ProviderKnobs, SlowApi
from mock_providers.testing.servers import AppFactory, DemoServers
from mock_providers.testing.tools import Tools
from service.observability.tracing import Tracing


class Mcpuc:
    """The running stack; `data_dir` is fresh (its SQLite store and dev AS keys live there)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        tools: Tools = None,
        app: AppFactory | None = None,
        tracing: Tracing | None = None,
        **settings_overrides: Any,
    ) -> None:
        """`settings_overrides` are Settings fields (e.g. `elicitation_ttl=1`); `tracing` receives
        the server's spans (`service.observability.tracing.tracing_with(SimpleSpanProcessor(exporter))`).
        `tools` adds tool packages to our server, and only those: each a `register` function, an
        installed package's entry-point name or a `package.module:function` reference, each
        registered once. `app(settings)` serves your own server instead, with the connect flow
        embedded (`UrlConnect`), against the same mock providers."""
        self._slow: SlowApi | None = None
        # Installed packages' tools come only when a test names them (`tools`).
        settings_overrides.setdefault("tool_entry_points", False)
        self.servers = DemoServers(
            data_dir,
            overrides=settings_overrides,
            tools=tools,
            app=app,
            presets=True,
            wrap=self._wrap,
            tracing=tracing,
        )
        self._providers: ProviderKnobs | None = None
        self._recorders: dict[int, Recorder] = {}  # id(client) -> what it received

    def _wrap(self, name: str, app: Any) -> Any:
        if name != "providers":
            return app
        self._slow = SlowApi(app)
        return self._slow

    def start(self) -> Mcpuc:
        self.servers.start()
        assert self._slow is not None
        self._providers = ProviderKnobs(self.servers.mockhub, self._slow)
        return self

    def stop(self) -> None:
        self.servers.stop()

    # -- the interface ---------------------------------------------------------------------------

    @property
    def mcp_url(self) -> str:
        return self.servers.mcp_url

    @property
    def data_dir(self) -> Path:
        return self.servers.data_dir

    @property
    def providers(self) -> ProviderKnobs:
        assert self._providers is not None, "the stack is not started"
        return self._providers

    def token(self, user: str) -> str:
        """A dev bearer token for `user`, signed by the stack's dev authorization server."""
        return mint_access_token(self.data_dir, user)

    @asynccontextmanager
    async def client(
        self, user: str, mode: str = "legacy", *, elicitation: Elicitation = "url"
    ) -> AsyncIterator[Client]:
        """The SDK `Client` with `user`'s bearer; `mode` is "legacy" (2025-11-25), "2026-07-28" or
        "auto". `elicitation` is what it declares: "url" (URL mode), "form" (form mode only) or
        "none", as most clients in use (docs/clients.md): those get the link in a tool error.
        `recorder(client)` holds what it received."""
        async with mcp_client(
            self, user, mode, on_url=accept, token=self.token(user), elicitation=elicitation
        ) as (client, recorder):
            self._recorders[id(client)] = recorder
            try:
                yield client
            finally:
                del self._recorders[id(client)]

    def recorder(self, client: Client) -> Recorder:
        """What `client` (open, from `client()`) received; `await recorder(client).wait_completed(id)`
        waits for the legacy revision's completion notification."""
        return self._recorders[id(client)]

    async def connect_url(
        self, client: Client, tool: str, arguments: dict[str, Any] | None = None
    ) -> ConnectLink:
        """Call `tool` expecting a connect link: a URL elicitation (either revision; its `url`,
        `elicitation_id` and, on 2026-07-28, `request_state`) or, for a client without URL mode,
        the link in a tool error (`via == "tool_error"`, `text` what the model reads)."""
        return await connect_url(client, tool, arguments)

    async def retry(
        self, client: Client, link: ConnectLink, tool: str, arguments: dict[str, Any] | None = None
    ) -> Any:
        """Call `tool` again after the browser leg: the tool's result (CallToolResult). After a URL
        elicitation on the legacy revision it first awaits the completion notification for `link`
        (5 s at most); after a link in a tool error it calls again, as the model does when the user
        says they are done."""
        if link.request_state is None and link.via == "elicitation":
            await self.recorder(client).wait_completed(link.elicitation_id)
        return await retry(client, link, tool, arguments)

    @overload
    def api(self, provider: Literal["github", "mockhub"]) -> GitHubApi: ...
    @overload
    def api(self, provider: Literal["google"]) -> GoogleApi: ...
    @overload
    def api(self, provider: Literal["slack"]) -> SlackApi: ...
    @overload
    def api(self, provider: str) -> StandInApi: ...
    def api(self, provider: str) -> StandInApi:
        """The stand-in serving `provider`'s API (where its `api_base_url` points): `route()` gives
        it an answer, `throttle()` 429s, `calls` what it answered; GitHub's, Google's and Slack's
        have their built-in surfaces and world (docs/mock-providers.md, "Stand-ins for real APIs")."""
        return self.servers.stand_in(provider)

    def browser(self, user: str) -> ScriptedUser:
        """A scripted user signed in to the dev AS as `user`, with its own cookie jar."""
        return ScriptedUser(user)
