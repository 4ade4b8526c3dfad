"""Long-lived objects one server process shares: the store, the outbound HTTP client, the hub,
the connect flow, and what an operator sees (metrics, tracing, flow events).

Built by the app factory and opened in the app lifespan; no module-level state.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import httpx

from service.flow.connect import ConnectFlow
from service.flow.keepalive import KeepAliveSweep
from service.flow.lifecycle import TokenLifecycle
from service.flow.operator import Operator
from service.mcp.completion.bus import CompletionBus, LocalBus, PostgresBus, RedisBus
from service.mcp.completion.hub import CompletionHub
from service.mcp.provider_session import ProviderCalls
from service.observability.flow_events import FlowEvents
from service.observability.logs import Pseudonyms
from service.observability.metrics import Metrics
from service.observability.observed_store import ObservedStore
from service.observability.tracing import Tracing, tracing_from_environment
from service.observability.webhooks import ConnectionEvents, WebhookSender
from service.providers.addresses import Resolve, resolve_host
from service.providers.catalogue import ProviderConfig, resolve_discovery
from service.providers.mcp_downstream import DownstreamContext, resolve_downstream
from service.providers.outbound_http import OutboundHttp
from service.providers.registration import ClientRegistrations
from service.settings import Settings
from token_store import KeyRing, Store, StoreUnavailable, open_store

logger = logging.getLogger(__name__)

CLIENT_NAME = "mcp-url-connect"  # how this server names itself to authorization servers it registers at
EXPIRY_SWEEP_SECONDS = 1.0  # how soon a session hears that its link expired
STORE_RETRY_SECONDS = 1.0  # how often a replica that started without its store tries again


def start_up_outbound(timeout_seconds: float) -> OutboundHttp:
    """Outbound HTTP for discovery at start-up: bounded like any other, but a new connection per
    request. A start makes a handful of requests over seconds (longer on a loaded machine); a peer
    closing a kept-alive connection meanwhile (Node's default keep-alive is 5 s) must not fail it."""
    return OutboundHttp(
        timeout_seconds, pool=httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    )


def downstream_context(
    settings: Settings,
    name: str,
    registrations: ClientRegistrations,
    *,
    clock: Callable[[], float] = time.time,
    resolve: Resolve = resolve_host,
) -> DownstreamContext:
    """What resolving the remote MCP server `name` needs of this server (at start-up, and again
    when it moves to another authorization server: service/mcp/gateway/moves.py)."""
    return DownstreamContext(
        redirect_uri=settings.callback_url(name),
        client_metadata_url=settings.client_metadata_url(name),
        client_name=CLIENT_NAME,
        registrations=registrations,
        clock=clock,
        resolve=resolve,
    )


async def resolve_providers(
    settings: Settings,
    http: httpx.AsyncClient,
    registrations: ClientRegistrations,
    *,
    clock: Callable[[], float] = time.time,
    resolve: Resolve = resolve_host,
) -> Settings:
    """`settings` with every provider ready for the flow: endpoints filled from a `discovery_url`,
    and each remote MCP server (`kind = "mcp"`) discovered and registered with
    (service/providers/mcp_downstream.py). Raises `ProviderError` naming the provider and step."""
    providers: dict[str, ProviderConfig] = {}
    for name, provider in settings.providers.items():
        if provider.kind == "mcp":
            context = downstream_context(settings, name, registrations, clock=clock, resolve=resolve)
            providers[name] = await resolve_downstream(provider, http, context)
        else:
            providers[name] = await resolve_discovery(provider, http)
    return settings.replace(providers=providers)


class Runtime:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        # Every TTL, expiry and timestamp in the process reads this clock, so tests can move
        # time instead of sleeping.
        self.clock = clock
        self.keyring = KeyRing.parse(settings.encryption_keys)
        self.metrics = Metrics()
        # OTEL_* are the OpenTelemetry standard's own variables, read where its SDK would read them.
        self.tracing = tracing if tracing is not None else tracing_from_environment(os.environ)
        self.events = FlowEvents(self.metrics, Pseudonyms(settings.session_secret), self.tracing, clock)
        # The store every part holds from the start; the backend behind it is opened in
        # `running` (or later, by a replica that started while its store was down).
        self.store = ObservedStore(self.metrics)
        self.hub = CompletionHub(clock, self.metrics, on_expired=self.events.expired)
        self.completions = completion_bus(settings, self.hub, self.store, on_resubscribed=self._resync)
        # One TLS context and one connection pool for every outbound call.
        self.outbound = OutboundHttp(settings.http_timeout)
        self.http = self.outbound.client
        # What tools' provider API calls share (service/mcp/provider_session.py).
        self.provider_calls = ProviderCalls(self.http, self.metrics, settings.tool_call_budget_seconds)
        # The webhook sender and the keep-alive sweep run in servers; a CLI command turns them off.
        self.run_sweeps = True
        # Connection health events into the store's outbox, sent by every replica's sender.
        self.connection_events = ConnectionEvents(self.store, bool(settings.webhook_url), clock)
        self.webhook_sender = (
            WebhookSender(
                self.store,
                self.http,
                settings.webhook_url,
                settings.webhook_secret,
                timeout_seconds=settings.http_timeout,
                metrics=self.metrics,
                clock=clock,
            )
            if settings.webhook_url
            else None
        )
        self.lifecycle = TokenLifecycle(
            self.store,
            self.outbound,
            timeout_seconds=settings.http_timeout,
            clock=clock,
            metrics=self.metrics,
            connection_events=self.connection_events,
        )
        # The one owner of every elicitation's status (service/flow/connect.py), shared by the
        # broker (tool calls) and the browser routes.
        self.flow = ConnectFlow(
            settings,
            self.store,
            self.outbound,
            clock=clock,
            publish=self.completions.publish,
            events=self.events,
            connection_events=self.connection_events,
        )
        # Refreshes grants before they die unused (providers' `refresh_keepalive`).
        self.keepalive = KeepAliveSweep(
            self.store, settings.providers, self.lifecycle, self.metrics, clock=clock
        )
        # Operators' actions over every user's connections (the CLI and the admin API).
        self.operator = Operator(
            self.store,
            settings.providers,
            self.outbound,
            self.flow,
            default_issuer=settings.auth_issuer,
            events=self.connection_events,
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        try:
            async with anyio.create_task_group() as tasks:
                if not await self._open_store():
                    # Start anyway (health 200, readiness 503) and become ready by ourselves.
                    tasks.start_soon(self._open_store_when_reachable)
                tasks.start_soon(self._sweep_expired)
                if self.webhook_sender is not None and self.run_sweeps:
                    tasks.start_soon(self.webhook_sender.run)
                if self.keepalive.active and self.run_sweeps:
                    tasks.start_soon(self.keepalive.run, self.settings.keepalive_sweep_seconds)
                async with self.completions.running():
                    yield self
                tasks.cancel_scope.cancel()
        finally:
            await self.store.close()
            await self.outbound.aclose()
            self.tracing.shutdown()

    async def _open_store(self) -> bool:
        try:
            backend = await open_store(
                self.settings.effective_store_url,
                self.keyring,
                prefix=self.settings.redis_prefix,
                clock=self.clock,
                wait_replicas=self.settings.store_wait_replicas,
                wait_timeout=self.settings.store_wait_timeout,
                allow_plaintext_redis=self.settings.allow_plaintext_redis,
                slot_tags=self.settings.slot_tags(),
            )
        except StoreUnavailable as exc:
            if not (self.settings.uses_redis or self.settings.uses_postgres):
                raise  # a local file that cannot be opened is a configuration error
            # The message names the failure's class or the schema step, never the URL.
            logger.warning("store: %s at start-up; retrying every %.0f s", exc, STORE_RETRY_SECONDS)
            return False
        self.store.attach(backend)
        return True

    async def _open_store_when_reachable(self) -> None:
        while True:
            await anyio.sleep(STORE_RETRY_SECONDS)
            if await self._open_store():
                break
        logger.info("store: connected")
        await self._resync()

    async def _sweep_expired(self) -> None:
        while True:
            await anyio.sleep(EXPIRY_SWEEP_SECONDS)
            await self.hub.expire_due()

    async def _resync(self) -> None:
        """The bus (or the store) was away: deliver what finished meanwhile, from the store."""
        if self.store.is_open:
            delivered = await self.hub.resync(self.store.get_elicitation)
            if delivered:
                logger.info("completion: %d notification(s) delivered after reconnecting", delivered)


def completion_bus(
    settings: Settings, hub: CompletionHub, store: Store, *, on_resubscribed: Callable[[], Awaitable[None]]
) -> CompletionBus:
    """The bus of the configured store's kind: Redis pub/sub, PostgreSQL LISTEN/NOTIFY (the store
    confirms each id it names), or the process itself for SQLite."""
    if settings.uses_redis:
        return RedisBus(
            settings.effective_store_url,
            settings.redis_prefix,
            hub,
            on_resubscribed=on_resubscribed,
            allow_plaintext=settings.allow_plaintext_redis,
        )
    if settings.uses_postgres:
        return PostgresBus(
            settings.effective_store_url, hub, store.get_elicitation, on_resubscribed=on_resubscribed
        )
    return LocalBus(hub)
