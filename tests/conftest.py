"""Fixtures every suite shares: the scripted browsers. Also loads the testing kit's pytest plugin
(the `mcpuc` fixture) unless the installed package already registers it through its `pytest11`
entry point (an editable install made before the entry point existed does not)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from importlib.metadata import entry_points

import pytest

from mock_providers.testing.browser import Browser

PLUGIN = "mock_providers.testing.plugin"

pytest_plugins = [] if any(ep.value == PLUGIN for ep in entry_points(group="pytest11")) else [PLUGIN]


@pytest.fixture
async def browsers() -> AsyncIterator[Callable[[], Browser]]:
    """A factory of scripted browsers, each with its own cookie jar; all closed afterwards."""
    made: list[Browser] = []

    def new() -> Browser:
        made.append(Browser())
        return made[-1]

    yield new
    for browser in made:
        await browser.aclose()


@pytest.fixture
def browser(browsers: Callable[[], Browser]) -> Browser:
    return browsers()


@pytest.fixture
def other_browser(browsers: Callable[[], Browser]) -> Browser:
    return browsers()
