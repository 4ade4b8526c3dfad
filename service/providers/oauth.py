"""Talking OAuth to a provider as its client (authlib's httpx client): the authorization URL with
PKCE S256, the code exchange, refresh (RFC 6749 §6) and revocation (RFC 7009)."""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oauth2.client import OAuth2Client

from service.errors import NeedsReauthorization, TokenExchangeError
from service.providers.addresses import downstream_peer_checks
from service.providers.catalogue import BEARER, ProviderConfig
from service.providers.outbound_http import OutboundHttp
from token_store import TokenSet

# Every string we keep from a token response; the stored record (and each `list_connections`
# answer, which shows the scopes) stays small whatever a provider sends.
MAX_TOKEN_RESPONSE_FIELD = 8192
KEPT_FIELDS = ("access_token", "refresh_token", "token_type", "scope")
VSCHAR = re.compile(r"[\x20-\x7e]+")  # RFC 6749 Appendix A: printable ASCII, used with fullmatch

MAX_LIFETIME = 10 * 365 * 24 * 3600  # an `expires_in` beyond this is junk, not a lifetime


def _oauth_options(provider: ProviderConfig, redirect_uri: str, scopes: Sequence[str]) -> dict[str, Any]:
    return {
        "client_id": provider.client_id,
        "client_secret": provider.client_secret,
        "scope": " ".join(scopes),
        "redirect_uri": redirect_uri,  # exact, from configuration (docs/threat-model.md, section 4)
        # mutant: provider_oauth.pkce_s256 '"S256"' -> '"plain"'
        "code_challenge_method": "S256",  # RFC 7636 §4.2: always S256, never plain
        "token_endpoint_auth_method": provider.token_auth_method,
    }


def _resource_indicator(provider: ProviderConfig) -> dict[str, str]:
    """RFC 8707 §2: the `resource` the token is for, in the authorization request and in every
    token request (code and refresh) alike; the MCP spec asks for it on both (2025-11-25
    basic/authorization, "Resource Parameter Implementation"). Empty for most providers."""
    return {"resource": provider.resource} if provider.resource else {}


def _client_id_in_body(provider: ProviderConfig) -> dict[str, str]:
    """For a remote MCP server's authorization server, the `client_id` in the body of token and
    revocation requests whatever the authentication (RFC 6749 §3.2.1: the client MAY; the MCP
    SDK's authorization server requires it with HTTP Basic too)."""
    if provider.kind == "mcp" and provider.token_auth_method == "client_secret_basic":  # noqa: S105
        return {"client_id": provider.client_id}
    return {}


def _token_request_extras(provider: ProviderConfig) -> dict[str, str]:
    """What a token request carries besides the grant: the resource, and the client id."""
    return {**_resource_indicator(provider), **_client_id_in_body(provider)}


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
        http = {**outbound.authlib_options(downstream_peer_checks(provider)), "timeout": timeout}
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
    asked = [*scopes, *(s for s in provider.optional_scopes if s not in scopes)]
    if provider.scope_param != "scope" or asked != list(scopes):
        # Slack: user-token scopes go in `user_scope`; optional scopes join the required ones.
        params[provider.scope_param] = " ".join(asked)
        client.scope = None
    if need_refresh_token and provider.consent_prompt_for_refresh:
        # Google sends a refresh token again only when the user is asked to consent again.
        params["prompt"] = "consent"
    params.update(_resource_indicator(provider))
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
                **_token_request_extras(provider),
            )
        except Exception as exc:  # authlib raises OAuthError, httpx errors, or JSON errors on junk
            raise _exchange_error("the token endpoint refused the code", exc) from None
    return with_its_issuer(token_set(token, scopes, provider.token_path, provider.token_types), provider)


def with_its_issuer(tokens: TokenSet, provider: ProviderConfig) -> TokenSet:
    """The grant with the authorization server that issued it, for a remote MCP server, whose
    authorization server can change while we run (docs/gateway.md); other grants as they are."""
    return replace(tokens, issuer=provider.issuer) if provider.kind == "mcp" else tokens


def require_grant_of_current_issuer(tokens: TokenSet, provider: ProviderConfig) -> None:
    """A grant goes back only to the authorization server that issued it. The MCP spec (2026-07-28
    basic/authorization, "Client Registration", SEP-2352): a client MUST NOT assume credentials
    valid at one authorization server are accepted by another; RFC 6749 §6 and RFC 7009 §2.1 bind
    a refresh token to its issuer and client. A grant of a server the provider has moved away from
    is neither refreshed, nor revoked, nor used there: the user connects again. A grant recorded
    without an issuer (every provider but a remote MCP server) passes."""
    # mutant: gateway.grant_of_current_issuer
    if tokens.issuer is not None and tokens.issuer != provider.issuer:
        raise NeedsReauthorization("the grant was issued by another authorization server")


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
                provider.token_url, refresh_token=tokens.refresh_token, **_token_request_extras(provider)
            )
        except Exception as exc:
            raise _exchange_error("the token endpoint refused the refresh", exc) from None
    renewed = token_set(token, tokens.scopes, provider.token_path, provider.token_types)
    return replace(keep_refresh_token(renewed, tokens.refresh_token), issuer=tokens.issuer)


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
    """RFC 7009 revocation of the grant (the refresh token when there is one); True on success.
    Never at another authorization server than the one that issued it."""
    if not provider.revocation_url:
        return False
    try:
        require_grant_of_current_issuer(tokens, provider)
    except NeedsReauthorization:
        return False
    token, hint = (
        (tokens.refresh_token, "refresh_token")
        if tokens.refresh_token
        else (tokens.access_token, "access_token")
    )
    async with _client(provider, "", tokens.scopes, timeout_seconds, outbound) as client:
        try:
            response = await client.revoke_token(
                provider.revocation_url,
                token=token,
                token_type_hint=hint,
                body=urlencode(_client_id_in_body(provider)),
            )
        except Exception:
            return False
    return bool(response.status_code == 200)


def _exchange_error(what: str, exc: Exception) -> TokenExchangeError:
    error = getattr(exc, "error", None)
    label = str(error or type(exc).__name__)[:64]
    return TokenExchangeError(f"{what} ({label})", error=str(error) if error else None)


def require_bounded_token_fields(token: Mapping[str, Any]) -> None:
    """Each field we keep from a token response is at most MAX_TOKEN_RESPONSE_FIELD characters
    (the response as a whole is bounded by `OutboundHttp`). RFC 6749 §5.1: "The authorization
    server SHOULD document the size of any value it issues"; RFC 9110 §2.3: parse defensively,
    expecting values to "fit within a reasonably sized buffer"."""
    for name in KEPT_FIELDS:
        value = token.get(name)
        text = value if isinstance(value, str) else repr(value)
        # mutant: provider_oauth.bounded_token_fields
        if len(text) > MAX_TOKEN_RESPONSE_FIELD:
            raise TokenExchangeError(
                f"the token response's {name} is over {MAX_TOKEN_RESPONSE_FIELD} characters"
            )


def require_vschar_tokens(access_token: str, refresh_token: str | None) -> None:
    """RFC 6749 Appendix A.12 and A.17: `access_token` and `refresh_token` are 1*VSCHAR
    (%x20-7E). Anything else cannot be sent in an `Authorization` header: refused here as the
    provider's error instead of failing later, inside the HTTP client."""
    for name, value in (("access_token", access_token), ("refresh_token", refresh_token)):
        # mutant: provider_oauth.vschar_tokens
        if value is not None and not VSCHAR.fullmatch(value):
            raise TokenExchangeError(f"the token response's {name} has characters a token cannot have")


def require_understood_token_type(token_type: str, accepted: Collection[str]) -> None:
    """RFC 6749 §7.1: "The client MUST NOT use an access token if it does not understand the
    token type"; we present tokens as bearer tokens (RFC 6750), so a type the provider's
    configuration does not list (`token_types`, Bearer by default) is refused. §5.1: the value is
    case insensitive."""
    # mutant: provider_oauth.understood_token_type
    if token_type.lower() not in {t.lower() for t in accepted}:
        raise TokenExchangeError(f"the token response's token_type is not one of {', '.join(accepted)}")


def token_set(
    token: dict[str, Any],
    requested: Sequence[str],
    token_path: str = "",
    token_types: Collection[str] = (BEARER,),
) -> TokenSet:
    """Our TokenSet from a token response; `token_path` picks a nested token (Slack: authed_user)."""
    if token_path:
        nested = token.get(token_path)
        if not isinstance(nested, dict):
            raise TokenExchangeError(f"the token response has no {token_path!r} object")
        token = nested
    require_bounded_token_fields(token)
    access_token = token.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise TokenExchangeError("the token response has no usable access_token")
    refresh_token = token.get("refresh_token")
    if refresh_token is not None and not isinstance(refresh_token, str):
        raise TokenExchangeError("the token response has a malformed refresh_token")
    require_vschar_tokens(access_token, refresh_token)
    # RFC 6749 §5.1 makes token_type REQUIRED; one left out is read as Bearer, as providers mean it.
    token_type = token.get("token_type") or BEARER
    if not isinstance(token_type, str):
        raise TokenExchangeError("the token response has a malformed token_type")
    require_understood_token_type(token_type, token_types)
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
        token_type=token_type,
        refresh_token=refresh_token,
        expires_at=expires_at,
        scopes=scopes,
    )
