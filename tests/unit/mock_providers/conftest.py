"""The fixtures every mock provider test uses: the mock providers' app (every provider served, each
with its client: tests/support/mock_provider_setup.py), each provider's object, and an
in-process client (no sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from mock_providers import MockGoogle, MockHub, MockSlack, create_mock_providers_app
from tests.support.mock_provider_setup import BASE, full_config


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def app(data_dir: Path) -> Starlette:
    return create_mock_providers_app(full_config(data_dir))


@pytest.fixture
def hub(app: Starlette) -> MockHub:
    mockhub: MockHub = app.state.mockhub
    return mockhub


@pytest.fixture
def google(app: Starlette) -> MockGoogle:
    mockgoogle: MockGoogle = app.state.mockgoogle
    return mockgoogle


@pytest.fixture
def slack(app: Starlette) -> MockSlack:
    mockslack: MockSlack = app.state.mockslack
    return mockslack


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        yield http
