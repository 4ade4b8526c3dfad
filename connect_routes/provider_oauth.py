"""The provider leg: authorization code + PKCE S256 as an OAuth client (authlib's httpx client)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from authlib.integrations.httpx_client import AsyncOAuth2Client

from service.settings import ProviderConfig
from token_store import TokenSet

MAX_TOKEN_RESPONSE_FIELD = 8192


class TokenExchangeError(Exception):
    """The code exchange failed; the message is safe to show (no code, verifier or secret)."""


def _client(
    provider: ProviderConfig, redirect_uri: str, scopes: Sequence[str], timeout: float
) -> AsyncOAuth2Client:
    return AsyncOAuth2Client(
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        scope=" ".join(scopes),
        redirect_uri=redirect_uri,  # exact, from configuration (DESIGN invariant 4)
        code_challenge_method="S256",  # RFC 7636 §4.2: always S256, never plain
        token_endpoint_auth_method=provider.token_auth_method,
        timeout=timeout,
        follow_redirects=False,
    )


def authorization_url(
    provider: ProviderConfig, redirect_uri: str, scopes: Sequence[str], state: str, code_verifier: str
) -> str:
    client = _client(provider, redirect_uri, scopes, timeout=1.0)
    url, _ = client.create_authorization_url(provider.authorize_url, state=state, code_verifier=code_verifier)
    return str(url)


async def exchange_code(
    provider: ProviderConfig,
    *,
    token_endpoint: str,
    redirect_uri: str,
    scopes: Sequence[str],
    code: str,
    code_verifier: str,
    timeout_seconds: float,
) -> TokenSet:
    """Redeem `code` at `token_endpoint` (taken from the stored flow, never from the request)."""
    async with _client(provider, redirect_uri, scopes, timeout_seconds) as client:
        try:
            token: dict[str, Any] = await client.fetch_token(
                token_endpoint,
                grant_type="authorization_code",
                code=code,
                code_verifier=code_verifier,
                redirect_uri=redirect_uri,
            )
        except Exception as exc:  # authlib raises OAuthError, httpx errors, or JSON errors on junk
            error = getattr(exc, "error", None) or type(exc).__name__
            raise TokenExchangeError(f"the token endpoint refused the code ({str(error)[:64]})") from None
    return _token_set(token, scopes)


def _token_set(token: dict[str, Any], requested: Sequence[str]) -> TokenSet:
    access_token = token.get("access_token")
    if not isinstance(access_token, str) or not access_token or len(access_token) > MAX_TOKEN_RESPONSE_FIELD:
        raise TokenExchangeError("the token response has no usable access_token")
    refresh_token = token.get("refresh_token")
    if refresh_token is not None and (
        not isinstance(refresh_token, str) or len(refresh_token) > MAX_TOKEN_RESPONSE_FIELD
    ):
        raise TokenExchangeError("the token response has a malformed refresh_token")
    expires_at = token.get("expires_at")
    if not isinstance(expires_at, (int, float)):
        expires_in = token.get("expires_in")
        expires_at = time.time() + float(expires_in) if isinstance(expires_in, (int, float)) else None
    scope = token.get("scope")
    # RFC 6749 §5.1: when `scope` is omitted the granted scope equals the requested one.
    scopes = tuple(sorted(str(scope).replace(",", " ").split())) if scope else tuple(sorted(requested))
    return TokenSet(
        access_token=access_token,
        token_type=str(token.get("token_type") or "Bearer"),
        refresh_token=refresh_token,
        expires_at=float(expires_at) if expires_at is not None else None,
        scopes=scopes,
    )
