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
