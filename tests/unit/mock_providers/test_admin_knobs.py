"""The mock providers' admin endpoint (`POST /_admin/mockhub`): how scripts/drill.py, a separate
process, sets MockHub's failure knobs. Loopback peers only."""

from __future__ import annotations

from pathlib import Path

import httpx

from mock_providers import create_mock_providers_app
from mock_providers.app import ADMIN_PATH
from mock_providers.demo import build_demo
from mock_providers.providers.mockhub.server import MockHub


def admin_client(tmp_path: Path, peer: str) -> tuple[httpx.AsyncClient, MockHub]:
    demo = build_demo("127.0.0.1", 8000, 8001, tmp_path)
    app = create_mock_providers_app(demo.providers)
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    hub: MockHub = app.state.mockhub
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8001"), hub


async def test_a_loopback_peer_sets_the_knobs(tmp_path: Path) -> None:
    http, hub = admin_client(tmp_path, "127.0.0.1")
    async with http:
        answer = await http.post(ADMIN_PATH, json={"token_endpoint_mode": "hang", "hang_seconds": 2})
        assert answer.status_code == 200
        knobs = answer.json()["knobs"]
        assert (knobs["token_endpoint_mode"], knobs["api_mode"], knobs["hang_seconds"]) == ("hang", "ok", 2.0)
        assert (hub.token_endpoint_mode, hub.hang_seconds) == ("hang", 2.0)
        refused = await http.post(ADMIN_PATH, json={"token_endpoint_mode": "broken"})
        assert refused.status_code == 400
        assert (await http.post(ADMIN_PATH, json={"no_such_knob": "wrong"})).status_code == 400
    assert hub.token_endpoint_mode == "hang"


async def test_any_other_peer_gets_404(tmp_path: Path) -> None:
    http, hub = admin_client(tmp_path, "192.0.2.10")
    async with http:
        answer = await http.post(ADMIN_PATH, json={"token_endpoint_mode": "500"})
    assert answer.status_code == 404
    assert hub.token_endpoint_mode == "ok"
