"""The provider catalogue: one `ProviderConfig` per third-party service, from presets + configuration.

A provider is declared in the TOML file as `[providers.<name>]`, optionally starting from a
preset (`preset = "github"`), with its client secret from `MCPUC_PROVIDER_<NAME>_CLIENT_SECRET`.
`ProviderConfig` is a pydantic model (`Settings.providers` holds them): its validators refuse an
unusable entry, and `provider_error` names the field (`providers.<name>.<field>`). Endpoints left
empty with a `discovery_url` are filled from the provider's metadata at start-up
(`resolve_discovery`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, Self
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from service.errors import MetadataError
from service.providers.discovery import fetch_metadata
from service.providers.pagination import PaginationStyle
from service.urls import https_unless_loopback

# "oauth2": authorization code + PKCE; "api_key": the user pastes a key on our page; "mcp": a remote
# MCP server protected by OAuth, found and registered with at start-up (docs/gateway.md).
ProviderKind = Literal["oauth2", "api_key", "mcp"]
# RFC 7591 §2 token_endpoint_auth_method values we speak ("none": a public client).
TokenAuthMethod = Literal["client_secret_post", "client_secret_basic", "none"]
BEARER = "Bearer"  # RFC 6750: the token type we know how to present
# A provider's name becomes part of an environment variable and of stored keys.
PROVIDER_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")  # used with fullmatch


class ProviderError(ValueError):
    """An invalid provider entry; the message names `providers.<name>.<field>`."""


class _FieldRule(ValueError):
    """A rule across fields broken at `field` (pydantic locates a model validator's error at the
    model; `provider_error` appends the field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ProviderConfig(BaseModel):
    """A third-party service the server connects users to.

    The endpoints are `str`, not pydantic's URL types: those rewrite the URL (a bare origin gains a
    trailing slash), and the flow sends to and compares the URLs as the operator wrote them.
    """

    # A ValidationError would otherwise quote the whole table, client secret included.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    name: str
    display_name: str = ""  # default: the name
    kind: ProviderKind = "oauth2"
    preset: str = ""
    authorize_url: str = ""
    token_url: str = ""
    userinfo_url: str = ""  # GET with the user's token: names the account
    revocation_url: str = ""  # RFC 7009; empty when the provider has none
    discovery_url: str = ""  # RFC 8414 / OIDC metadata: fills the empty endpoints at start-up
    api_base_url: str = ""  # base of the provider's API, for tools' authenticated clients
    # How the API names its next page (service/providers/pagination.py); set by the presets.
    pagination: PaginationStyle = "none"
    # The most a tool's API call reads of one answer (get_json, post_json, each page), and of one
    # streamed body: a page of 100 GitHub repositories is about 570 kB.
    api_max_answer_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    api_max_stream_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    client_id: str = ""
    client_secret: str = Field(default="", repr=False)
    token_auth_method: TokenAuthMethod = "client_secret_post"  # noqa: S105 - a method name
    scopes: tuple[str, ...] = ()
    scope_param: str = "scope"  # Slack asks for user-token scopes as `user_scope`
    # Asked for in every authorization request besides `scopes`, never required of a grant: the
    # authorization server may leave them out (`offline_access`, which asks for a refresh token).
    optional_scopes: tuple[str, ...] = ()
    authorize_params: Mapping[str, str] = Field(default_factory=dict)  # e.g. access_type=offline
    consent_prompt_for_refresh: bool = False  # Google: prompt=consent when we hold no refresh token
    token_path: str = ""  # where the user's token sits in the token response (Slack: authed_user)
    # RFC 6749 §7.1: the `token_type` values accepted, each then presented as a bearer token
    token_types: tuple[str, ...] = Field(default=(BEARER,), min_length=1)
    issuer: str | None = None  # RFC 9207: when set, the authorization response must carry this `iss`
    # userinfo field naming the account (the provider's subject); dotted
    account_field: str = Field(default="id", min_length=1)
    label_field: str = "login"  # userinfo field shown to the user; dotted
    tenant: str = ""  # Microsoft Entra: substituted for {tenant} in the endpoints
    refresh_skew_seconds: int = 60  # refresh this long before expiry
    insecure_http: bool = False  # development only (mock providers in compose): allow plain http
    api_key_header: str = "Authorization"  # api_key providers: how the key is sent
    api_key_format: str = "Bearer {key}"
    # Keep-alive (service/flow/keepalive.py): refresh a grant not refreshed for this many seconds, before
    # the provider expires an unused refresh token (Microsoft: 90 days; Google: 6 months). 0: off.
    refresh_keepalive: int = Field(default=0, ge=0)
    # Refresh access tokens about to expire in the sweep, so a tool call never waits for one.
    keep_access_fresh: bool = False
    keepalive_rate: float = Field(default=5.0, gt=0, le=1000)  # sweep refreshes started per second
    # RFC 8707: the resource the tokens are for, sent with authorization, token and refresh requests.
    resource: str = ""
    # RFC 9207 with `issuer` set: "required" (the metadata advertises `iss`) or "if_present" (an
    # `iss` that is sent must match: the 2026-07-28 MCP authorization table).
    issuer_in_response: Literal["required", "if_present"] = "required"
    # kind = "mcp" (docs/gateway.md): the remote MCP server and how its tools are served here.
    url: str = ""  # its MCP endpoint, the protected resource
    tool_prefix: str = ""  # its tools read <tool_prefix>_<name>; default: the provider's name
    client_metadata_url: str = ""  # where our Client ID Metadata Document for it is published
    allow_private_network: bool = False  # its URLs may resolve to loopback or private addresses
    call_timeout_seconds: float = Field(default=30.0, gt=0, le=600)  # one forwarded call, whole
    max_result_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_calls_per_user: int = Field(default=4, ge=1, le=1000)  # in flight, per replica
    max_calls: int = Field(default=64, ge=1, le=100_000)  # in flight to it, per replica
    max_sessions: int = Field(default=200, ge=1, le=100_000)  # pooled downstream sessions, per replica
    session_idle_seconds: float = Field(default=300.0, gt=0, le=86400)
    # Set by discovery, never by a file: the entry as the operator wrote it, before discovery filled
    # it, so a downstream that moves to another authorization server is resolved again under the
    # same rules and the operator's own choices (a pinned `issuer`, `scopes`, a `client_id`).
    configured: ProviderConfig | None = Field(default=None, repr=False)

    @property
    def prefix(self) -> str:
        """The prefix of a remote MCP server's tools here (`<prefix>_<tool>`)."""
        return self.tool_prefix or self.name

    @property
    def resolved(self) -> bool:
        """A remote MCP server whose discovery and registration ran (`mcp_downstream`)."""
        return self.kind != "mcp" or bool(self.authorize_url and self.token_url and self.client_id)

    @model_validator(mode="before")
    @classmethod
    def _over_its_preset(cls, data: Any) -> Any:
        """The preset's values under the entry's own, the tenant in the endpoints, the display name."""
        if not isinstance(data, Mapping):
            return data
        preset = str(data.get("preset", ""))
        if preset and preset not in PRESETS:
            raise _FieldRule("preset", f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        values: dict[str, Any] = {**PRESETS.get(preset, {}), **data}
        tenant = str(values.get("tenant", ""))
        for key in ENDPOINTS:
            if "{tenant}" in str(values.get(key, "")):
                if not tenant:
                    raise _FieldRule("tenant", f"required by the {preset or 'given'} endpoints")
                values[key] = str(values[key]).replace("{tenant}", tenant)
        if not values.get("display_name"):
            values["display_name"] = values.get("name", "")
        return values

    @field_validator("configured", mode="before")
    @classmethod
    def _set_by_discovery(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, ProviderConfig):
            raise ValueError("set by discovery, not in a configuration file")
        return value

    @field_validator("scopes", "optional_scopes", "token_types", mode="before")
    @classmethod
    def _a_list(cls, value: Any) -> Any:
        # A TOML string where a list is meant would otherwise be read as its characters.
        if isinstance(value, str):
            raise ValueError("must be a list of strings")
        return value

    @model_validator(mode="after")
    def require_https_endpoints(self) -> Self:
        """Tokens, codes and client secrets travel to these URLs: TLS unless on this machine
        (`https_unless_loopback`), or a development provider explicitly marked `insecure_http`."""
        for key in ENDPOINTS:
            url = getattr(self, key)
            # mutant: providers.https_endpoints
            if url and not (https_unless_loopback(url) or (self.insecure_http and _plain_http(url))):
                raise _FieldRule(key, "must be an https URL (plain http only on loopback)")
        return self

    @model_validator(mode="after")
    def require_what_the_flow_needs(self) -> Self:
        """An api_key provider needs where the key goes; an OAuth client needs its id, its secret
        (unless public) and every endpoint, or a discovery URL to find them."""
        if self.kind == "api_key":
            if "{key}" not in self.api_key_format:
                raise _FieldRule("api_key_format", "must contain {key}")
            return self
        if self.kind == "mcp":
            return self._what_a_downstream_needs()
        if not self.client_id:
            raise _FieldRule("client_id", "required")
        public_client = self.token_auth_method == "none"  # noqa: S105 - a public client, no secret
        if not public_client and not self.client_secret:
            raise _FieldRule("client_secret", f"required (set {client_secret_env(self.name)})")
        if not self.discovery_url:
            for key in ("authorize_url", "token_url", "userinfo_url"):
                if not getattr(self, key):
                    raise _FieldRule(key, "required (or give discovery_url)")
        return self

    def _what_a_downstream_needs(self) -> Self:
        """A remote MCP server needs its URL; a client given beforehand needs its secret (unless
        public); once resolved, the endpoints and client the flow uses."""
        if not self.url:
            raise _FieldRule("url", 'required for kind = "mcp" (the server\'s MCP endpoint)')
        if urlsplit(self.url).fragment:
            raise _FieldRule("url", "must not have a fragment (RFC 8707 §2)")
        if self.tool_prefix and not PROVIDER_NAME.fullmatch(self.tool_prefix):
            raise _FieldRule("tool_prefix", "lower-case letters, digits and _ only, a letter first")
        if self.client_metadata_url and urlsplit(self.client_metadata_url).scheme != "https":
            raise _FieldRule("client_metadata_url", "must be an https URL")
        public_client = self.token_auth_method == "none"  # noqa: S105 - a public client, no secret
        if self.client_id and not public_client and not self.client_secret:
            raise _FieldRule("client_secret", f"required with client_id (set {client_secret_env(self.name)})")
        if self.authorize_url and not (self.token_url and self.client_id):
            raise _FieldRule("token_url", "required once the downstream is resolved")
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # GitHub OAuth App: tokens do not expire, no refresh token, no RFC 7009 endpoint.
    "github": {
        "display_name": "GitHub",
        "authorize_url": "https://github.com/login/oauth/authorize",
        "token_url": "https://github.com/login/oauth/access_token",
        "userinfo_url": "https://api.github.com/user",
        "api_base_url": "https://api.github.com",
        "pagination": "link_header",
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
        "pagination": "link_header",
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
        "pagination": "next_page_token",
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
        "pagination": "next_cursor",
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
        "pagination": "odata_next_link",
        "scopes": ("openid", "profile", "offline_access", "User.Read"),
        "account_field": "sub",
        "label_field": "name",
    },
    # Any OpenID Connect provider: endpoints from discovery_url.
    "oidc": {"scopes": ("openid",), "account_field": "sub", "label_field": "email"},
    # Any OAuth 2 provider: every endpoint given explicitly.
    "oauth2": {},
}

ENDPOINTS = (
    "authorize_url",
    "token_url",
    "userinfo_url",
    "revocation_url",
    "discovery_url",
    "api_base_url",
    "url",
)


def _plain_http(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "http" and bool(parts.hostname)


def client_secret_env(name: str) -> str:
    """The environment variable holding provider `name`'s client secret (so the TOML file can be
    committed)."""
    return f"MCPUC_PROVIDER_{name.upper()}_CLIENT_SECRET"


def with_client_secrets(tables: object, environ: Mapping[str, str]) -> object:
    """The file's `[providers.<name>]` tables, each given its client secret from `environ`
    (`client_secret_env`), which wins over the file."""
    if not isinstance(tables, Mapping):
        return tables  # `named_provider_tables` refuses it
    given: dict[str, object] = {}
    for name, table in tables.items():
        secret_env = client_secret_env(str(name))
        given[name] = (
            {**table, "client_secret": environ[secret_env]}
            if isinstance(table, Mapping) and secret_env in environ
            else table
        )
    return given


def named_provider_tables(tables: object) -> dict[str, object]:
    """`[providers.<name>]` tables, each named by its key for `ProviderConfig`, which validates
    the rest; model instances pass through."""
    if not isinstance(tables, Mapping):
        raise ProviderError("providers must be a table of [providers.<name>] tables")
    named: dict[str, object] = {}
    for name, table in tables.items():
        if not PROVIDER_NAME.fullmatch(name):
            raise ProviderError(f"providers.{name}: names use lower-case letters, digits and _ only")
        if isinstance(table, Mapping):
            if "name" in table:  # the key names the provider
                raise ProviderError(f"providers.{name}.name: unknown field")
            table = {**table, "name": name}
        elif not isinstance(table, ProviderConfig):
            raise ProviderError(f"providers.{name} must be a table")
        named[name] = table
    return named


def provider_error(error: ErrorDetails, where: tuple[str | int, ...] = ()) -> ProviderError:
    """One pydantic error as `providers.<name>.<field>: <what is wrong>`; never the value."""
    loc = [*where, *error["loc"]]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, ProviderError):
        return cause
    if isinstance(cause, _FieldRule):
        loc.append(cause.field)
        message = cause.message
    elif error["type"] == "extra_forbidden":
        message = "unknown field"
    else:
        message = str(cause) if isinstance(cause, ValueError) else error["msg"]
    return ProviderError(f"{'.'.join(str(part) for part in loc)}: {message}")


def build_provider(name: str, spec: Mapping[str, Any], environ: Mapping[str, str]) -> ProviderConfig:
    """A validated ProviderConfig from a TOML table, its preset and the environment."""
    table = named_provider_tables(with_client_secrets({name: spec}, environ))[name]
    try:
        return ProviderConfig.model_validate(table)
    except ValidationError as exc:
        raise provider_error(exc.errors(include_input=False)[0], ("providers", name)) from None


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
    # mutant: providers.discovery_s256
    if isinstance(methods, list) and "S256" not in methods:
        # RFC 7636 / RFC 9700 §2.1.1: we always use S256; refuse a provider that cannot.
        raise ProviderError(f"{where}: the provider does not support PKCE S256")
    if provider.issuer is None and metadata.get("authorization_response_iss_parameter_supported") is True:
        updates["issuer"] = metadata.get("issuer")  # RFC 9207 §3: advertised, so required
    try:  # every endpoint must now be present, so validated as if there were no discovery_url
        resolved = ProviderConfig.model_validate({**provider.model_dump(), **updates, "discovery_url": ""})
    except ValidationError as exc:
        raise provider_error(exc.errors(include_input=False)[0], ("providers", provider.name)) from None
    return resolved.model_copy(update={"discovery_url": provider.discovery_url})
