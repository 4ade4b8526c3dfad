"""One settings object, read from the environment (prefix `MCPUC_`) and an optional TOML file.

Precedence: environment > file (`MCPUC_CONFIG_FILE` or `--config`) > defaults. Every setting is
documented in docs/configuration.md. Secrets (keys, client secrets) should come from the
environment or a file readable only by the service user.
"""

from __future__ import annotations

import base64
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from service.providers import ProviderConfig, ProviderError, build_provider

ENV_PREFIX = "MCPUC_"
PROVIDER_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")  # used with fullmatch
REPLICA_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class SettingsError(ValueError):
    """Invalid configuration; the message names the setting."""


@dataclass(frozen=True)
class Settings:
    # Public origin of this server, e.g. https://mcp.example.com. Connect URLs and the OAuth
    # redirect URI are built from it, never from Host / X-Forwarded-* (DESIGN invariant 4).
    public_url: str = "http://127.0.0.1:8000"
    # The MCP access-token issuer (the MCP authorization server) and the audience we require.
    auth_issuer: str = ""
    auth_audience: str = ""  # default: <public_url>/mcp
    auth_algorithms: tuple[str, ...] = ("RS256", "PS256", "ES256", "EdDSA")
    auth_jwks_url: str = ""  # default: discovered from the issuer's metadata
    # OIDC client used for the browser login at the MCP authorization server.
    login_client_id: str = ""
    login_client_secret: str = field(repr=False, default="")
    login_scopes: str = "openid"
    # Browser session cookie.
    session_secret: str = field(repr=False, default="")
    session_max_age: int = 8 * 3600  # absolute lifetime
    # Key material: "kid:base64url,kid2:base64url", newest first.
    encryption_keys: str = field(repr=False, default="")
    request_state_keys: str = field(repr=False, default="")  # comma-separated base64url keys
    # Storage.
    store_url: str = field(
        repr=False, default=""
    )  # may hold a password; default sqlite:///<data_dir>/store.sqlite3
    data_dir: Path = Path(".mcp-url-connect")
    redis_prefix: str = "mcpuc:"  # namespace of every Redis key and channel (docs/redis.md)
    # Flow limits.
    elicitation_ttl: int = 600
    state_ttl: int = 600
    max_pending_per_user: int = 5
    retry_wait_seconds: float = 5.0
    http_timeout: float = 10.0
    # Providers, by name. Loaded from the TOML file's [providers.<name>] tables.
    providers: Mapping[str, ProviderConfig] = field(default_factory=dict)
    # This replica's name (for example the pod name): prefixes the MCP session ids it issues so a
    # proxy can route each session back here. Empty on a single instance.
    replica_id: str = ""
    log_level: str = "INFO"
    host: str = "127.0.0.1"
    port: int = 8000

    # ---- derived values -------------------------------------------------------------------
    @property
    def resource_url(self) -> str:
        return self.public_url.rstrip("/") + "/mcp"

    @property
    def audience(self) -> str:
        return self.auth_audience or self.resource_url

    def callback_url(self, provider: str) -> str:
        """The redirect URI registered at `provider`: one per provider (RFC 9700 §4.4.2, mix-up)."""
        return f"{self.public_url.rstrip('/')}/callback/{provider}"

    @property
    def login_callback_url(self) -> str:
        return self.public_url.rstrip("/") + "/login/callback"

    @property
    def secure_cookies(self) -> bool:
        return urlsplit(self.public_url).scheme == "https"

    @property
    def effective_store_url(self) -> str:
        return self.store_url or f"sqlite:///{(self.data_dir / 'store.sqlite3').resolve()}"

    @property
    def uses_redis(self) -> bool:
        return urlsplit(self.effective_store_url).scheme in ("redis", "rediss")

    def request_state_key_list(self) -> list[bytes]:
        return [_b64(k, "MCPUC_REQUEST_STATE_KEYS") for k in _split(self.request_state_keys)]

    def validate(self) -> Settings:
        """Raise SettingsError naming the first invalid setting; return self for chaining."""
        url = urlsplit(self.public_url)
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
        if url.scheme == "http" and url.hostname not in ("127.0.0.1", "localhost", "::1"):
            # Without https the session cookie loses Secure and `__Host-`: anyone on the path can
            # read or plant it (RFC 6265bis §8.5). Plain http is for loopback development only.
            raise SettingsError("MCPUC_PUBLIC_URL must use https (plain http only on loopback)")
        for name in ("auth_issuer", "login_client_id", "session_secret", "encryption_keys"):
            if not getattr(self, name):
                raise SettingsError(f"{ENV_PREFIX}{name.upper()} is required")
        if len(self.session_secret) < 32:
            raise SettingsError("MCPUC_SESSION_SECRET must be at least 32 characters")
        if not self.request_state_keys:
            raise SettingsError("MCPUC_REQUEST_STATE_KEYS is required (shared by every replica)")
        self.request_state_key_list()
        for algorithm in self.auth_algorithms:
            if algorithm.lower() == "none" or algorithm.upper().startswith("HS"):
                # RFC 8725 §3.1/3.2: asymmetric algorithms only; never `none` or a shared secret.
                raise SettingsError(f"MCPUC_AUTH_ALGORITHMS must not contain {algorithm}")
        if self.replica_id and not REPLICA_ID.fullmatch(self.replica_id):
            raise SettingsError("MCPUC_REPLICA_ID: lower-case letters, digits and - only (max 63)")
        if self.max_pending_per_user < 1:
            raise SettingsError("MCPUC_MAX_PENDING_PER_USER must be at least 1")
        return self


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


def _coerce(name: str, raw: Any, current: Any) -> Any:
    """Convert an environment string or TOML value to the type of the default."""
    try:
        if isinstance(current, bool):
            if isinstance(raw, bool):
                return raw
            return str(raw).strip().lower() in ("1", "true", "yes", "on")
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, Path):
            return Path(str(raw))
        if isinstance(current, tuple):
            return tuple(raw) if isinstance(raw, list) else tuple(_split(str(raw)))
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{ENV_PREFIX}{name.upper()}: cannot read {type(current).__name__}") from exc
    return str(raw)


def _providers_from(table: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, ProviderConfig]:
    providers: dict[str, ProviderConfig] = {}
    for name, spec in table.items():
        if not PROVIDER_NAME.fullmatch(name):
            # The name becomes part of an environment variable (and of stored keys).
            raise SettingsError(f"providers.{name}: names use lower-case letters, digits and _ only")
        if not isinstance(spec, Mapping):
            raise SettingsError(f"providers.{name} must be a table")
        try:
            providers[name] = build_provider(name, spec, environ)
        except ProviderError as exc:
            raise SettingsError(str(exc)) from None
    return providers


def load_settings(environ: Mapping[str, str] | None = None, config_file: Path | None = None) -> Settings:
    """Build Settings from the environment and the optional TOML file."""
    environ = os.environ if environ is None else environ
    file_path = config_file or (
        Path(environ[f"{ENV_PREFIX}CONFIG_FILE"]) if f"{ENV_PREFIX}CONFIG_FILE" in environ else None
    )
    file_values: dict[str, Any] = {}
    if file_path is not None:
        try:
            file_values = tomllib.loads(file_path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read config file {file_path}: {exc}") from exc
    settings = Settings()
    updates: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name == "providers":
            continue
        current = getattr(settings, f.name)
        if f.name in file_values:
            updates[f.name] = _coerce(f.name, file_values[f.name], current)
        env_name = ENV_PREFIX + f.name.upper()
        if env_name in environ:
            updates[f.name] = _coerce(f.name, environ[env_name], current)
    updates["providers"] = _providers_from(file_values.get("providers", {}), environ)
    unknown = set(file_values) - {f.name for f in fields(Settings)}
    if unknown:
        raise SettingsError(f"config file: unknown setting {sorted(unknown)[0]}")
    return replace(settings, **updates)
