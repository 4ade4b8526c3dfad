"""connect_routes/login.py, the browser login: it finds the issuer's metadata by
service/providers/discovery.py's
rules (RFC 8414 §3 and OpenID Connect Discovery URLs, the document's issuer compared), as the
bearer check does; and the checks end-to-end tests cannot reach (found by scripts/mutation_check.py):
it accepts only an ID token from the MCP authorization server's issuer, even if the issuer's
metadata (which authlib checks against) named another, and a sign-in result never replaces another
user already signed in in that browser (end to end, `GET /login` stops such a sign-in before it
starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from connect_routes.browser_session import session_middleware
from connect_routes.error_pages import ERROR_PAGES
from connect_routes.login import Login
from mock_providers.demo import build_demo
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings


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


ORIGIN = "https://as.example"
ISSUER = f"{ORIGIN}/tenant"  # an issuer with a path: the URL rules differ there
PATH_INSERTED = f"{ORIGIN}/.well-known/oauth-authorization-server/tenant"  # RFC 8414 §3.1


def issuer_serving(documents: dict[str, dict[str, Any]]) -> tuple[OutboundHttp, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        document = documents.get(str(request.url))
        return httpx.Response(404) if document is None else httpx.Response(200, json=document)

    return OutboundHttp(5.0, pool=httpx.MockTransport(handler)), asked


def login_app(settings: Settings, outbound: OutboundHttp) -> httpx.AsyncClient:
    app = Starlette(
        routes=Login(settings, outbound).routes(),
        middleware=[session_middleware(settings)],
        exception_handlers=dict(ERROR_PAGES),
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=settings.public_url)


def settings_for(tmp_path: Path) -> Settings:
    return build_demo("127.0.0.1", 9200, 9201, tmp_path).settings.replace(auth_issuer=ISSUER)


async def test_sign_in_uses_the_metadata_discovery_finds_and_fetches_it_once(tmp_path: Path) -> None:
    metadata = {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/authorize",
        "token_endpoint": f"{ISSUER}/token",
        "jwks_uri": f"{ISSUER}/jwks",
    }
    outbound, asked = issuer_serving({PATH_INSERTED: metadata})
    async with login_app(settings_for(tmp_path), outbound) as browser:
        first = await browser.get("/login", params={"next": "/connections"})
        again = await browser.get("/login", params={"next": "/connections"})
    for response in (first, again):
        assert response.status_code == 302, response.text
        assert response.headers["location"].startswith(f"{ISSUER}/authorize?")
    assert asked == [PATH_INSERTED]  # the first candidate, once: the client keeps what it found


async def test_metadata_naming_another_issuer_is_never_used(tmp_path: Path) -> None:
    forged = {"issuer": "https://evil.example", "authorization_endpoint": "https://evil.example/authorize"}
    outbound, asked = issuer_serving({PATH_INSERTED: forged})
    async with login_app(settings_for(tmp_path), outbound) as browser:
        response = await browser.get("/login", params={"next": "/connections"})
    assert response.status_code == 503
    assert "evil.example" not in response.headers.get("location", "")
    assert asked == [PATH_INSERTED]  # RFC 8414 §3.3: refused, and no other candidate tried
