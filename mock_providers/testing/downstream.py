"""An OAuth-protected MCP server to put behind the gateway, served on a loopback port
(mock_providers/providers/mcp_downstream), and what a test needs to configure it as a provider.

    downstream = DownstreamServer().start()
    provider = await downstream.resolved_provider(stack.demo.settings, "linear")
    stack = DemoServers(tmp_path, providers={"linear": provider}).start()

`resolved_provider` runs what `serve` runs at start-up for a `kind = "mcp"` provider (discovery,
then registration kept in the stack's own store), so the stack then starts with it resolved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mock_providers.providers.mcp_downstream.server import McpDownstream
from mock_providers.testing.servers import HOST, ThreadedServers, free_port
from service.providers.catalogue import ProviderConfig, build_provider
from service.runtime import resolve_providers, start_up_outbound
from service.settings import Settings
from token_store import KeyRing, open_store


@dataclass
class DownstreamServer:
    """The stand-in on `http://127.0.0.1:<port>`: its MCP endpoint is `url`, its knobs and records
    on `stand_in` (`McpDownstream`)."""

    port: int = field(default_factory=free_port)
    name: str = "Downstream"
    stand_in: McpDownstream = field(init=False)
    _threaded: ThreadedServers | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.stand_in = McpDownstream(f"http://{HOST}:{self.port}", name=self.name)

    @property
    def url(self) -> str:
        return self.stand_in.url

    def start(self) -> DownstreamServer:
        self._threaded = ThreadedServers([(self.stand_in.app, self.port)])
        self._threaded.start()
        return self

    def stop(self) -> None:
        if self._threaded is not None:
            self._threaded.stop()

    def provider_table(self, **fields: Any) -> dict[str, Any]:
        """A `[providers.<name>]` table for it: `kind = "mcp"`, its URL, and (it listens on
        loopback) `allow_private_network`."""
        return {
            "kind": "mcp",
            "url": self.url,
            "display_name": self.name,
            "allow_private_network": True,
            **fields,
        }

    async def resolved_provider(self, settings: Settings, name: str, **fields: Any) -> ProviderConfig:
        """The provider `name` for a server running on `settings`, discovered and registered with as
        `serve` does at start-up, its registration kept in that server's store."""
        return (await resolved_providers(settings, {name: self.provider_table(**fields)}))[name]


async def resolved_providers(
    settings: Settings, tables: dict[str, dict[str, Any]]
) -> dict[str, ProviderConfig]:
    """`tables` as providers of a server on `settings`, resolved as `serve` does."""
    providers = {name: build_provider(name, table, {}) for name, table in tables.items()}
    outbound = start_up_outbound(settings.http_timeout)
    store = await open_store(
        settings.effective_store_url,
        KeyRing.parse(settings.encryption_keys),
        prefix=settings.redis_prefix,
        allow_plaintext_redis=settings.allow_plaintext_redis,
    )
    try:
        resolved = await resolve_providers(settings.replace(providers=providers), outbound.client, store)
    finally:
        await store.close()
        await outbound.aclose()
    return {name: resolved.providers[name] for name in tables}
