"""Attack tests: fixtures shared by every family, and the `security` marker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.attack import Servers, running
from tests.support.markers import demo_settings


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "security: attack tests against the running demo (tests/security)")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Servers]:
    """One recorded demo per module, with the settings its `demo_settings` marker overrides: tests
    use distinct users, so they do not see each other's state."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    yield from running(tmp_path_factory, name, **demo_settings(request.node))
