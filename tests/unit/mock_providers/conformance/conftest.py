"""The two fixtures every conformance test uses: the mock providers' app and an in-process client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from mock_providers import create_mock_providers_app
from tests.support.mock_conformance import conformance_config
from tests.support.mock_provider_setup import BASE


@pytest.fixture
def app(tmp_path: Path) -> Starlette:
    """Every mock provider, as `conformance_config` configures them, with its state under tmp_path."""
    return create_mock_providers_app(conformance_config(tmp_path / "data"))


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for `app`, in process (no sockets)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client
