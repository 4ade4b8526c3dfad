"""`mcp-url-connect demo`: the whole flow in one process, on the embedded store, no accounts.

Two listeners: the MCP server on PORT and the development authorization server plus the
mock providers on PORT+1 (an issuer of their own, as in production): `mockhub`, and the real
providers' presets `github`, `google` and `slack` served by MockHub, MockGoogle and MockSlack at
the real APIs' paths (mock_providers/presets.py), so a tool package written for them runs
unchanged. Secrets are generated once and kept, mode 0600, under the data directory.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mock_providers.config import ClientSpec, MockProvidersConfig
from mock_providers.presets import GOOGLE_CLIENT_ID, SLACK_CLIENT_ID, preset_providers
from service.providers.catalogue import ProviderConfig, client_secret_env
from service.settings import Settings
from token_store import KeyRing

LOGIN_CLIENT_ID = "mcp-url-connect-login"
MOCKHUB_CLIENT_ID = "mcp-url-connect"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def demo_secrets(data_dir: Path) -> dict[str, str]:
    """Load the demo's generated secrets, creating them on first run (and any a data dir made
    by an older version lacks)."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / "demo-secrets.json"
    loaded: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    makers: dict[str, Callable[[], str]] = {
        "session_secret": lambda: secrets.token_urlsafe(48),
        "encryption_keys": lambda: f"demo1:{_b64(KeyRing.generate_key())}",
        "request_state_keys": lambda: _b64(secrets.token_bytes(32)),
        "login_client_secret": lambda: secrets.token_urlsafe(32),
        "mockhub_client_secret": lambda: secrets.token_urlsafe(32),
        "google_client_secret": lambda: secrets.token_urlsafe(32),
        "slack_client_secret": lambda: secrets.token_urlsafe(32),
    }
    missing = {name: make() for name, make in makers.items() if name not in loaded}
    if missing:
        _write_private(path, json.dumps({**loaded, **missing}))
    return {**loaded, **missing}


@dataclass(frozen=True)
class Demo:
    settings: Settings
    providers: MockProvidersConfig

    @property
    def providers_url(self) -> str:
        return self.providers.base_url


def build_demo(
    host: str, port: int, providers_port: int, data_dir: Path, *, presets: bool = False, **overrides: Any
) -> Demo:
    """The one-process demo: MCP server on `port`, dev AS and mock providers on `providers_port`."""
    return build_dev_setup(
        f"http://{host}:{port}",
        f"http://{host}:{providers_port}",
        data_dir,
        presets=presets,
        host=host,
        port=port,
        **overrides,
    )


def build_dev_setup(
    public_url: str, providers_url: str, data_dir: Path, *, presets: bool = False, **overrides: Any
) -> Demo:
    """Settings for MCP server(s) at `public_url` using the dev AS and mockhub at `providers_url`;
    with `presets`, also `github`, `google` and `slack`, served by MockHub, MockGoogle and
    MockSlack (which are then served too)."""
    data_dir = data_dir.resolve()
    values = demo_secrets(data_dir)
    mockhub = ProviderConfig(
        name="mockhub",
        display_name="MockHub",
        authorize_url=f"{providers_url}/mockhub/authorize",
        token_url=f"{providers_url}/mockhub/token",
        userinfo_url=f"{providers_url}/mockhub/user",
        api_base_url=f"{providers_url}/mockhub",  # so a tool's api.get_json("/user") reaches MockHub
        revocation_url=f"{providers_url}/mockhub/revoke",
        client_id=MOCKHUB_CLIENT_ID,
        client_secret=values["mockhub_client_secret"],
        scopes=("read:user",),
        issuer=f"{providers_url}/mockhub",
        account_field="id",
        label_field="login",
        # development only: the mock providers speak plain http, on loopback or in compose's network
        insecure_http=providers_url.startswith("http:"),
    )
    settings = Settings(
        public_url=public_url,
        auth_issuer=providers_url,
        login_client_id=LOGIN_CLIENT_ID,
        login_client_secret=values["login_client_secret"],
        session_secret=values["session_secret"],
        encryption_keys=values["encryption_keys"],
        request_state_keys=values["request_state_keys"],
        data_dir=data_dir,
        providers={"mockhub": mockhub},
        **overrides,
    ).require_safe_to_serve()
    providers = MockProvidersConfig(
        base_url=providers_url,
        data_dir=data_dir,
        mcp_resource=settings.resource_url,
        login_client=ClientSpec(
            LOGIN_CLIENT_ID, values["login_client_secret"], (settings.login_callback_url,)
        ),
        mockhub_client=ClientSpec(
            MOCKHUB_CLIENT_ID, values["mockhub_client_secret"], (settings.callback_url("mockhub"),)
        ),
    )
    demo = Demo(settings, providers)
    return with_preset_providers(demo, values) if presets else demo


def with_preset_providers(demo: Demo, values: dict[str, str] | None = None) -> Demo:
    """`demo` with `github`, `google` and `slack` configured from their presets and registered at
    MockHub (beside `mockhub`, with its client), MockGoogle and MockSlack; `values` are the demo's
    secrets (fresh ones for Google and Slack without them)."""
    settings, mocks = demo.settings, demo.providers
    values = values or {}
    client_secrets = {
        "github": settings.providers["mockhub"].client_secret,
        "google": values.get("google_client_secret") or secrets.token_urlsafe(24),
        "slack": values.get("slack_client_secret") or secrets.token_urlsafe(24),
    }
    presets = preset_providers(demo.providers_url, MOCKHUB_CLIENT_ID, client_secrets)
    settings = settings.replace(providers={**settings.providers, **presets})
    hub = mocks.mockhub_client
    mocks = replace(
        mocks,
        mockhub_client=replace(hub, redirect_uris=(*hub.redirect_uris, settings.callback_url("github"))),
        mockgoogle_client=ClientSpec(
            GOOGLE_CLIENT_ID, client_secrets["google"], (settings.callback_url("google"),)
        ),
        mockslack_client=ClientSpec(
            SLACK_CLIENT_ID, client_secrets["slack"], (settings.callback_url("slack"),)
        ),
    )
    return Demo(settings, mocks)


def write_serve_env(demo: Demo) -> Path:
    """Write the `serve` configuration for replicas using these mock providers: an env file and
    a providers TOML under the data dir, mode 0600 (they hold secrets; nothing is printed). Each
    provider's table is complete (every field that is not a default, `api_base_url` included),
    so a replica's tools reach the same APIs as the demo's; its secret is in the env file."""
    s = demo.settings
    toml_path = s.data_dir / "providers.toml"
    _write_private(toml_path, "\n".join(provider_table(p) for p in s.providers.values()))
    secrets_env = {client_secret_env(name): p.client_secret for name, p in s.providers.items()}
    env = {
        "MCPUC_PUBLIC_URL": s.public_url,
        "MCPUC_AUTH_ISSUER": s.auth_issuer,
        "MCPUC_LOGIN_CLIENT_ID": s.login_client_id,
        "MCPUC_LOGIN_CLIENT_SECRET": s.login_client_secret,
        "MCPUC_SESSION_SECRET": s.session_secret,
        "MCPUC_ENCRYPTION_KEYS": s.encryption_keys,
        "MCPUC_REQUEST_STATE_KEYS": s.request_state_keys,
        **secrets_env,
        "MCPUC_CONFIG_FILE": str(toml_path),
    }
    env_path = s.data_dir / "serve.env"
    _write_private(env_path, "".join(f"{k}={v}\n" for k, v in env.items()))
    return env_path


def provider_table(provider: ProviderConfig) -> str:
    """`[providers.<name>]` with every field of `provider` that is not its default (the secret
    aside). Written by hand: the values are strings, numbers, booleans, lists and one flat table,
    and the dependencies have a TOML reader but no writer."""
    fields = provider.model_dump(exclude_defaults=True, exclude={"name", "client_secret"})
    lines = [f"[providers.{provider.name}]", *(f"{key} = {_toml(value)}" for key, value in fields.items())]
    if provider.insecure_http:
        lines.append("# insecure_http: development only, the mock providers speak plain http")
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def demo_metrics_url(settings: Settings) -> str:
    """Where the demo's `GET /metrics` answers: its own port (`metrics_port`), on the demo's host."""
    host = urlsplit(settings.public_url).hostname or settings.host
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.metrics_port}/metrics"


def _served_providers(demo: Demo) -> str:
    """One banner line per provider: its name and the mock serving it."""
    mocks = {"/mockhub": "MockHub", "/mockgoogle": "MockGoogle", "/mockslack": "MockSlack"}
    lines = []
    for name, provider in demo.settings.providers.items():
        path = provider.api_base_url.removeprefix(demo.providers_url)
        mock = mocks.get(path, "a mock")
        label = f"Provider {name!r}"
        lines.append(f"  {label:<31}{provider.api_base_url}   ({mock} and its API stand-in)")
    return "\n".join(lines)


def banner(demo: Demo) -> str:
    s = demo.settings
    client = (
        f".venv/bin/python examples/client.py --user alice --server {s.resource_url} --data-dir {s.data_dir}"
    )
    return f"""
mcp-url-connect demo (development only: dev authorization server, mock providers, local store)

  MCP server (streamable HTTP)   {s.resource_url}
  Protected-resource metadata    {s.public_url}/.well-known/oauth-protected-resource/mcp
  Dev authorization server       {s.auth_issuer}   (login page asks only for a username)
{_served_providers(demo)}
  Your connections page          {s.public_url}/connections
  Metrics (Prometheus)           {demo_metrics_url(s)}   (its own port, as in production)
  Data (store, keys)             {s.data_dir}

Next:
  1. Get a bearer token for user "alice":
       .venv/bin/mcp-url-connect dev-token alice --data-dir {s.data_dir}
  2. Run the example client (legacy 2025-11-25 and stateless 2026-07-28 modes):
       {client} --mode legacy
       {client} --mode 2026-07-28
     It prints a connect URL: open it, sign in as alice, approve at MockHub.
  3. Any MCP client: point it at {s.resource_url} with
       Authorization: Bearer <the dev token>
     or let it discover the dev authorization server (RFC 9728 -> RFC 8414, dynamic registration).
Commands are relative to the repository root. Ctrl-C stops the servers.
"""
