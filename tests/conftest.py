"""Fixtures every suite shares: the scripted browsers, a store's key ring, PyYAML, a private
PostgreSQL server, a private Redis Sentinel group and a private Redis Cluster. (The testing kit's
`mcpuc` fixture comes from its pytest plugin, registered by the package's `pytest11` entry point:
`make` installs it.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType

import pytest

from mock_providers.testing.browser import Browser
from tests.needs import ClusterGroup, SentinelGroup
from tests.support.postgres import PostgresServer
from token_store import KeyRing


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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the session (skips locally without one, fails in CI)."""
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    """A primary, a replica and three sentinels for the session (skips locally without
    redis-server, fails in CI). Tests that fail it over leave it failed over: they name the
    primary through the sentinels, never by port."""
    with SentinelGroup(tmp_path_factory.mktemp("sentinel")) as group:
        yield group


@pytest.fixture(scope="session")
def cluster_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterGroup]:
    """Three Redis Cluster primaries for the session (skips locally without redis-server or
    redis-cli, fails in CI)."""
    with ClusterGroup(tmp_path_factory.mktemp("cluster")) as group:
        yield group


@pytest.fixture
def keyring() -> KeyRing:
    """One fresh key, for a store under test."""
    return KeyRing([("k1", KeyRing.generate_key())])


@pytest.fixture
def yaml() -> ModuleType:
    """PyYAML, for the deploy kit's files (skips, saying so, where it is not installed)."""
    return pytest.importorskip(
        "yaml",
        reason="PyYAML is not installed: the YAML files under deploy/ are not checked (pip install pyyaml)",
    )
