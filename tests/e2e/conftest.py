from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mock_providers.testing.servers import DemoServers


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[DemoServers]:
    running = DemoServers(tmp_path / "data").start()
    yield running
    running.stop()
