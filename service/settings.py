"""One settings object, read from the environment (prefix `MCPUC_`) and an optional TOML file.

Precedence: environment > file (`MCPUC_CONFIG_FILE` or `--config`) > defaults. pydantic-settings
reads and types every value; `load_settings` turns its errors into a `SettingsError` naming the
setting, and `Settings.require_safe_to_serve` refuses a missing setting or an unsafe combination
(the app factory calls it, so no server runs on unchecked settings). Every setting is documented
in docs/configuration.md. Secrets (keys, client secrets, the store URL) come from the environment,
or from a file named by `MCPUC_<NAME>_FILE` (a Kubernetes Secret mounted as files:
`secrets_from_files`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib
import os
import re
import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from service.providers.catalogue import (
    PROVIDER_NAME,
    ProviderConfig,
    client_secret_env,
    named_provider_tables,
    provider_error,
    with_client_secrets,
)
from service.urls import (
    LOGIN_CALLBACK_PATH,
    MCP_PATH,
    callback_path,
    client_metadata_path,
    connect_link,
    https_unless_loopback,
)
from token_store import (
    CLUSTER_SCHEME,
    DEFAULT_REDIS_PREFIX,
    POSTGRES_SCHEMES,
    REDIS_SCHEMES,
    PlaintextToRemoteRedis,
    SlotTags,
    check_store_url,
    redis_addresses,
    require_tls_to_redis_unless_loopback,
)

ENV_PREFIX = "MCPUC_"
CONFIG_FILE_ENV = f"{ENV_PREFIX}CONFIG_FILE"
FILE_SUFFIX = "_FILE"
# The secret each provider table names: client_secret_env upper-cases the name's pattern too.
PROVIDER_CLIENT_SECRET_ENV = re.compile(client_secret_env(PROVIDER_NAME.pattern))
REPLICA_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# The one definition of these defaults (the CLI imports them); the Redis key prefix's default is
# the token store's (DEFAULT_REDIS_PREFIX, imported above).
DEFAULT_DATA_DIR = Path(".mcp-url-connect")
SLOT_TAG_KEY_LABEL = b"mcp-url-connect cluster slot tags v1"  # derives `Settings.slot_tags`' key
DEFAULT_METRICS_PORT = 9464  # the port Prometheus exporters commonly take (OpenTelemetry's too)
# The bounds on requests (service/http/server.py: BoundedRequestH11Protocol). JSON-RPC messages
# and browser forms are small (at most 1 MiB: service/http/request_limits.py), so a client sending
# at 35 KB/s still gets its largest body in within the body timeout.
REQUEST_HEAD_TIMEOUT_SECONDS = 10.0
REQUEST_BODY_TIMEOUT_SECONDS = 30.0
MAX_CONNECTIONS_AWAITING_HEAD = 512

# The servers' event loop (service/http/server.py runs it): `auto` means what uvicorn's
# `--loop auto` means, uvloop where it is installed, else asyncio's own.
EventLoopChoice = Literal["auto", "uvloop", "asyncio"]


def event_loop_name(choice: EventLoopChoice) -> Literal["uvloop", "asyncio"]:
    """The loop `choice` runs on here; naming `uvloop` where it is not installed is a
    configuration error (`Settings.require_safe_to_serve`), not a silent fallback."""
    if choice == "auto":
        return "uvloop" if _installed("uvloop") else "asyncio"
    if choice == "uvloop" and not _installed("uvloop"):
        raise ValueError("MCPUC_EVENT_LOOP is uvloop, but uvloop is not installed")
    return choice


def _installed(module: str) -> bool:
    """Whether `module` imports (present but broken counts as absent, as for uvicorn's `auto`)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


class SettingsError(ValueError):
    """Invalid configuration; the message names the setting."""


class Settings(BaseSettings):
    """Every setting of the server. Build it with `load_settings`; `Settings(...)` takes keyword
    values only (it reads no environment), for tests and the development setup."""

    # A ValidationError would otherwise quote the input: keys, secrets and client secrets.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", hide_input_in_errors=True
    )

    # Public origin of this server, e.g. https://mcp.example.com. Connect URLs and the OAuth
    # redirect URI are built from it, never from Host / X-Forwarded-* (docs/threat-model.md, "4. PKCE
    # S256, exact redirect URIs").
    public_url: str = "http://127.0.0.1:8000"
    # The MCP access-token issuer (the MCP authorization server) and the audience we require.
    auth_issuer: str = ""
    auth_audience: str = ""  # default: <public_url>/mcp
    auth_algorithms: Annotated[tuple[str, ...], NoDecode] = ("RS256", "PS256", "ES256", "EdDSA")
    auth_jwks_url: str = ""  # default: discovered from the issuer's metadata
    # OIDC client used for the browser login at the MCP authorization server.
    login_client_id: str = ""
    login_client_secret: str = Field(default="", repr=False)
    login_scopes: str = "openid profile email"
    # Browser session cookie.
    session_secret: str = Field(default="", repr=False)
    session_max_age: int = 8 * 3600  # absolute lifetime
    # Key material: "kid:base64url,kid2:base64url", newest first.
    encryption_keys: str = Field(default="", repr=False)
    request_state_keys: str = Field(default="", repr=False)  # comma-separated base64url keys
    # Storage. The URL may hold a password; default sqlite:///<data_dir>/store.sqlite3.
    store_url: str = Field(default="", repr=False)
    data_dir: Path = DEFAULT_DATA_DIR
    redis_prefix: str = DEFAULT_REDIS_PREFIX  # namespace of every Redis key and channel (docs/redis.md)
    # Accept a plain-text `redis://` store on another host: its traffic (the Redis password, sealed
    # token sets, elicitation records) can be read and changed on the network. Only for a network
    # you trust (the compose and k8s evaluation Redis); otherwise `rediss://`.
    allow_plaintext_redis: bool = False
    # Redis: a write that stores a token set waits until this many replicas acknowledged it
    # (`WAIT`), at most store_wait_timeout seconds, else the write reports the store unavailable.
    store_wait_replicas: int = 0
    store_wait_timeout: float = 1.0
    # Flow limits.
    elicitation_ttl: int = 600
    state_ttl: int = 600
    max_pending_per_user: int = 5
    # How long a 2026-07-28 retry is held while its flow is pending: with the TypeScript SDK's 10
    # rounds a user gets ~10 holds; 25 s stays under the tightest common proxy limit (GCP's 30 s
    # backend timeout; nginx and AWS ALB allow 60 s of silence). docs/clients.md, "Budgets".
    retry_wait_seconds: float = 25.0
    http_timeout: float = 10.0
    # How long one tool call may spend at a provider's API, rate-limit waits included
    # (service/mcp/provider_session.py): under the tightest proxy limit, as retry_wait_seconds.
    tool_call_budget_seconds: float = Field(default=25.0, gt=0, le=3600)
    # Tool packages to serve beside ours: "package.module:function", comma-separated (installed
    # packages' `mcp_url_connect.tools` entry points are loaded too; service/mcp/tool_packages.py).
    tools: Annotated[tuple[str, ...], NoDecode] = ()
    # False: installed packages' entry points are not loaded, only what `tools` names is served.
    tool_entry_points: bool = True
    # Providers, by name: the TOML file's [providers.<name>] tables (service/providers/catalogue.py).
    providers: Mapping[str, ProviderConfig] = Field(default_factory=dict)
    # This replica's name (for example the pod name): prefixes the MCP session ids it issues so a
    # proxy can route each session back here. Empty on a single instance.
    replica_id: str = ""
    log_level: str = "INFO"
    # `json`: one JSON object a line with request_id, replica, flow_id, user_key (docs/operations.md).
    log_format: Literal["text", "json"] = "text"
    host: str = "127.0.0.1"
    port: int = 8000
    # The servers' event loop (service/http/server.py): `auto` is uvloop where installed.
    event_loop: EventLoopChoice = "auto"
    # Prometheus metrics: GET /metrics on this port only, on `host` (reach it from your scraper,
    # never publish it). 0 serves them on the main port instead, to whoever reaches that port.
    # mutant: metrics.own_port_by_default "DEFAULT_METRICS_PORT" -> "0"
    metrics_port: int = DEFAULT_METRICS_PORT
    # Per-user and per-replica caps (HTTP 429 past them): 2025-11-25 sessions held open, and
    # requests in progress (each may hold an SSE stream). A session may hold up to
    # SESSION_MEMORY_KIB (service/mcp/sdk/session_limits.py): 1000 of them fit the shipped pod's 512 MiB
    # beside the process itself (docs/operations.md, "Memory").
    max_sessions_per_user: int = 20
    max_sessions_per_replica: int = 1000
    max_requests_per_user: int = 32
    # MCP requests a second per user on a replica, with bursts (HTTP 429 with Retry-After past
    # them): the router limits only requests without a bearer token, per address, since many
    # users share one (docs/deploy.md, "Limits"). The defaults leave room for a client that
    # fans out (an agent's parallel tool calls, the conformance suite's hundreds of requests in
    # a few seconds) and still refuse a loop that floods.
    requests_per_second_per_user: float = 100.0
    request_burst_per_user: int = 200
    # Stopping: requests in flight get this long to finish after SIGTERM.
    shutdown_grace_seconds: float = 20.0
    # Idle keep-alive of client (and proxy) connections; the shipped nginx drops its idle
    # upstream connections after 4 s, before this.
    keep_alive_seconds: float = 5.0
    # A connection whose request head is not complete this long after it opened (or after its
    # previous response) is closed (service/http/server.py: BoundedRequestH11Protocol).
    request_head_timeout_seconds: float = REQUEST_HEAD_TIMEOUT_SECONDS
    # A connection whose request body is not complete this long after its head is closed.
    request_body_timeout_seconds: float = REQUEST_BODY_TIMEOUT_SECONDS
    # At most this many connections wait for a request head or body; past it the one waiting
    # longest is closed. Never more than half the process's open-file limit (`ulimit -n`).
    max_connections_awaiting_head: int = MAX_CONNECTIONS_AWAITING_HEAD
    # The admin API (service/ops/admin_api.py, docs/admin.md): on this port only, never the public one
    # (0: no admin API). Callers present an access token from the MCP authorization server issued
    # for the admin API's own resource (`admin_audience`, RFC 8707), carrying `admin_scope` and,
    # when `admin_client_ids` lists any, issued to one of those clients; or the static token whose
    # SHA-256 (hex) is `admin_token_sha256`. `admin_bearer` false: the static token only.
    admin_port: int = 0
    admin_bearer: bool = True
    admin_audience: str = ""
    admin_client_ids: Annotated[tuple[str, ...], NoDecode] = ()
    admin_scope: str = "mcp-url-connect:admin"
    admin_token_sha256: str = ""
    # Connection health webhooks (service/observability/webhooks.py): sent to this URL (https, or http to
    # loopback), signed per Standard Webhooks with this secret (`whsec_` + base64). Empty: none.
    webhook_url: str = ""
    webhook_secret: str = Field(default="", repr=False)
    # How often each replica runs the keep-alive sweep (providers' `refresh_keepalive`).
    keepalive_sweep_seconds: float = 300.0

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment and the file are read by `load_settings`, which is given both explicitly
        # (tests pass their own environment); the constructor takes keyword values only.
        return (init_settings,)

    @field_validator("providers", mode="before")
    @classmethod
    def _named_tables(cls, value: Any) -> Any:
        return named_provider_tables(value)

    @field_validator("auth_algorithms", "tools", "admin_client_ids", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # The environment gives "RS256, ES256"; the file gives a TOML list.
        return tuple(_split(value)) if isinstance(value, str) else value

    # ---- public URLs: built here only, from public_url -------------------------------------
    def _public(self, path: str) -> str:
        return self.public_url.rstrip("/") + path

    @property
    def resource_url(self) -> str:
        """The protected resource (RFC 9728 §2) and default token audience."""
        return self._public(MCP_PATH)

    def connect_url(self, elicitation_id: str) -> str:
        """The URL the user opens: it carries only the opaque elicitation id
        (2025-11-25/client-elicitation.mdx "Safe URL Handling")."""
        return self._public(connect_link(elicitation_id))

    def callback_url(self, provider: str) -> str:
        """The redirect URI registered at `provider`: one per provider (RFC 9700 §4.4.2, mix-up)."""
        return self._public(callback_path(provider))

    def client_metadata_url(self, provider: str) -> str:
        """Where this server publishes its Client ID Metadata Document for `provider` (a remote
        MCP server's authorization server fetches it; docs/gateway.md)."""
        return self._public(client_metadata_path(provider))

    @property
    def login_callback_url(self) -> str:
        return self._public(LOGIN_CALLBACK_PATH)

    # ---- other derived values --------------------------------------------------------------
    @property
    def audience(self) -> str:
        return self.auth_audience or self.resource_url

    @property
    def secure_cookies(self) -> bool:
        return urlsplit(self.public_url).scheme == "https"

    @property
    def effective_store_url(self) -> str:
        return self.store_url or f"sqlite:///{(self.data_dir / 'store.sqlite3').resolve()}"

    @property
    def uses_redis(self) -> bool:
        return urlsplit(self.effective_store_url).scheme.lower() in REDIS_SCHEMES

    @property
    def uses_postgres(self) -> bool:
        return urlsplit(self.effective_store_url).scheme.lower() in POSTGRES_SCHEMES

    def request_state_key_list(self) -> list[bytes]:
        return [_b64(k, "MCPUC_REQUEST_STATE_KEYS") for k in _split(self.request_state_keys)]

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes`, typed like the original (the `dataclasses.replace` of before)."""
        try:
            return type(self)(**{**dict(self), **changes})
        except ValidationError as exc:
            raise _settings_error(exc) from None

    def require_safe_to_serve(self) -> Settings:
        """Every setting a server needs is set and no combination is unsafe: raise SettingsError
        naming the first invalid setting; return self for chaining."""
        require_public_url_is_an_origin(self.public_url)
        require_https_unless_loopback(self)
        try:  # a malformed store URL is named as such before any rule about its host
            check_store_url(self.effective_store_url)
        except ValueError as exc:
            raise SettingsError(f"{ENV_PREFIX}STORE_URL: {exc}") from None
        self.require_tls_to_redis(self.effective_store_url, f"{ENV_PREFIX}STORE_URL")
        for name in ("auth_issuer", "login_client_id", "session_secret", "encryption_keys"):
            if not getattr(self, name):
                raise SettingsError(f"{ENV_PREFIX}{name.upper()} is required")
        if len(self.session_secret) < 32:
            raise SettingsError("MCPUC_SESSION_SECRET must be at least 32 characters")
        if not self.request_state_keys:
            raise SettingsError("MCPUC_REQUEST_STATE_KEYS is required (shared by every replica)")
        self.request_state_key_list()
        require_asymmetric_algorithms(self.auth_algorithms)
        if self.replica_id and not REPLICA_ID.fullmatch(self.replica_id):
            raise SettingsError("MCPUC_REPLICA_ID: lower-case letters, digits and - only (max 63)")
        for name in (
            "elicitation_ttl",
            "max_pending_per_user",
            "max_sessions_per_user",
            "max_sessions_per_replica",
            "max_requests_per_user",
            "request_burst_per_user",
            "max_connections_awaiting_head",
        ):
            if getattr(self, name) < 1:
                raise SettingsError(f"{ENV_PREFIX}{name.upper()} must be at least 1")
        if not 0 < self.requests_per_second_per_user <= 1e6:
            raise SettingsError("MCPUC_REQUESTS_PER_SECOND_PER_USER must be more than 0 and at most 1000000")
        for name in ("request_head_timeout_seconds", "request_body_timeout_seconds"):
            if not 0 < getattr(self, name) <= 3600:
                raise SettingsError(f"{ENV_PREFIX}{name.upper()} must be more than 0 and at most 3600")
        if not 0 <= self.metrics_port <= 65535 or (self.metrics_port and self.metrics_port == self.port):
            raise SettingsError("MCPUC_METRICS_PORT: 0 (the main port) or another free port")
        try:
            event_loop_name(self.event_loop)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        if self.store_wait_replicas < 0 or not 0 < self.store_wait_timeout < 2:
            # Below the store's 2 s socket timeout: a WAIT must end with its count, not a timeout.
            raise SettingsError(
                "MCPUC_STORE_WAIT_REPLICAS must be >= 0 and MCPUC_STORE_WAIT_TIMEOUT in (0, 2) seconds"
            )
        if not 0 <= self.admin_port <= 65535 or (
            self.admin_port and self.admin_port in (self.port, self.metrics_port)
        ):
            raise SettingsError("MCPUC_ADMIN_PORT: 0 (no admin API) or a port of its own")
        if self.admin_token_sha256 and not re.fullmatch(r"[0-9a-f]{64}", self.admin_token_sha256):
            raise SettingsError("MCPUC_ADMIN_TOKEN_SHA256: the token's SHA-256, 64 lower-case hex digits")
        if self.admin_port and self.admin_bearer:
            require_admin_resource_of_its_own(self.admin_audience, (self.audience, self.resource_url))
        if self.admin_port and not (self.admin_bearer or self.admin_token_sha256):
            raise SettingsError(
                "MCPUC_ADMIN_TOKEN_SHA256 is required with MCPUC_ADMIN_BEARER=false: "
                "the admin API would take no token"
            )
        if self.webhook_url and not (https_unless_loopback(self.webhook_url) and self.webhook_secret):
            raise SettingsError(
                "MCPUC_WEBHOOK_URL: https (or http to loopback), with MCPUC_WEBHOOK_SECRET set"
            )
        return self

    def slot_tags(self) -> SlotTags | None:
        """On Redis Cluster, how the ids, states and nonces minted for a user name the user's hash
        slot, masked so that nobody without the key can tell whose they are (`SlotTags`); None on
        every other store, whose ids carry nothing but random bits. The key is derived from
        MCPUC_SESSION_SECRET, as the log pseudonyms' is (`Pseudonyms`): a secret every replica
        already shares, whose rotation already ends what is in flight (here, flows started before
        it: minutes), under a label of its own, so neither use tells anything about the other."""
        # mutant: settings.slot_tags_only_on_cluster
        if urlsplit(self.effective_store_url).scheme.lower() != CLUSTER_SCHEME:
            return None
        return SlotTags(hmac.new(self.session_secret.encode(), SLOT_TAG_KEY_LABEL, hashlib.sha256).digest())

    def require_tls_to_redis(self, url: str, setting: str) -> None:
        """A Redis store URL (held in `setting`) reaches Redis over TLS or on this machine, unless
        MCPUC_ALLOW_PLAINTEXT_REDIS (`require_tls_to_redis_unless_loopback`, on every address it
        names: its host, a query's `host=`, each sentinel or cluster node); SettingsError naming
        `setting`, never the URL. Every connection is checked again when it opens."""
        try:
            addresses = redis_addresses(url)
        except ValueError:
            return  # malformed: `check_store_url` says so
        try:
            require_tls_to_redis_unless_loopback(addresses, allow_plaintext=self.allow_plaintext_redis)
        except PlaintextToRemoteRedis:
            raise SettingsError(
                f"{setting}: plain redis:// only to loopback; use rediss:// (TLS), or set "
                f"{ENV_PREFIX}ALLOW_PLAINTEXT_REDIS=true for a network you trust"
            ) from None

    def validate(self) -> Settings:  # type: ignore[override]  # pydantic's deprecated classmethod
        """`require_safe_to_serve`, under the name of the public API before it (docs/api.md)."""
        warnings.warn(
            "Settings.validate() is deprecated: call Settings.require_safe_to_serve()",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.require_safe_to_serve()


def require_public_url_is_an_origin(public_url: str) -> None:
    """MCPUC_PUBLIC_URL is `scheme://host[:port]`: every URL we hand out is built from it."""
    url = urlsplit(public_url)
    if (
        url.scheme not in ("http", "https")
        or not url.hostname
        or url.path not in ("", "/")
        or url.query
        or url.fragment
        or url.username
        or url.password
    ):
        raise SettingsError("MCPUC_PUBLIC_URL must be an http(s) origin such as https://mcp.example.com")


def require_https_unless_loopback(settings: Settings) -> None:
    """The public URL and the token issuer use https; plain http only on loopback.

    Without https the session cookie loses Secure and `__Host-`: anyone on the path can read or
    plant it (RFC 6265bis §8.5). The issuer's metadata and JWKS decide which access tokens we
    accept, so they need TLS as much (RFC 8414 §3: "MUST use TLS"). A development server on
    loopback (the compose demo) may reach a plain-http development issuer.
    """
    # mutant: settings.https_outside_loopback
    if not https_unless_loopback(settings.public_url):
        raise SettingsError("MCPUC_PUBLIC_URL must use https (plain http only on loopback)")
    issuer = settings.auth_issuer
    development = urlsplit(settings.public_url).scheme == "http"  # loopback, checked just above
    if issuer and not https_unless_loopback(issuer) and not (development and issuer.startswith("http://")):
        raise SettingsError("MCPUC_AUTH_ISSUER must use https (plain http only on loopback)")


def require_asymmetric_algorithms(algorithms: tuple[str, ...]) -> None:
    """RFC 8725 §3.1/3.2: asymmetric algorithms only; never `none` or a shared secret."""
    for algorithm in algorithms:
        # mutant: settings.no_hs_or_none
        if algorithm.lower() == "none" or algorithm.upper().startswith("HS"):
            raise SettingsError(f"MCPUC_AUTH_ALGORITHMS must not contain {algorithm}")


def require_admin_resource_of_its_own(admin_audience: str, mcp_audiences: tuple[str, ...]) -> None:
    """The admin API takes only access tokens issued for it: a resource of its own, named by
    `admin_audience`, which no MCP access token carries (RFC 8707 §2: the authorization server
    audience-restricts a token to the resource it was requested for; RFC 9068 §4: the resource
    server rejects a token whose `aud` does not name it). With the MCP resource's audience, any
    MCP client an admin authorized for the admin scope would be an operator, and its token would
    open MCP sessions too."""
    # mutant: settings.admin_resource_of_its_own
    if not admin_audience or admin_audience in mcp_audiences:
        raise SettingsError(
            "MCPUC_ADMIN_AUDIENCE is required while the admin API takes bearer tokens "
            "(MCPUC_ADMIN_BEARER), and must name the admin API, not the MCP resource "
            "(set MCPUC_ADMIN_BEARER=false for the static token only)"
        )


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _b64(value: str, setting: str) -> bytes:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except ValueError as exc:
        raise SettingsError(f"{setting}: not base64url") from exc
    if len(raw) != 32:
        raise SettingsError(f"{setting}: each key must be 32 bytes")
    return raw


def _settings_error(exc: ValidationError) -> SettingsError:
    """The first error, naming the setting; never the value (it may be a secret)."""
    error = exc.errors(include_input=False)[0]
    name = str(error["loc"][0]) if error["loc"] else "?"
    if name == "providers":
        return SettingsError(str(provider_error(error)))
    if error["type"] == "extra_forbidden":
        return SettingsError(f"config file: unknown setting {name}")
    return SettingsError(f"{ENV_PREFIX}{name.upper()}: {error['msg']}")


def _environment_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings `environ` gives, read by pydantic-settings' environment source."""
    source = EnvSettingsSource(Settings)
    # The source reads `os.environ` when built; its public `env_vars` takes the given mapping
    # instead (tests and `secrets_from_files` pass their own).
    source.env_vars = parse_env_vars(
        environ, source.case_sensitive, source.env_ignore_empty, source.env_parse_none_str
    )
    return source()


def _file_values(path: Path) -> dict[str, Any]:
    # pydantic-settings skips a missing file silently; a named config file must exist.
    if not path.is_file():
        raise SettingsError(f"cannot read config file {path}: not a file")
    try:
        return dict(TomlConfigSettingsSource(Settings, toml_file=path)())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read config file {path}: {exc}") from exc


def secret_env_names(environ: Mapping[str, str]) -> set[str]:
    """The environment variables that hold secrets: every setting declared with `repr=False`,
    and each provider's client secret."""
    names = {f"{ENV_PREFIX}{name.upper()}" for name, field in Settings.model_fields.items() if not field.repr}
    for variable in environ:
        base = variable.removesuffix(FILE_SUFFIX)
        if PROVIDER_CLIENT_SECRET_ENV.fullmatch(base):
            names.add(base)
    return names


def secrets_from_files(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with each secret's `MCPUC_<NAME>_FILE` replaced by `MCPUC_<NAME>`, the content of
    that file less one trailing newline (what `kubectl create secret --from-file` and editors
    leave). A Secret mounted as files stays out of the process environment, which `/proc`, crash
    reports and child processes expose (CIS Kubernetes Benchmark 5.4.1). Setting both forms is
    refused: which one wins would be a guess. Errors name the variable and the path, never the
    content."""
    resolved = dict(environ)
    for name in sorted(secret_env_names(environ)):
        file_env = name + FILE_SUFFIX
        if file_env not in environ:
            continue
        # mutant: settings.secret_in_one_form
        if name in environ:
            raise SettingsError(f"{name} and {file_env} are both set: set one")
        path = Path(environ[file_env])
        try:
            content = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise SettingsError(f"{file_env}: cannot read {path}: {reason}") from None
        resolved[name] = content.removesuffix("\n")
        del resolved[file_env]
    return resolved


def load_settings(environ: Mapping[str, str] | None = None, config_file: Path | None = None) -> Settings:
    """Settings from the environment (secrets also from `*_FILE` files) and the optional TOML file
    (environment wins), not yet validated: call `.require_safe_to_serve()` (create_app does)."""
    environ = secrets_from_files(os.environ if environ is None else environ)
    file_path = config_file or (Path(environ[CONFIG_FILE_ENV]) if CONFIG_FILE_ENV in environ else None)
    file_values = _file_values(file_path) if file_path is not None else {}
    providers = with_client_secrets(file_values.pop("providers", {}), environ)
    env_values = _environment_values(environ)
    env_values.pop("providers", None)  # providers come from the file's tables only
    try:
        return Settings(**{**file_values, **env_values, "providers": providers})
    except ValidationError as exc:
        raise _settings_error(exc) from None
