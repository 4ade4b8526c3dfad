from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from mock_providers.testing.servers import free_port
from tests.integration.node_servers import NodeServer, need_node
from tests.integration.stack import OIDC_CLIENT_ID, Stack, discovered, mock_server_spec, oidc_provider_spec


def pytest_configure(config: pytest.Config) -> None:
    # Until pyproject.toml lists it (markers = [...]), register the marker here.
    config.addinivalue_line(
        "markers", "integration: against third-party OAuth servers from npm (tests/integration/node)"
    )


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """Settings and ports only; a `*_stack` fixture starts the servers once the provider is known."""
    s = Stack(tmp_path / "data")
    yield s
    s.stop()


@pytest.fixture
def client_secret() -> str:
    return secrets.token_urlsafe(32)


@pytest.fixture
def oidc_provider(stack: Stack, client_secret: str, tmp_path: Path) -> Iterator[NodeServer]:
    """oidc-provider with one confidential client whose redirect URI is our /callback/idp."""
    node = need_node("oidc-provider", (20, 19))
    args = [str(free_port()), OIDC_CLIENT_ID, client_secret, stack.redirect_uri]
    server = NodeServer(node, "oidc_provider.mjs", args, tmp_path / "oidc-provider.log").start()
    yield server
    server.stop()


@pytest.fixture
def oauth2_mock_server(tmp_path: Path) -> Iterator[NodeServer]:
    node = need_node("oauth2-mock-server", (22, 12))
    server = NodeServer(node, "oauth2_mock_server.mjs", [str(free_port())], tmp_path / "oauth2-mock.log")
    yield server.start()
    server.stop()


@pytest.fixture
async def oidc_stack(stack: Stack, oidc_provider: NodeServer, client_secret: str) -> Stack:
    """Our servers with `idp` = the oidc-provider instance, endpoints and issuer from discovery."""
    return stack.start(await discovered(oidc_provider_spec(oidc_provider.issuer), client_secret))


@pytest.fixture
async def mock_stack(stack: Stack, oauth2_mock_server: NodeServer, client_secret: str) -> Stack:
    """Our servers with `idp` = oauth2-mock-server, configured from its discovery document."""
    return stack.start(await discovered(mock_server_spec(oauth2_mock_server.issuer), client_secret))
