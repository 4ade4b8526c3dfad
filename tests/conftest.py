"""Fixtures every suite shares: the scripted browsers. (The testing kit's `mcpuc` fixture comes
from its pytest plugin, registered by the package's `pytest11` entry point: `make` installs it.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from mock_providers.testing.browser import Browser


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
