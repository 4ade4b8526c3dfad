"""mock_providers/app.py: which providers the app serves."""

from __future__ import annotations

from pathlib import Path

import httpx

from mock_providers import (
    create_mock_providers_app,
)
from tests.support.mock_provider_setup import (
    BASE,
    make_config,
)


async def test_optional_providers_are_off_by_default(tmp_path: Path) -> None:
    app = create_mock_providers_app(make_config(tmp_path / "data"))
    assert app.state.mockgoogle is None and app.state.mockslack is None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        assert (await http.get("/mockgoogle/.well-known/openid-configuration")).status_code == 404
        assert (await http.post("/mockslack/oauth.v2.access")).status_code == 404
        assert (await http.get("/.well-known/oauth-authorization-server/mockhub")).status_code == 200
