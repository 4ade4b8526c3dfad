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
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.routing import Route

from service.errors import AdminRequestRefused
from service.ops.admin_api import (
    admin_app,
    admin_bearer_has_admin_scope,
    admin_bearer_of_admin_client,
    admin_request_on_admin_port,
    require_known_query_parameters,
    static_admin_token_matches,
)
from service.runtime import Runtime
from service.settings import Settings, SettingsError, load_settings

OPENAPI = Path(__file__).resolve().parents[4] / "docs" / "admin-openapi.json"
ADMIN_AUDIENCE = "https://admin.mcp.example.com/"


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
    app = admin_app(Runtime(valid_settings(admin_port=9465, admin_audience=ADMIN_AUDIENCE)))
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
        {"admin_port": 9465, "admin_bearer": False},  # no token at all would be taken
    ],
)
def test_admin_settings_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(SettingsError, match="MCPUC_ADMIN_"):
        valid_settings(
            port=8000, metrics_port=9464, admin_audience=ADMIN_AUDIENCE, **changes
        ).require_safe_to_serve()


@pytest.mark.parametrize(
    "audience",
    [
        "",  # none: MCP tokens would be taken (or nothing verified)
        "https://mcp.example.com/mcp",  # the MCP resource
        "https://mcp.example.com/custom-audience",  # the MCP audience the operator named
    ],
)
def test_the_admin_api_needs_a_resource_of_its_own(audience: str) -> None:
    """RFC 8707: the admin API is a resource of its own; a start-up error names the setting."""
    settings = valid_settings(admin_port=9465, auth_audience="https://mcp.example.com/custom-audience")
    with pytest.raises(SettingsError, match=r"MCPUC_ADMIN_AUDIENCE is required .* not the MCP resource"):
        settings.replace(admin_audience=audience).require_safe_to_serve()
    settings.replace(admin_audience=ADMIN_AUDIENCE).require_safe_to_serve()
    # The static token alone: no audience needed.
    static = hashlib.sha256(b"t").hexdigest()
    settings.replace(admin_bearer=False, admin_token_sha256=static).require_safe_to_serve()


def test_admin_clients_are_read_from_a_comma_separated_list() -> None:
    environ = {"MCPUC_ADMIN_CLIENT_IDS": "ops-automation, soar-playbook"}
    assert load_settings(environ).admin_client_ids == ("ops-automation", "soar-playbook")


def test_admin_bearer_of_admin_client() -> None:
    token = AccessToken(token="t", client_id="ops-automation", scopes=[], subject="ops")
    assert admin_bearer_of_admin_client(token, ())  # no list: any client the issuer granted
    assert admin_bearer_of_admin_client(token, ("soar", "ops-automation"))
    assert not admin_bearer_of_admin_client(token, ("soar",))


@pytest.mark.parametrize(
    ("query", "refused"),
    [
        ("", False),
        ("sub=alice&provider=mockhub", False),
        ("usr=alice", True),
        ("sub=alice&sub=bob", True),
        ("sub=alice&SUB=bob", True),
    ],
)
def test_require_known_query_parameters(query: str, refused: bool) -> None:
    if refused:
        with pytest.raises(AdminRequestRefused) as caught:
            require_known_query_parameters(QueryParams(query), ("sub", "iss", "provider"))
        assert caught.value.status == 400 and caught.value.error == "invalid_request"
    else:
        require_known_query_parameters(QueryParams(query), ("sub", "iss", "provider"))
