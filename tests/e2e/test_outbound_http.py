"""Outbound HTTP after start-up: a whole connect flow builds no TLS context
(service/providers/outbound_http.py).

Building one loads the CA bundle (tens of milliseconds); the server builds it once, in `Runtime`.
The servers run in this process (threads), so counting `ssl` calls whose stack passes through the
server's code (service/, connect_routes/) sees exactly what the server builds; the test's own
clients are not counted.
"""

from __future__ import annotations

import ssl
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import legacy_elicitation, mcp_client
from mock_providers.testing.servers import DemoServers
from service.providers.outbound_http import KEEPALIVE_EXPIRY_SECONDS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SERVER_CODE = (str(ROOT / "service") + "/", str(ROOT / "connect_routes") + "/")


def _from_server_code() -> bool:
    return any(frame.filename.startswith(SERVER_CODE) for frame in traceback.extract_stack())


@pytest.fixture
def tls_contexts_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the `ssl` calls made on the server's behalf while the fixture is active."""
    calls: list[str] = []

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _from_server_code():
                calls.append(name)
            return original(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        ssl, "create_default_context", counting("create_default_context", ssl.create_default_context)
    )
    monkeypatch.setattr(
        ssl.SSLContext,
        "load_verify_locations",
        counting("load_verify_locations", ssl.SSLContext.load_verify_locations),
    )
    yield calls


async def test_a_whole_connect_flow_builds_no_tls_context(
    servers: DemoServers, browser: Browser, tls_contexts_built: list[str]
) -> None:
    async with mcp_client(servers, "alice", "legacy", on_url=lambda url: None) as (client, rec):
        error = await legacy_elicitation(client)
        [elicitation] = error.elicitations
        assert elicitation.url is not None
        page = await browser.complete_connect(elicitation.url, username="alice")  # login + consent
        assert page.status_code == 200, page.text
        with anyio.fail_after(10):
            await rec.completed.wait()
        result = await client.call_tool("whoami", {})  # userinfo with the stored token
        assert not result.is_error
    assert tls_contexts_built == []


def test_the_counter_sees_a_context_built_by_server_code(tls_contexts_built: list[str]) -> None:
    # Without this, an empty list above could mean the counter never fires.
    from service.providers.outbound_http import OutboundHttp

    OutboundHttp(1.0)
    assert "load_verify_locations" in tls_contexts_built or "create_default_context" in tls_contexts_built


def test_idle_connections_expire_before_the_peer_closes_them() -> None:
    assert KEEPALIVE_EXPIRY_SECONDS < 5  # uvicorn's default keep-alive timeout
