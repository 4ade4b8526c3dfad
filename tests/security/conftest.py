"""Attack tests: fixtures shared by every family, and the `security` marker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.attack import Servers, running


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "security: attack tests against the running demo (tests/security)")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Servers]:
    """One demo per module: tests use distinct users, so they do not see each other's state."""
    yield from running(tmp_path_factory, request.module.__name__.rsplit(".", 1)[-1])
