"""The store as the rest of the process uses it: every operation that fails is counted.

A thin proxy (`mcpuc_store_errors_total{operation}`), so neither backend needs to know about
metrics. Written by hand because the label is the operation's name, which only the caller knows.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from service.observability.metrics import Metrics
from token_store import Store, StoreUnavailable


class ObservedStore:
    def __init__(self, store: Store, metrics: Metrics) -> None:
        self.backend = store
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        # Called only for names not yet on the proxy: each operation is wrapped once, then
        # found directly (a store call is on every tool call's path).
        attribute = getattr(self.backend, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        wrapped = self._observed(name, attribute)
        setattr(self, name, wrapped)
        return wrapped

    def _observed(self, name: str, operation: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(operation)
        async def observed(*args: Any, **kwargs: Any) -> Any:
            try:
                return await operation(*args, **kwargs)
            except StoreUnavailable:
                self._metrics.store_errors.labels(operation=name).inc()
                raise

        return observed
