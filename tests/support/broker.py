"""A ConnectionBroker on a given store, without the app around it (unit tests of the broker)."""

from __future__ import annotations

import time

from service.flow.connect import ConnectFlow
from service.flow.lifecycle import TokenLifecycle
from service.mcp.broker import ConnectionBroker
from service.mcp.completion.hub import CompletionHub
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings
from token_store import Store


def broker_on(settings: Settings, store: Store, outbound: OutboundHttp) -> ConnectionBroker:
    """The caller closes `outbound`."""
    return ConnectionBroker(
        settings,
        store,
        CompletionHub(),
        TokenLifecycle(store, outbound, timeout_seconds=1),
        ConnectFlow(settings, store, outbound, clock=time.time),
        outbound.client,
    )
