"""Talking OAuth to a provider as its client (authlib's httpx client): the authorization URL with
PKCE S256, the code exchange, refresh (RFC 6749 §6) and revocation (RFC 7009)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oauth2.client import OAuth2Client

from service.outbound_http import OutboundHttp
from service.providers import ProviderConfig
from token_store import TokenSet

MAX_TOKEN_RESPONSE_FIELD = 8192


MAX_LIFETIME = 10 * 365 * 24 * 3600  # an `expires_in` beyond this is junk, not a lifetime


class TokenExchangeError(Exception):
    """A token-endpoint call failed; the message is safe to show (no code, verifier or secret).
    `error` is the OAuth error code when the provider sent one (e.g. invalid_grant)."""

    def __init__(self, message: str, error: str | None = None) -> None:
        super().__init__(message)
        self.error = error


def _oauth_options(provider: ProviderConfig, redirect_uri: str, scopes: Sequence[str]) -> dict[str, Any]:
    return {
        "client_id": provider.client_id,
        "client_secret": provider.client_secret,
        "scope": " ".join(scopes),
        "redirect_uri": redirect_uri,  # exact, from configuration (docs/threat-model.md, section 4)
        "code_challenge_method": "S256",  # RFC 7636 §4.2: always S256, never plain
        "token_endpoint_auth_method": provider.token_auth_method,
    }


def _client(
    provider: ProviderConfig,
    redirect_uri: str,
    scopes: Sequence[str],
    timeout: float,
    outbound: OutboundHttp | None,
) -> AsyncOAuth2Client:
    """authlib's client for one call; with the process's `outbound` it builds no TLS context."""
    http: dict[str, Any] = {"timeout": timeout, "follow_redirects": False}
    if outbound is not None:
        http = {**outbound.authlib_options(), "timeout": timeout}
    return AsyncOAuth2Client(**_oauth_options(provider, redirect_uri, scopes), **http)


def authorization_url(
    provider: ProviderConfig,
    redirect_uri: str,
    scopes: Sequence[str],
    state: str,
    code_verifier: str,
    *,
    need_refresh_token: bool = False,
) -> str:
    # Building the URL sends nothing: authlib's protocol client, without an HTTP session.
    client = OAuth2Client(None, **_oauth_options(provider, redirect_uri, scopes))
    params = dict(provider.authorize_params)
    if provider.scope_param != "scope":  # Slack: user-token scopes go in `user_scope`
        params[provider.scope_param] = " ".join(scopes)
        client.scope = None
    if need_refresh_token and provider.consent_prompt_for_refresh:
        # Google sends a refresh token again only when the user is asked to consent again.
        params["prompt"] = "consent"
    url, _ = client.create_authorization_url(
        provider.authorize_url, state=state, code_verifier=code_verifier, **params
    )
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
    outbound: OutboundHttp,
) -> TokenSet:
    """Redeem `code` at `token_endpoint` (taken from the stored flow, never from the request)."""
    async with _client(provider, redirect_uri, scopes, timeout_seconds, outbound) as client:
        try:
            token: dict[str, Any] = await client.fetch_token(
                token_endpoint,
                grant_type="authorization_code",
                code=code,
                code_verifier=code_verifier,
                redirect_uri=redirect_uri,
            )
        except Exception as exc:  # authlib raises OAuthError, httpx errors, or JSON errors on junk
            raise _exchange_error("the token endpoint refused the code", exc) from None
    return token_set(token, scopes, provider.token_path)


async def refresh(
    provider: ProviderConfig,
    tokens: TokenSet,
    *,
    timeout_seconds: float,
    outbound: OutboundHttp,
) -> TokenSet:
    """Redeem the refresh token once (the caller holds the single-flight lock)."""
    assert tokens.refresh_token is not None
    async with _client(provider, "", tokens.scopes, timeout_seconds, outbound) as client:
        try:
            token: dict[str, Any] = await client.refresh_token(
                provider.token_url, refresh_token=tokens.refresh_token
            )
        except Exception as exc:
            raise _exchange_error("the token endpoint refused the refresh", exc) from None
    return keep_refresh_token(token_set(token, tokens.scopes, provider.token_path), tokens.refresh_token)


def keep_refresh_token(new: TokenSet, previous: str | None) -> TokenSet:
    """`new`, holding on to the `previous` refresh token when the response carried none.

    RFC 6749 §6: "The authorization server MAY issue a new refresh token"; when it does not, the
    one the client holds stays valid (Google also omits it on re-consent).
    """
    return new if new.refresh_token or not previous else replace(new, refresh_token=previous)


async def revoke(
    provider: ProviderConfig,
    tokens: TokenSet,
    *,
    timeout_seconds: float,
    outbound: OutboundHttp,
) -> bool:
    """RFC 7009 revocation of the grant (the refresh token when there is one); True on success."""
    if not provider.revocation_url:
        return False
    token, hint = (
        (tokens.refresh_token, "refresh_token")
        if tokens.refresh_token
        else (tokens.access_token, "access_token")
    )
    async with _client(provider, "", tokens.scopes, timeout_seconds, outbound) as client:
        try:
            response = await client.revoke_token(provider.revocation_url, token=token, token_type_hint=hint)
        except Exception:
            return False
    return bool(response.status_code == 200)


def _exchange_error(what: str, exc: Exception) -> TokenExchangeError:
    error = getattr(exc, "error", None)
    label = str(error or type(exc).__name__)[:64]
    return TokenExchangeError(f"{what} ({label})", error=str(error) if error else None)


def token_set(token: dict[str, Any], requested: Sequence[str], token_path: str = "") -> TokenSet:
    """Our TokenSet from a token response; `token_path` picks a nested token (Slack: authed_user)."""
    if token_path:
        nested = token.get(token_path)
        if not isinstance(nested, dict):
            raise TokenExchangeError(f"the token response has no {token_path!r} object")
        token = nested
    access_token = token.get("access_token")
    if not isinstance(access_token, str) or not access_token or len(access_token) > MAX_TOKEN_RESPONSE_FIELD:
        raise TokenExchangeError("the token response has no usable access_token")
    refresh_token = token.get("refresh_token")
    if refresh_token is not None and (
        not isinstance(refresh_token, str) or len(refresh_token) > MAX_TOKEN_RESPONSE_FIELD
    ):
        raise TokenExchangeError("the token response has a malformed refresh_token")
    expires_in = token.get("expires_in")
    if isinstance(expires_in, str) and expires_in.isdigit():
        expires_in = int(expires_in)
    expires_at = None
    if isinstance(expires_in, (int, float)) and 0 < expires_in <= MAX_LIFETIME:
        expires_at = time.time() + float(expires_in)
    scope = token.get("scope")
    # RFC 6749 §5.1: when `scope` is omitted the granted scope equals the requested one.
    scopes = tuple(sorted(str(scope).replace(",", " ").split())) if scope else tuple(sorted(requested))
    return TokenSet(
        access_token=access_token,
        token_type=str(token.get("token_type") or "Bearer"),
        refresh_token=refresh_token,
        expires_at=expires_at,
        scopes=scopes,
    )
