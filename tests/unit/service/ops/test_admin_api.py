"""service/ops/admin_api.py: its OpenAPI document (docs/admin-openapi.json) describes exactly its routes;
its checks, one by one; its settings refused when they would share a port or hold a raw token."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.routing import Route

from service.ops.admin_api import (
    admin_app,
    admin_bearer_has_admin_scope,
    admin_request_on_admin_port,
    static_admin_token_matches,
)
from service.runtime import Runtime
from service.settings import Settings, SettingsError

OPENAPI = Path(__file__).resolve().parents[4] / "docs" / "admin-openapi.json"


def valid_settings(**changes: Any) -> Settings:
    key = base64.urlsafe_b64encode(b"K" * 32).decode().rstrip("=")
    return Settings(
        public_url="https://mcp.example.com",
        auth_issuer="https://as.example.com",
        login_client_id="mcp-login",
        login_client_secret="login-client-secret-value",
        session_secret="session-secret-" + "s" * 32,
        encryption_keys=f"k1:{key}",
        request_state_keys=key,
    ).replace(**changes)


def routes_of_openapi(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method.upper()) for path, item in document["paths"].items() for method in item}


def test_the_openapi_document_describes_exactly_the_admin_routes() -> None:
    app = admin_app(Runtime(valid_settings(admin_port=9465)))
    served = {
        (route.path, method)
        for route in app.routes
        if isinstance(route, Route)
        for method in (route.methods or ()) - {"HEAD"}
    }
    assert routes_of_openapi(json.loads(OPENAPI.read_text())) == served


def request_on(port: int) -> Request:
    return Request(
        {"type": "http", "method": "GET", "path": "/", "headers": [], "server": ("127.0.0.1", port)}
    )


def test_admin_request_on_admin_port() -> None:
    assert admin_request_on_admin_port(request_on(9465), 9465)
    assert not admin_request_on_admin_port(request_on(8000), 9465)
    assert not admin_request_on_admin_port(Request({"type": "http", "headers": []}), 9465)  # no server


def test_static_admin_token_matches() -> None:
    configured = hashlib.sha256(b"the-static-admin-token").hexdigest()
    assert static_admin_token_matches("the-static-admin-token", configured)
    assert not static_admin_token_matches("the-static-admin-tokem", configured)
    assert not static_admin_token_matches(configured, configured)  # the digest is not the token
    assert not static_admin_token_matches("", "")  # none configured: nothing matches


def test_admin_bearer_has_admin_scope() -> None:
    def token(*scopes: str) -> AccessToken:
        return AccessToken(token="t", client_id="c", scopes=list(scopes), subject="ops")

    assert admin_bearer_has_admin_scope(token("openid", "mcp-url-connect:admin"), "mcp-url-connect:admin")
    assert not admin_bearer_has_admin_scope(token("openid"), "mcp-url-connect:admin")
    assert not admin_bearer_has_admin_scope(token("mcp-url-connect:admin-x"), "mcp-url-connect:admin")


@pytest.mark.parametrize(
    "changes",
    [
        {"admin_port": 8000},  # the public port
        {"admin_port": 9464},  # the metrics port
        {"admin_port": 70000},
        {"admin_port": 9465, "admin_token_sha256": "a-raw-token-not-its-digest"},
    ],
)
def test_admin_settings_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(SettingsError, match="MCPUC_ADMIN_"):
        valid_settings(port=8000, metrics_port=9464, **changes).require_safe_to_serve()
