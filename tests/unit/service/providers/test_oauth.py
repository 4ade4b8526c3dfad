"""Provider OAuth: the authorization URL (PKCE S256, exact redirect URI), token responses, and
keeping the refresh token the provider did not replace."""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from service.errors import TokenExchangeError
from service.providers.catalogue import build_provider
from service.providers.oauth import (
    MAX_LIFETIME,
    authorization_url,
    exchange_code,
    keep_refresh_token,
    refresh,
    revoke,
    token_set,
)
from service.providers.outbound_http import OutboundHttp
from token_store import TokenSet

REDIRECT = "https://mcp.example.com/callback/hub"
VERIFIER = "v" * 64


def provider(**spec: Any) -> Any:
    base = {
        "authorize_url": "https://hub.example/authorize",
        "token_url": "https://hub.example/token",
        "userinfo_url": "https://hub.example/user",
        "client_id": "client-1",
        "client_secret": "s3cret",
    }
    return build_provider("hub", {**base, **spec}, {})


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_authorization_url_carries_pkce_s256_state_and_the_exact_redirect_uri() -> None:
    url = authorization_url(provider(), REDIRECT, ["repo", "read:user"], "state-1", VERIFIER)
    assert url.startswith("https://hub.example/authorize?")
    params = query(url)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()
    assert params["code_challenge_method"] == ["S256"]  # RFC 7636 §4.2, never plain
    assert params["code_challenge"] == [challenge]
    assert params["state"] == ["state-1"]
    assert params["redirect_uri"] == [REDIRECT]
    assert params["client_id"] == ["client-1"]
    assert params["scope"] == ["repo read:user"]
    assert "s3cret" not in url and VERIFIER not in url


def test_slack_scopes_go_in_user_scope_and_google_asks_consent_only_when_needed() -> None:
    slack = provider(preset="slack")
    params = query(authorization_url(slack, REDIRECT, ["users:read"], "s", VERIFIER))
    assert params["user_scope"] == ["users:read"]
    assert "scope" not in params
    google = provider(preset="google")
    assert "prompt" not in query(authorization_url(google, REDIRECT, ["openid"], "s", VERIFIER))
    again = query(authorization_url(google, REDIRECT, ["openid"], "s", VERIFIER, need_refresh_token=True))
    assert again["prompt"] == ["consent"]
    assert again["access_type"] == ["offline"]


def test_token_set_reads_the_response() -> None:
    tokens = token_set(
        {"access_token": "at", "refresh_token": "rt", "expires_in": "3600", "scope": "b,a"}, ["x"]
    )
    assert (tokens.access_token, tokens.refresh_token, tokens.scopes) == ("at", "rt", ("a", "b"))
    assert tokens.expires_at is not None
    assert token_set({"access_token": "at"}, ["b", "a"]).scopes == ("a", "b")  # RFC 6749 §5.1
    assert token_set({"access_token": "at", "expires_in": MAX_LIFETIME + 1}, []).expires_at is None


def test_token_set_reads_a_nested_user_token() -> None:
    tokens = token_set({"access_token": "bot", "authed_user": {"access_token": "user"}}, [], "authed_user")
    assert tokens.access_token == "user"
    with pytest.raises(TokenExchangeError, match="authed_user"):
        token_set({"access_token": "bot"}, [], "authed_user")


@pytest.mark.parametrize(
    "response",
    [{}, {"access_token": ""}, {"access_token": "x" * 9000}, {"access_token": "a", "refresh_token": 5}],
)
def test_token_set_refuses_unusable_responses(response: dict[str, Any]) -> None:
    with pytest.raises(TokenExchangeError):
        token_set(response, [])


def test_the_previous_refresh_token_is_kept_when_none_comes_back() -> None:
    new = TokenSet(access_token="new", token_type="Bearer", refresh_token=None, expires_at=None, scopes=())
    assert keep_refresh_token(new, "old").refresh_token == "old"  # RFC 6749 §6
    rotated = TokenSet(
        access_token="new", token_type="Bearer", refresh_token="r2", expires_at=None, scopes=()
    )
    assert keep_refresh_token(rotated, "old").refresh_token == "r2"
    assert keep_refresh_token(new, None).refresh_token is None


def test_a_token_response_field_over_the_limit_is_refused() -> None:
    # A 2 MB `scope` would be stored and sent back with every list_connections.
    with pytest.raises(TokenExchangeError, match="scope is over"):
        token_set({"access_token": "at", "scope": "s " * 1_000_000}, [])
    with pytest.raises(TokenExchangeError, match="token_type is over"):
        token_set({"access_token": "at", "token_type": "B" * 9000}, [])
    assert len(token_set({"access_token": "at", "scope": "a " * 4000}, []).scopes) == 4000


@pytest.mark.parametrize(
    "fields", [{"access_token": "mhat_\u00e9t\u00e9"}, {"access_token": "at", "refresh_token": "rt\n1"}]
)
def test_a_token_with_characters_outside_vschar_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(TokenExchangeError, match="characters a token cannot have"):
        token_set(fields, [])


def test_a_token_type_the_provider_does_not_list_is_refused() -> None:
    with pytest.raises(TokenExchangeError, match="token_type is not one of Bearer"):
        token_set({"access_token": "at", "token_type": "MAC"}, [])
    assert token_set({"access_token": "at", "token_type": "bearer"}, []).token_type == "bearer"
    assert token_set({"access_token": "at"}, []).token_type == "Bearer"
    slack = provider(preset="slack")
    user_token = {"authed_user": {"access_token": "xoxp", "token_type": "user"}}
    assert token_set(user_token, [], slack.token_path, slack.token_types).access_token == "xoxp"
    mac = provider(token_types=["MAC"])
    assert token_set({"access_token": "at", "token_type": "mac"}, [], "", mac.token_types).token_type == "mac"


def downstream(issuer: str) -> Any:
    """A remote MCP server's provider entry, resolved to the authorization server `issuer`."""
    return build_provider(
        "down",
        {
            "kind": "mcp",
            "url": "https://down.example/mcp",
            "authorize_url": f"{issuer}/authorize",
            "token_url": f"{issuer}/token",
            "revocation_url": f"{issuer}/revoke",
            "client_id": "client-1",
            "token_auth_method": "none",
            "issuer": issuer,
        },
        {},
    )


async def test_a_downstream_grant_records_its_issuer_and_goes_back_to_it_only() -> None:
    """docs/gateway.md: the grant carries the authorization server that issued it, through every
    refresh; after the downstream moved to another, it is not revoked (or refreshed) there."""
    sent: list[str] = []

    def token_endpoint(request: httpx2.Request) -> httpx2.Response:
        sent.append(str(request.url))
        if request.url.path == "/revoke":
            return httpx2.Response(200)
        tokens = {"access_token": "a2", "refresh_token": "r2", "token_type": "Bearer"}
        return httpx2.Response(200, json=tokens)

    outbound = OutboundHttp(5, authlib_pool=httpx2.MockTransport(token_endpoint))
    old = downstream("https://old-as.example")
    issued = await exchange_code(
        old,
        token_endpoint=old.token_url,
        redirect_uri=REDIRECT,
        scopes=(),
        code="c",
        code_verifier=VERIFIER,
        timeout_seconds=5,
        outbound=outbound,
    )
    assert issued.issuer == "https://old-as.example"
    renewed = await refresh(old, issued, timeout_seconds=5, outbound=outbound)
    assert renewed.issuer == "https://old-as.example"
    assert await revoke(old, renewed, timeout_seconds=5, outbound=outbound)
    sent.clear()
    moved = downstream("https://new-as.example")
    assert not await revoke(moved, renewed, timeout_seconds=5, outbound=outbound)
    assert sent == []
    # Any other provider's grant records no issuer: its stored record reads as before.
    other = await exchange_code(
        provider(),
        token_endpoint="https://hub.example/token",
        redirect_uri=REDIRECT,
        scopes=(),
        code="c",
        code_verifier=VERIFIER,
        timeout_seconds=5,
        outbound=outbound,
    )
    assert other.issuer is None and b"issuer" not in other.to_json()
