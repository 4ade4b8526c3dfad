"""The pytest plugin (entry point `mcpuc`, installed with mcp-url-connect[testing]): fixtures
`mcpuc` (the running stack) and `mcpuc_tools` (override it to add your tools). docs/testing.md.

Scope: one stack per test by default; `mcpuc_scope = module` in the pytest ini options (or
`--mcpuc-scope=module`) shares one per module. The fixture is synchronous on purpose: the servers
live on their own thread, so one stack can serve tests that each run in their own event loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mock_providers.testing.stack import Mcpuc
from mock_providers.testing.tools import Tools

SCOPES = ("function", "module", "package", "session")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "mcpuc_scope", "scope of the mcpuc fixture: function (default) or module", default="function"
    )
    parser.addoption("--mcpuc-scope", choices=SCOPES, default=None, help="scope of the mcpuc fixture")


def _scope(fixture_name: str, config: pytest.Config) -> Any:
    scope = config.getoption("--mcpuc-scope") or config.getini("mcpuc_scope")
    if scope not in SCOPES:
        raise pytest.UsageError(f"mcpuc_scope must be one of {SCOPES}, not {scope!r}")
    return scope


@pytest.fixture(scope="session")
def mcpuc_tools() -> Tools:
    """Override to return the tool packages to serve: `register(server, broker)` (which adds your
    tools, with `@uses(broker.session, provider, scopes=...)`), an installed package's entry-point
    name or a `package.module:function` reference, or a list of them; each registers once, and no
    other installed package's tools come along. None: our own tools only. Keep the override
    session-scoped (it returns names and functions), so it suits any `mcpuc` scope."""
    return None


@pytest.fixture(scope=_scope)
def mcpuc(tmp_path_factory: pytest.TempPathFactory, mcpuc_tools: Tools) -> Iterator[Mcpuc]:
    """The demo stack on free loopback ports with a fresh data dir; stopped afterwards."""
    stack = Mcpuc(tmp_path_factory.mktemp("mcpuc") / "data", tools=mcpuc_tools).start()
    try:
        yield stack
    finally:
        stack.stop()
