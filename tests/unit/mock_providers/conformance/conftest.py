"""The fixture every conformance test adds to tests/unit/mock_providers/conftest.py: `http`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from tests.support.mock_provider_setup import BASE


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for `app`, in process (no sockets)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client
