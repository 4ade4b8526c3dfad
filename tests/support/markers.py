"""The `demo_settings` marker: settings a module (or test) overrides in the demo its `servers`
fixture starts, so each suite defines `servers` once (tests/e2e/conftest.py,
tests/security/conftest.py) and a module says only what differs:

    pytestmark = [pytest.mark.e2e, pytest.mark.demo_settings(retry_wait_seconds=0.5)]
"""

from __future__ import annotations

import pytest


def demo_settings(node: pytest.Item | pytest.Collector) -> dict[str, object]:
    """The settings overrides of the closest `demo_settings` marker (none: the demo's defaults)."""
    marker = node.get_closest_marker("demo_settings")
    return dict(marker.kwargs) if marker else {}
