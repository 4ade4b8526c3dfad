from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.e2e.browser import Browser
from tests.e2e.harness import DemoServers


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[DemoServers]:
    running = DemoServers(tmp_path / "data").start()
    yield running
    running.stop()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    b = Browser()
    yield b
    await b.aclose()


@pytest.fixture
async def other_browser() -> AsyncIterator[Browser]:
    b = Browser()
    yield b
    await b.aclose()
