"""The mock providers' configuration for ASGI-level tests (tests/unit/mock_providers/):
fixed URLs, clients and secrets, and the small OAuth helpers those tests share."""

from __future__ import annotations

import base64
import hashlib
import secrets
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt

from mock_providers import ClientSpec, MockProvidersConfig

BASE = "http://127.0.0.1:8001"
HUB = BASE + "/mockhub"
MCP_RESOURCE = "http://127.0.0.1:8000/mcp"
LOGIN_CLIENT_ID = "mcp-login"
LOGIN_SECRET = "login-secret-0123456789"
LOGIN_CALLBACK = "http://127.0.0.1:8000/login/callback"
HUB_CLIENT_ID = "mcp-url-connect"
HUB_SECRET = "hub-secret-0123456789"
HUB_CALLBACK = "http://127.0.0.1:8000/connect/callback"
DCR_CALLBACK = "http://127.0.0.1:33418/callback"
GOOGLE = BASE + "/mockgoogle"
GOOGLE_CLIENT_ID = "mcp-url-connect.apps.mockgoogle.test"
GOOGLE_SECRET = "google-secret-0123456789"
GOOGLE_CALLBACK = "http://127.0.0.1:8000/callback/mockgoogle"
SLACK_CLIENT_ID = "1234567890.0987654321"
SLACK_SECRET = "slack-secret-0123456789"
SLACK_CALLBACK = "http://127.0.0.1:8000/callback/mockslack"


def make_config(data_dir: Path, **overrides: Any) -> MockProvidersConfig:
    values: dict[str, Any] = {
        "base_url": BASE,
        "data_dir": data_dir,
        "mcp_resource": MCP_RESOURCE,
        "login_client": ClientSpec(LOGIN_CLIENT_ID, LOGIN_SECRET, (LOGIN_CALLBACK,)),
        "mockhub_client": ClientSpec(HUB_CLIENT_ID, HUB_SECRET, (HUB_CALLBACK,)),
    }
    values.update(overrides)
    return MockProvidersConfig(**values)


def full_config(data_dir: Path, **overrides: Any) -> MockProvidersConfig:
    """`make_config` with MockGoogle and MockSlack served too."""
    return make_config(
        data_dir,
        mockgoogle_client=ClientSpec(GOOGLE_CLIENT_ID, GOOGLE_SECRET, (GOOGLE_CALLBACK,)),
        mockslack_client=ClientSpec(SLACK_CLIENT_ID, SLACK_SECRET, (SLACK_CALLBACK,)),
        **overrides,
    )


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def query_of(location: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "fields": {}, "buttons": [], "types": {}})
        elif self.forms and tag in ("input", "button") and "name" in a:
            kind = a.get("type", "submit" if tag == "button" else "text")
            self.forms[-1]["types"][a["name"]] = kind
            if kind == "submit":
                self.forms[-1]["buttons"].append((a["name"], a.get("value", "")))
            else:
                self.forms[-1]["fields"][a["name"]] = a.get("value", "")


def only_form(html: str) -> dict[str, Any]:
    parser = _Forms()
    parser.feed(html)
    assert len(parser.forms) == 1
    return parser.forms[0]


async def dev_as_login(http: Any, username: str = "alice", return_to: str = "") -> Any:
    """POST the dev AS login form as a browser does: with the CSRF token of its own login page."""
    page = await http.get("/login")
    csrf = only_form(page.text)["fields"]["csrf"]
    return await http.post("/login", data={"username": username, "return_to": return_to, "csrf": csrf})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def consent(
    client: httpx.AsyncClient,
    path: str,
    params: dict[str, str],
    *,
    login: str,
    decision: str = "approve",
    expect_default: str | None = None,
) -> dict[str, str]:
    """GET a consent page, submit its form as the user would; returns the callback parameters."""
    page = await client.get(path, params=params)
    assert page.status_code == 200, page.text
    form = only_form(page.text)
    assert form["action"] == path
    assert sorted(form["buttons"]) == [("decision", "approve"), ("decision", "deny")]
    if expect_default is not None:
        assert form["fields"]["login"] == expect_default
    response = await client.post(path, data={**form["fields"], "login": login, "decision": decision})
    assert response.status_code == 302, response.text
    return query_of(response.headers["location"])


def hub_params(challenge: str) -> dict[str, str]:
    """MockHub's authorization request for the test client, with PKCE S256."""
    return {
        "response_type": "code",
        "client_id": HUB_CLIENT_ID,
        "redirect_uri": HUB_CALLBACK,
        "scope": "read:user",
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }


async def hub_tokens(client: httpx.AsyncClient, login: str = "octocat") -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockhub/authorize", hub_params(challenge), login=login)
    token = await client.post(
        "/mockhub/token",
        data={
            "grant_type": "authorization_code",
            "code": callback["code"],
            "redirect_uri": HUB_CALLBACK,
            "code_verifier": verifier,
        },
        auth=(HUB_CLIENT_ID, HUB_SECRET),
    )
    assert token.status_code == 200, token.text
    body: dict[str, Any] = token.json()
    return body


async def hub_refresh(client: httpx.AsyncClient, refresh_token: str) -> httpx.Response:
    return await client.post(
        "/mockhub/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh_token},
        auth=(HUB_CLIENT_ID, HUB_SECRET),
    )


async def hub_user_status(client: httpx.AsyncClient, access_token: str) -> int:
    return (await client.get("/mockhub/user", headers=bearer(access_token))).status_code


def google_params(challenge: str, **extra: str) -> dict[str, str]:
    return {
        "response_type": "code",
        "client_id": GOOGLE_CLIENT_ID,
        "redirect_uri": GOOGLE_CALLBACK,
        "scope": "openid email profile",
        "state": "g-state",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }


async def google_tokens(
    client: httpx.AsyncClient, login: str = "alice@example.com", **extra: str
) -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockgoogle/authorize", google_params(challenge, **extra), login=login)
    assert callback["state"] == "g-state" and callback["iss"] == GOOGLE
    token = await client.post(
        "/mockgoogle/token",
        data={
            "grant_type": "authorization_code",
            "code": callback["code"],
            "redirect_uri": GOOGLE_CALLBACK,
            "code_verifier": verifier,
            "client_id": GOOGLE_CLIENT_ID,
            "client_secret": GOOGLE_SECRET,
        },
    )
    assert token.status_code == 200, token.text
    body: dict[str, Any] = token.json()
    return body


async def google_refresh(client: httpx.AsyncClient, refresh_token: str) -> httpx.Response:
    return await client.post(
        "/mockgoogle/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh_token},
        auth=(GOOGLE_CLIENT_ID, GOOGLE_SECRET),
    )


async def verify_id_token(client: httpx.AsyncClient, id_token: str) -> dict[str, Any]:
    discovery = (await client.get("/mockgoogle/.well-known/openid-configuration")).json()
    jwks = (await client.get(discovery["jwks_uri"].removeprefix(BASE))).json()
    header = jwt.get_unverified_header(id_token)
    assert header["alg"] == "RS256" and header["typ"] == "JWT"
    key = jwt.PyJWKSet.from_dict(jwks)[header["kid"]]
    claims: dict[str, Any] = jwt.decode(
        id_token,
        key=key,
        algorithms=["RS256"],
        audience=GOOGLE_CLIENT_ID,
        issuer=discovery["issuer"],
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )
    return claims


def slack_params(challenge: str, **extra: str) -> dict[str, str]:
    # Slack needs no response_type.
    return {
        "client_id": SLACK_CLIENT_ID,
        "redirect_uri": SLACK_CALLBACK,
        "scope": "commands,chat:write",
        "user_scope": "search:read,users:read",
        "state": "sl-state",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }


async def slack_access(client: httpx.AsyncClient, login: str = "grace", **extra: str) -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    callback = await consent(client, "/mockslack/authorize", slack_params(challenge, **extra), login=login)
    assert callback["state"] == "sl-state" and "iss" not in callback
    response = await client.post(
        "/mockslack/oauth.v2.access",
        data={
            "code": callback["code"],
            "redirect_uri": SLACK_CALLBACK,
            "code_verifier": verifier,
            "client_id": SLACK_CLIENT_ID,
            "client_secret": SLACK_SECRET,
        },
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def auth_test(client: httpx.AsyncClient, token: str) -> dict[str, Any]:
    response = await client.post("/mockslack/auth.test", headers=bearer(token))
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body
