"""The provider catalogue: one `ProviderConfig` per third-party service, from presets + configuration.

A provider is declared in the TOML file as `[providers.<name>]`, optionally starting from a
preset (`preset = "github"`), with its client secret from `MCPUC_PROVIDER_<NAME>_CLIENT_SECRET`.
`validate_provider` refuses an unusable entry with a message naming the field; endpoints left
empty with a `discovery_url` are filled from the provider's metadata at start-up
(`resolve_discovery`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import httpx

from service.discovery import fetch_metadata
from service.errors import MetadataError
from service.urls import https_unless_loopback

# "oauth2": authorization code + PKCE; "api_key": the user pastes a key on our page.
ProviderKind = Literal["oauth2", "api_key"]
# RFC 7591 §2 token_endpoint_auth_method values we speak ("none": a public client).
TokenAuthMethod = Literal["client_secret_post", "client_secret_basic", "none"]
KINDS: tuple[str, ...] = get_args(ProviderKind)
AUTH_METHODS: tuple[str, ...] = get_args(TokenAuthMethod)
BEARER = "Bearer"  # RFC 6750: the token type we know how to present


class ProviderError(ValueError):
    """An invalid provider entry; the message names `providers.<name>.<field>`."""


@dataclass(frozen=True)
class ProviderConfig:
    """A third-party service the server connects users to."""

    name: str
    display_name: str = ""
    kind: ProviderKind = "oauth2"
    preset: str = ""
    authorize_url: str = ""
    token_url: str = ""
    userinfo_url: str = ""  # GET with the user's token: names the account
    revocation_url: str = ""  # RFC 7009; empty when the provider has none
    discovery_url: str = ""  # RFC 8414 / OIDC metadata: fills the empty endpoints at start-up
    api_base_url: str = ""  # base of the provider's API, for tools' authenticated clients
    client_id: str = ""
    client_secret: str = field(repr=False, default="")
    token_auth_method: TokenAuthMethod = "client_secret_post"  # noqa: S105 - a method name
    scopes: tuple[str, ...] = ()
    scope_param: str = "scope"  # Slack asks for user-token scopes as `user_scope`
    authorize_params: Mapping[str, str] = field(default_factory=dict)  # e.g. access_type=offline
    consent_prompt_for_refresh: bool = False  # Google: prompt=consent when we hold no refresh token
    token_path: str = ""  # where the user's token sits in the token response (Slack: authed_user)
    # RFC 6749 §7.1: the `token_type` values accepted, each then presented as a bearer token
    token_types: tuple[str, ...] = (BEARER,)
    issuer: str | None = None  # RFC 9207: when set, the authorization response must carry this `iss`
    account_field: str = "id"  # userinfo field naming the account (the provider's subject); dotted
    label_field: str = "login"  # userinfo field shown to the user; dotted
    tenant: str = ""  # Microsoft Entra: substituted for {tenant} in the endpoints
    refresh_skew_seconds: int = 60  # refresh this long before expiry
    insecure_http: bool = False  # development only (mock providers in compose): allow plain http
    api_key_header: str = "Authorization"  # api_key providers: how the key is sent
    api_key_format: str = "Bearer {key}"
    # Keep-alive (service/keepalive.py): refresh a grant not refreshed for this many seconds, before
    # the provider expires an unused refresh token (Microsoft: 90 days; Google: 6 months). 0: off.
    refresh_keepalive: int = 0
    # Refresh access tokens about to expire in the sweep, so a tool call never waits for one.
    keep_access_fresh: bool = False
    keepalive_rate: float = 5.0  # sweep refreshes started per second at this provider

    def __post_init__(self) -> None:
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name)


PRESETS: dict[str, dict[str, Any]] = {
    # GitHub OAuth App: tokens do not expire, no refresh token, no RFC 7009 endpoint.
    "github": {
        "display_name": "GitHub",
        "authorize_url": "https://github.com/login/oauth/authorize",
        "token_url": "https://github.com/login/oauth/access_token",
        "userinfo_url": "https://api.github.com/user",
        "api_base_url": "https://api.github.com",
        "scopes": ("read:user",),
        "account_field": "id",
        "label_field": "login",
    },
    # GitHub App (user-to-server): expiring tokens (8 h) and rotating refresh tokens (6 months).
    "github_app": {
        "display_name": "GitHub",
        "authorize_url": "https://github.com/login/oauth/authorize",
        "token_url": "https://github.com/login/oauth/access_token",
        "userinfo_url": "https://api.github.com/user",
        "api_base_url": "https://api.github.com",
        "account_field": "id",
        "label_field": "login",
    },
    "google": {
        "display_name": "Google",
        "authorize_url": "https://accounts.google.com/o/oauth2/v2/auth",
        "token_url": "https://oauth2.googleapis.com/token",
        "userinfo_url": "https://openidconnect.googleapis.com/v1/userinfo",
        "revocation_url": "https://oauth2.googleapis.com/revoke",
        "api_base_url": "https://www.googleapis.com",
        "scopes": ("openid", "email", "profile"),
        "authorize_params": {"access_type": "offline"},
        "consent_prompt_for_refresh": True,
        "account_field": "sub",
        "label_field": "email",
    },
    # Slack: one response carries a bot token and, under authed_user, the user's token.
    "slack": {
        "display_name": "Slack",
        "authorize_url": "https://slack.com/oauth/v2/authorize",
        "token_url": "https://slack.com/api/oauth.v2.access",
        "userinfo_url": "https://slack.com/api/auth.test",
        "api_base_url": "https://slack.com/api",
        "scopes": ("users:read",),
        "scope_param": "user_scope",
        "token_path": "authed_user",
        "token_types": ("user",),  # Slack's user token, sent as `Authorization: Bearer`
        "token_auth_method": "client_secret_post",
        "account_field": "user_id",
        "label_field": "user",
    },
    "entra": {
        "display_name": "Microsoft",
        "authorize_url": "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/authorize",
        "token_url": "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token",
        "userinfo_url": "https://graph.microsoft.com/oidc/userinfo",
        "api_base_url": "https://graph.microsoft.com/v1.0",
        "scopes": ("openid", "profile", "offline_access", "User.Read"),
        "account_field": "sub",
        "label_field": "name",
    },
    # Any OpenID Connect provider: endpoints from discovery_url.
    "oidc": {"scopes": ("openid",), "account_field": "sub", "label_field": "email"},
    # Any OAuth 2 provider: every endpoint given explicitly.
    "oauth2": {},
}

ENDPOINTS = ("authorize_url", "token_url", "userinfo_url", "revocation_url", "discovery_url", "api_base_url")


def build_provider(name: str, spec: Mapping[str, Any], environ: Mapping[str, str]) -> ProviderConfig:
    """A validated ProviderConfig from a TOML table, its preset and the environment."""
    allowed = {f.name for f in fields(ProviderConfig)} - {"name"}
    unknown = set(spec) - allowed
    if unknown:
        raise ProviderError(f"providers.{name}.{sorted(unknown)[0]}: unknown field")
    preset = str(spec.get("preset", ""))
    if preset and preset not in PRESETS:
        raise ProviderError(
            f"providers.{name}.preset: unknown preset {preset!r} (known: {', '.join(PRESETS)})"
        )
    values: dict[str, Any] = {**PRESETS.get(preset, {}), **spec}
    for key in ("scopes", "token_types"):
        if key in values:
            if not isinstance(values[key], (list, tuple)) or not all(isinstance(s, str) for s in values[key]):
                raise ProviderError(f"providers.{name}.{key}: must be a list of strings")
            values[key] = tuple(values[key])
    if "authorize_params" in values and not (
        isinstance(values["authorize_params"], Mapping)
        and all(isinstance(v, str) for v in values["authorize_params"].values())
    ):
        raise ProviderError(f"providers.{name}.authorize_params: must be a table of strings")
    # Secrets come from the environment so the TOML file can be committed.
    secret_env = f"MCPUC_PROVIDER_{name.upper()}_CLIENT_SECRET"
    if secret_env in environ:
        values["client_secret"] = environ[secret_env]
    tenant = str(values.get("tenant", ""))
    for key in ENDPOINTS:
        if "{tenant}" in str(values.get(key, "")):
            if not tenant:
                raise ProviderError(f"providers.{name}.tenant: required by the {preset or 'given'} endpoints")
            values[key] = str(values[key]).replace("{tenant}", tenant)
    try:
        provider = ProviderConfig(name=name, **values)
    except TypeError as exc:
        raise ProviderError(f"providers.{name}: {exc}") from exc
    validate_provider(provider)
    return provider


def validate_provider(provider: ProviderConfig) -> None:
    """Refuse an entry the flow cannot use safely; the message names the field."""
    where = f"providers.{provider.name}"
    if provider.kind not in KINDS:
        raise ProviderError(f"{where}.kind: one of {', '.join(KINDS)}")
    for key in ENDPOINTS:
        url = getattr(provider, key)
        if url and not _acceptable_url(url, provider.insecure_http):
            raise ProviderError(f"{where}.{key}: must be an https URL (plain http only on loopback)")
    if not provider.account_field:
        raise ProviderError(f"{where}.account_field: required")
    if not provider.token_types:
        raise ProviderError(f"{where}.token_types: at least one token type")
    if not (isinstance(provider.refresh_keepalive, int) and provider.refresh_keepalive >= 0):
        raise ProviderError(f"{where}.refresh_keepalive: seconds, 0 or more")
    if not (isinstance(provider.keepalive_rate, int | float) and 0 < provider.keepalive_rate <= 1000):
        raise ProviderError(f"{where}.keepalive_rate: refreshes per second, more than 0 and at most 1000")
    if provider.kind == "api_key":
        if "{key}" not in provider.api_key_format:
            raise ProviderError(f"{where}.api_key_format: must contain {{key}}")
        return
    if not provider.client_id:
        raise ProviderError(f"{where}.client_id: required")
    if provider.token_auth_method not in AUTH_METHODS:
        raise ProviderError(f"{where}.token_auth_method: one of {', '.join(AUTH_METHODS)}")
    public_client = provider.token_auth_method == "none"  # noqa: S105 - a public client, no secret
    if not public_client and not provider.client_secret:
        raise ProviderError(
            f"{where}.client_secret: required (set MCPUC_PROVIDER_{provider.name.upper()}_CLIENT_SECRET)"
        )
    if not provider.discovery_url:
        for key in ("authorize_url", "token_url", "userinfo_url"):
            if not getattr(provider, key):
                raise ProviderError(f"{where}.{key}: required (or give discovery_url)")


def _acceptable_url(url: str, insecure_http: bool) -> bool:
    # Tokens, codes and client secrets travel to these URLs: TLS unless on this machine, or a
    # development provider explicitly marked `insecure_http`.
    parts = urlsplit(url)
    return https_unless_loopback(url) or (insecure_http and parts.scheme == "http" and bool(parts.hostname))


async def resolve_discovery(provider: ProviderConfig, http: httpx.AsyncClient) -> ProviderConfig:
    """Fill the endpoints left empty from the provider's metadata (RFC 8414 §3 / OIDC Discovery)."""
    if not provider.discovery_url:
        return provider
    where = f"providers.{provider.name}.discovery_url"
    try:
        metadata = await fetch_metadata(http, provider.discovery_url)
    except MetadataError as exc:
        raise ProviderError(f"{where}: {exc}") from None
    updates: dict[str, Any] = {}
    for ours, theirs in (
        ("authorize_url", "authorization_endpoint"),
        ("token_url", "token_endpoint"),
        ("userinfo_url", "userinfo_endpoint"),
        ("revocation_url", "revocation_endpoint"),
    ):
        if not getattr(provider, ours) and isinstance(metadata.get(theirs), str):
            updates[ours] = metadata[theirs]
    methods = metadata.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        # RFC 7636 / RFC 9700 §2.1.1: we always use S256; refuse a provider that cannot.
        raise ProviderError(f"{where}: the provider does not support PKCE S256")
    if provider.issuer is None and metadata.get("authorization_response_iss_parameter_supported") is True:
        updates["issuer"] = metadata.get("issuer")  # RFC 9207 §3: advertised, so required
    resolved = replace(provider, **updates)
    validate_provider(replace(resolved, discovery_url=""))  # every endpoint must now be present
    return resolved
