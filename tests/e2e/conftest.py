from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mock_providers.testing.replicas import LifecycleStack
from mock_providers.testing.servers import DemoServers
from tests.support.markers import demo_settings
from tests.support.webhook_receiver import Receiver, serving
from token_store import Store


@pytest.fixture
def servers(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DemoServers]:
    """The demo for one test, with the settings a `demo_settings` marker overrides."""
    running = DemoServers(tmp_path / "data", overrides=demo_settings(request.node)).start()
    yield running
    running.stop()


@pytest.fixture
async def store(stack: LifecycleStack) -> AsyncIterator[Store]:
    """The store of a module's two-instance `stack`, opened in the test's loop."""
    async with stack.store() as opened:
        yield opened


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A webhook receiver for a module's stack (tests/support/webhook_receiver.py)."""
    with serving() as running:
        yield running
