"""service/mcp/broker.py: a 2026-07-28 requestState minted for one provider is refused for another,
before its nonce is consumed (the SDK already binds it to the tool and arguments; this is the
check behind that)."""

from __future__ import annotations

import secrets
from pathlib import Path
from types import SimpleNamespace

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from mock_providers.demo import build_demo
from service.mcp.revisions.v2026_07_28 import RequestState
from service.providers.outbound_http import OutboundHttp
from tests.support.broker import broker_on
from token_store import KeyRing, SQLiteStore


async def test_request_state_for_another_provider_is_refused_before_its_nonce_is_used(tmp_path: Path) -> None:
    settings = build_demo("127.0.0.1", 9200, 9201, tmp_path).settings
    store = await SQLiteStore.open(tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys))
    outbound = OutboundHttp(1.0)
    broker = broker_on(settings, store, outbound)
    nonce = secrets.token_urlsafe(32)
    await store.put_nonce(nonce, 60)
    state = RequestState("e" * 43, nonce, "otherhub").dumps()
    ctx = SimpleNamespace(
        protocol_version="2026-07-28", request_state=state, input_responses=None, headers={}
    )
    token = AccessToken(
        token="t", client_id="c", scopes=[], subject="alice", claims={"iss": settings.auth_issuer}
    )
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        with pytest.raises(MCPError) as refused:
            await broker.require(ctx, "mockhub")  # type: ignore[arg-type]
    finally:
        auth_context_var.reset(reset)
        await store.close()
    assert refused.value.error.code == INVALID_PARAMS
    assert "not valid for this tool" in refused.value.error.message
    reopened = await SQLiteStore.open(tmp_path / "store.sqlite3", KeyRing.parse(settings.encryption_keys))
    try:
        assert await reopened.take_nonce(nonce)  # untouched: refused before consuming anything
    finally:
        await reopened.close()
