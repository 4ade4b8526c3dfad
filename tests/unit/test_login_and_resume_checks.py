"""Checks end-to-end tests cannot reach (found by scripts/mutation_check.py):

- the browser login accepts only an ID token from the MCP authorization server's issuer, even if
  the issuer's metadata (which authlib checks against) named another;
- a sign-in result never replaces another user already signed in in that browser (end to end,
  `GET /login` stops such a sign-in before it starts);
- a 2026-07-28 requestState minted for one provider is refused for another, before its nonce is
  consumed (the SDK already binds it to the tool and arguments; this is the check behind that).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from starlette.applications import Starlette

from connect_routes.browser_session import session_middleware
from connect_routes.error_pages import ERROR_PAGES
from connect_routes.login import Login
from mock_providers.demo import build_demo
from service.outbound_http import OutboundHttp
from service.revision_2026 import RequestState
from tests.support.broker import broker_on
from token_store import KeyRing, SQLiteStore


async def test_login_refuses_an_id_token_from_another_issuer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = build_demo("127.0.0.1", 9200, 9201, tmp_path).settings
    login = Login(settings)

    async def forged(request: Any) -> dict[str, Any]:
        return {"userinfo": {"iss": "https://evil.example", "sub": "alice"}}

    monkeypatch.setattr(login._client, "authorize_access_token", forged)
    app = Starlette(
        routes=login.routes(),
        middleware=[session_middleware(settings)],
        exception_handlers=dict(ERROR_PAGES),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=settings.public_url) as browser:
        response = await browser.get("/login/callback?code=x&state=y")
    assert response.status_code == 400
    assert "another issuer" in response.text
    assert "set-cookie" not in response.headers  # no session was started


async def test_login_callback_never_replaces_another_signed_in_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = build_demo("127.0.0.1", 9200, 9201, tmp_path).settings
    login = Login(settings)
    signing_in = {"sub": "alice"}

    async def answered(request: Any) -> dict[str, Any]:
        return {"userinfo": {"iss": settings.auth_issuer, **signing_in}}

    monkeypatch.setattr(login._client, "authorize_access_token", answered)
    app = Starlette(
        routes=login.routes(),
        middleware=[session_middleware(settings)],
        exception_handlers=dict(ERROR_PAGES),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=settings.public_url) as browser:
        signed_in = await browser.get("/login/callback?code=x&state=y")
        assert signed_in.status_code == 303 and "set-cookie" in signed_in.headers
        alices = browser.cookies["mcpuc_session"]
        signing_in["sub"] = "mallory"
        response = await browser.get("/login/callback?code=x&state=y")
        assert response.status_code == 409, response.text
        assert "signed in here as <strong>alice</strong>" in response.text
        assert browser.cookies["mcpuc_session"] == alices  # Alice's session, unchanged
        signing_in["sub"] = "alice"  # the same user signing in again is no switch
        assert (await browser.get("/login/callback?code=x&state=y")).status_code == 303


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
