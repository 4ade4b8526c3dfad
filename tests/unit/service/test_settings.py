"""Settings: environment > TOML file > defaults, and require_safe_to_serve() refusing
unsafe configurations."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from service import settings as settings_module
from service.providers.catalogue import ProviderConfig
from service.settings import Settings, SettingsError, load_settings

SESSION_SECRET = "session-secret-" + "s" * 32
LOGIN_SECRET = "login-client-secret-value"
HUB_SECRET = "hub-client-secret-value"
ENCRYPTION_KEY = base64.urlsafe_b64encode(b"E" * 32).decode().rstrip("=")
REQUEST_STATE_KEY = base64.urlsafe_b64encode(b"R" * 32).decode().rstrip("=")

PROVIDER_TOML = """
[providers.mockhub]
display_name = "MockHub"
authorize_url = "https://hub.example/authorize"
token_url = "https://hub.example/token"
userinfo_url = "https://hub.example/user"
client_id = "mcp-url-connect"
scopes = ["repo", "read:user"]
issuer = "https://hub.example"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def valid_settings(**changes: Any) -> Settings:
    base = Settings(
        public_url="https://mcp.example.com",
        auth_issuer="https://as.example.com",
        login_client_id="mcp-login",
        login_client_secret=LOGIN_SECRET,
        session_secret=SESSION_SECRET,
        encryption_keys=f"k1:{ENCRYPTION_KEY}",
        request_state_keys=REQUEST_STATE_KEY,
    )
    return base.replace(**changes)


# ---- load_settings -------------------------------------------------------------------------


def test_defaults_without_environment_or_file() -> None:
    settings = load_settings({}, None)
    assert settings == Settings()
    assert settings.providers == {}


def test_file_values_are_read_and_coerced(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        'public_url = "https://file.example"\nport = 9001\nauth_algorithms = ["ES256"]\n'
        'retry_wait_seconds = 2.5\ndata_dir = "/var/lib/mcpuc"\n',
    )
    settings = load_settings({}, config)
    assert settings.public_url == "https://file.example"
    assert settings.port == 9001
    assert settings.auth_algorithms == ("ES256",)
    assert settings.retry_wait_seconds == 2.5
    assert settings.data_dir == Path("/var/lib/mcpuc")


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    config = write(
        tmp_path, 'public_url = "https://file.example"\nport = 9001\nauth_issuer = "https://as.file"\n'
    )
    environ = {
        "MCPUC_PUBLIC_URL": "https://env.example",
        "MCPUC_PORT": "9002",
        "MCPUC_AUTH_ALGORITHMS": "RS256, ES256",
    }
    settings = load_settings(environ, config)
    assert settings.public_url == "https://env.example"
    assert settings.port == 9002
    assert settings.auth_algorithms == ("RS256", "ES256")
    assert settings.auth_issuer == "https://as.file"  # not overridden: the file value stays


def test_config_file_named_by_the_environment(tmp_path: Path) -> None:
    config = write(tmp_path, 'auth_issuer = "https://as.file"\n')
    settings = load_settings({"MCPUC_CONFIG_FILE": str(config)}, None)
    assert settings.auth_issuer == "https://as.file"


def test_unreadable_or_invalid_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="config file"):
        load_settings({}, tmp_path / "missing.toml")
    with pytest.raises(SettingsError, match="config file"):
        load_settings({}, write(tmp_path, "this is = = not toml"))


def test_bad_number_names_the_setting() -> None:
    with pytest.raises(SettingsError, match="MCPUC_PORT"):
        load_settings({"MCPUC_PORT": "eighty"}, None)


def test_unknown_file_key_is_rejected_by_name(tmp_path: Path) -> None:
    config = write(tmp_path, 'public_url = "https://mcp.example.com"\nsesion_secret = "typo"\n')
    with pytest.raises(SettingsError, match="sesion_secret"):
        load_settings({}, config)


def test_providers_table_with_client_secret_from_the_environment(tmp_path: Path) -> None:
    settings = load_settings(
        {"MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": HUB_SECRET}, write(tmp_path, PROVIDER_TOML)
    )
    hub = settings.providers["mockhub"]
    assert hub == ProviderConfig(
        name="mockhub",
        display_name="MockHub",
        authorize_url="https://hub.example/authorize",
        token_url="https://hub.example/token",
        userinfo_url="https://hub.example/user",
        client_id="mcp-url-connect",
        client_secret=HUB_SECRET,
        scopes=("repo", "read:user"),
        issuer="https://hub.example",
    )


def test_provider_secret_in_environment_overrides_the_file(tmp_path: Path) -> None:
    config = write(tmp_path, PROVIDER_TOML + 'client_secret = "from-file"\n')
    assert load_settings({}, config).providers["mockhub"].client_secret == "from-file"
    environ = {"MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": HUB_SECRET}
    assert load_settings(environ, config).providers["mockhub"].client_secret == HUB_SECRET


def test_provider_secret_of_another_provider_is_not_used(tmp_path: Path) -> None:
    # Only MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET counts for mockhub: without it the entry is refused.
    environ = {"MCPUC_PROVIDER_OTHERHUB_CLIENT_SECRET": HUB_SECRET}
    with pytest.raises(SettingsError, match=r"providers\.mockhub\.client_secret"):
        load_settings(environ, write(tmp_path, PROVIDER_TOML))


SECRET_ENV = {  # every secret setting, and a provider's client secret
    "MCPUC_LOGIN_CLIENT_SECRET": LOGIN_SECRET,
    "MCPUC_SESSION_SECRET": SESSION_SECRET,
    "MCPUC_ENCRYPTION_KEYS": f"k1:{ENCRYPTION_KEY}",
    "MCPUC_REQUEST_STATE_KEYS": REQUEST_STATE_KEY,
    "MCPUC_STORE_URL": "rediss://:pa55word@redis.example:6380/0",
    "MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": HUB_SECRET,
    "MCPUC_WEBHOOK_SECRET": "whsec_" + base64.b64encode(b"w" * 32).decode(),
}


def test_every_secret_setting_is_read_from_its_file(tmp_path: Path) -> None:
    """A Secret mounted as files (`MCPUC_<NAME>_FILE`) gives the same settings as the environment
    form: one trailing newline is stripped, anything else is kept."""
    config = write(tmp_path, PROVIDER_TOML)
    from_env = load_settings(SECRET_ENV, config)
    files: dict[str, str] = {}
    for name, value in SECRET_ENV.items():
        path = tmp_path / name.lower()
        path.write_text(value + "\n")
        files[name + "_FILE"] = str(path)
    from_files = load_settings(files, config)
    assert from_files == from_env
    assert from_files.providers["mockhub"].client_secret == HUB_SECRET
    assert from_files.store_url == SECRET_ENV["MCPUC_STORE_URL"]
    # One newline only: a value that really ends in whitespace is kept as written.
    (tmp_path / "two").write_text("x" * 40 + "\n\n")
    two = load_settings({"MCPUC_SESSION_SECRET_FILE": str(tmp_path / "two")})
    assert two.session_secret == "x" * 40 + "\n"


def test_the_secret_settings_are_the_repr_hidden_ones() -> None:
    from service.settings import secret_env_names

    names = secret_env_names({"MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET_FILE": "/x", "MCPUC_PORT_FILE": "/y"})
    assert names == set(SECRET_ENV)


def test_a_secret_set_twice_or_an_unreadable_file_names_the_variable_not_the_value(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(SESSION_SECRET)
    with pytest.raises(SettingsError, match="MCPUC_SESSION_SECRET and MCPUC_SESSION_SECRET_FILE") as both:
        load_settings({"MCPUC_SESSION_SECRET": SESSION_SECRET, "MCPUC_SESSION_SECRET_FILE": str(path)})
    with pytest.raises(SettingsError, match="MCPUC_LOGIN_CLIENT_SECRET_FILE: cannot read") as missing:
        load_settings({"MCPUC_LOGIN_CLIENT_SECRET_FILE": str(tmp_path / "absent")})
    (tmp_path / "binary").write_bytes(b"\xff" + SESSION_SECRET.encode())
    with pytest.raises(SettingsError, match="MCPUC_SESSION_SECRET_FILE: cannot read") as undecodable:
        load_settings({"MCPUC_SESSION_SECRET_FILE": str(tmp_path / "binary")})
    for error in (both, missing, undecodable):
        assert SESSION_SECRET not in str(error.value)


def test_provider_display_name_defaults_to_its_name(tmp_path: Path) -> None:
    config = write(tmp_path, PROVIDER_TOML.replace('display_name = "MockHub"\n', ""))
    environ = {"MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": HUB_SECRET}
    assert load_settings(environ, config).providers["mockhub"].display_name == "mockhub"


def test_unknown_provider_field_is_rejected_by_name(tmp_path: Path) -> None:
    config = write(tmp_path, PROVIDER_TOML + 'redirect_uri = "https://evil.example/cb"\n')
    with pytest.raises(SettingsError, match="redirect_uri") as caught:
        load_settings({}, config)
    assert "mockhub" in str(caught.value)


def test_missing_provider_field_is_a_settings_error(tmp_path: Path) -> None:
    config = write(tmp_path, PROVIDER_TOML.replace('token_url = "https://hub.example/token"\n', ""))
    environ = {"MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": HUB_SECRET}
    with pytest.raises(SettingsError, match=r"providers\.mockhub\.token_url"):
        load_settings(environ, config)


def test_provider_must_be_a_table(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"providers\.mockhub"):
        load_settings({}, write(tmp_path, '[providers]\nmockhub = "https://hub.example"\n'))


# ---- require_safe_to_serve() ---------------------------------------------------------------


def test_valid_settings_pass_and_chain() -> None:
    settings = valid_settings()
    assert settings.require_safe_to_serve() is settings
    assert valid_settings(public_url="https://mcp.example.com/").require_safe_to_serve()
    assert valid_settings(public_url="http://127.0.0.1:8000").require_safe_to_serve()
    assert valid_settings(session_secret="x" * 32).require_safe_to_serve()


def test_validate_is_the_deprecated_name_of_require_safe_to_serve() -> None:
    settings = valid_settings()
    with pytest.warns(DeprecationWarning, match="require_safe_to_serve"):
        assert settings.validate() is settings
    with pytest.warns(DeprecationWarning), pytest.raises(SettingsError, match="MCPUC_SESSION_SECRET"):
        valid_settings(session_secret="short").validate()


INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "public_url with a path": ({"public_url": "https://mcp.example.com/app"}, "MCPUC_PUBLIC_URL"),
    "public_url with /mcp": ({"public_url": "https://mcp.example.com/mcp"}, "MCPUC_PUBLIC_URL"),
    "public_url not http": ({"public_url": "ftp://mcp.example.com"}, "MCPUC_PUBLIC_URL"),
    "public_url without host": ({"public_url": "https://"}, "MCPUC_PUBLIC_URL"),
    "public_url relative": ({"public_url": "mcp.example.com"}, "MCPUC_PUBLIC_URL"),
    "missing issuer": ({"auth_issuer": ""}, "MCPUC_AUTH_ISSUER"),
    "missing login client": ({"login_client_id": ""}, "MCPUC_LOGIN_CLIENT_ID"),
    "missing session secret": ({"session_secret": ""}, "MCPUC_SESSION_SECRET"),
    "short session secret": ({"session_secret": "x" * 31}, "MCPUC_SESSION_SECRET"),
    "missing encryption keys": ({"encryption_keys": ""}, "MCPUC_ENCRYPTION_KEYS"),
    "missing request-state keys": ({"request_state_keys": ""}, "MCPUC_REQUEST_STATE_KEYS"),
    "request-state key not base64": ({"request_state_keys": "a"}, "MCPUC_REQUEST_STATE_KEYS"),
    "request-state key too short": (
        {"request_state_keys": base64.urlsafe_b64encode(b"R" * 31).decode()},
        "MCPUC_REQUEST_STATE_KEYS",
    ),
    "second request-state key bad": (
        {"request_state_keys": f"{REQUEST_STATE_KEY},a"},
        "MCPUC_REQUEST_STATE_KEYS",
    ),
    "HS256 allowed": ({"auth_algorithms": ("RS256", "HS256")}, "HS256"),
    "HS512 allowed": ({"auth_algorithms": ("HS512",)}, "HS512"),
    "none allowed": ({"auth_algorithms": ("RS256", "none")}, "none"),
    "None allowed": ({"auth_algorithms": ("None",)}, "None"),
    "no pending elicitations": ({"max_pending_per_user": 0}, "MCPUC_MAX_PENDING_PER_USER"),
    "elicitations that never live": ({"elicitation_ttl": 0}, "MCPUC_ELICITATION_TTL"),
    "no head timeout": ({"request_head_timeout_seconds": 0}, "MCPUC_REQUEST_HEAD_TIMEOUT_SECONDS"),
    "no connection may await a head": (
        {"max_connections_awaiting_head": 0},
        "MCPUC_MAX_CONNECTIONS_AWAITING_HEAD",
    ),
}


@pytest.mark.parametrize(("changes", "named"), list(INVALID.values()), ids=list(INVALID))
def test_validate_rejects(changes: dict[str, Any], named: str) -> None:
    with pytest.raises(SettingsError) as caught:
        valid_settings(**changes).require_safe_to_serve()
    assert named in str(caught.value)


def test_validation_errors_do_not_echo_key_material() -> None:
    bad_key = base64.urlsafe_b64encode(b"SECRETKEYMATERIAL" * 2).decode()  # 34 bytes
    with pytest.raises(SettingsError) as caught:
        valid_settings(request_state_keys=bad_key).require_safe_to_serve()
    assert bad_key not in str(caught.value)
    assert bad_key.rstrip("=") not in str(caught.value)


def test_request_state_keys_decode_with_or_without_padding() -> None:
    padded = base64.urlsafe_b64encode(b"P" * 32).decode()
    assert padded.endswith("=")
    settings = valid_settings(request_state_keys=f"{REQUEST_STATE_KEY}, {padded}")
    assert settings.request_state_key_list() == [b"R" * 32, b"P" * 32]


def test_settings_loaded_from_the_environment_validate(tmp_path: Path) -> None:
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "mcp-login",
        "MCPUC_SESSION_SECRET": SESSION_SECRET,
        "MCPUC_ENCRYPTION_KEYS": f"k1:{ENCRYPTION_KEY}",
        "MCPUC_REQUEST_STATE_KEYS": REQUEST_STATE_KEY,
        "MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": HUB_SECRET,
    }
    settings = load_settings(environ, write(tmp_path, PROVIDER_TOML)).require_safe_to_serve()
    assert settings.audience == "https://mcp.example.com/mcp"
    assert settings.callback_url("github") == "https://mcp.example.com/callback/github"
    assert settings.secure_cookies


# ---- no secrets in repr ----------------------------------------------------------------------


def test_repr_never_contains_secrets(tmp_path: Path) -> None:
    environ = {
        "MCPUC_LOGIN_CLIENT_SECRET": LOGIN_SECRET,
        "MCPUC_SESSION_SECRET": SESSION_SECRET,
        "MCPUC_ENCRYPTION_KEYS": f"k1:{ENCRYPTION_KEY}",
        "MCPUC_REQUEST_STATE_KEYS": REQUEST_STATE_KEY,
        "MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": HUB_SECRET,
    }
    settings = load_settings(environ, write(tmp_path, PROVIDER_TOML))
    # The secrets did load: otherwise the repr check below would prove nothing.
    assert settings.session_secret == SESSION_SECRET
    assert settings.providers["mockhub"].client_secret == HUB_SECRET
    for text in (
        repr(settings),
        str(settings),
        repr(settings.providers),
        repr(settings.providers["mockhub"]),
    ):
        for secret in (LOGIN_SECRET, SESSION_SECRET, ENCRYPTION_KEY, REQUEST_STATE_KEY, HUB_SECRET):
            assert secret not in text
    assert "mockhub" in repr(settings)  # the repr is still useful


# ---- regressions: bugs found in review, fixed ---------------------------------------------


def test_validate_rejects_lowercase_hmac_algorithm() -> None:
    with pytest.raises(SettingsError, match="hs256"):
        valid_settings(auth_algorithms=("RS256", "hs256")).require_safe_to_serve()


def test_plain_http_is_refused_outside_loopback() -> None:
    """Review M3: without https the session cookie has no Secure / __Host- protection."""
    with pytest.raises(SettingsError, match="https"):
        valid_settings(public_url="http://mcp.example.com").require_safe_to_serve()
    assert valid_settings(public_url="http://127.0.0.1:8000").require_safe_to_serve()
    assert valid_settings(public_url="https://mcp.example.com").require_safe_to_serve()


@pytest.mark.parametrize(
    "url",
    [
        "redis://redis:6379/0",
        "redis://:secret-password@10.0.0.7:6379/0",
        "redis://user:secret-password@redis.example.internal/0",
        "redis://127.0.0.1.example.com:6379/0",
        "redis+sentinel://:secret-password@10.0.0.7:26379,127.0.0.1:26379/mymaster",
        "redis+cluster://:secret-password@10.0.0.7:7000,10.0.0.8:7000",
        "redis+cluster://:secret-password@127.0.0.1:7000,[2001:db8::8]:7000",
        # The host redis-py connects to, not the one written in the authority:
        "redis:///0?host=10.0.0.7&password=secret-password",
        "redis://:secret-password@/0?host=redis.example.internal",
        "redis://:secret-password@[2001:db8::7]:6379/0",
        "redis://:secret-password@[::ffff:10.0.0.7]:6379/0",
    ],
)
def test_plain_redis_is_refused_outside_loopback(url: str) -> None:
    with pytest.raises(SettingsError, match="MCPUC_ALLOW_PLAINTEXT_REDIS") as refused:
        valid_settings(store_url=url).require_safe_to_serve()
    assert "secret-password" not in str(refused.value)
    assert valid_settings(store_url=url, allow_plaintext_redis=True).require_safe_to_serve()


@pytest.mark.parametrize(
    "url",
    [
        "rediss://redis.example.internal:6380/0",
        "rediss://:pw@10.0.0.7:6380/0",
        "redis://127.0.0.1:6379/0",
        "redis://localhost/0",
        "redis://[::1]:6379/0",
        "redis:///0",
        "redis://127.0.0.2:6379/0",
        "redis://[::ffff:127.0.0.1]:6379/0",
        "redis:///0?host=127.0.0.1",
        "redis://127.0.0.1:6379/0?host=10.0.0.7",  # redis-py connects to the authority's host
        "redis+sentinel://127.0.0.1:26379,[::1]:26380/mymaster",
        "sqlite:///tmp/store.sqlite3",
    ],
)
def test_tls_or_loopback_redis_is_accepted(url: str) -> None:
    assert valid_settings(store_url=url).require_safe_to_serve()


def test_plain_http_issuer_is_refused_outside_loopback() -> None:
    with pytest.raises(SettingsError, match="MCPUC_AUTH_ISSUER must use https"):
        valid_settings(auth_issuer="http://as.example.com").require_safe_to_serve()
    assert valid_settings(auth_issuer="http://127.0.0.1:9000").require_safe_to_serve()
    # A loopback development server (the compose demo) may use a plain-http development issuer.
    assert valid_settings(
        public_url="http://localhost:8080", auth_issuer="http://mock-providers:8001"
    ).require_safe_to_serve()


def test_public_urls_are_built_from_the_public_origin() -> None:
    settings = valid_settings(public_url="https://mcp.example.com/")
    assert settings.connect_url("abc") == "https://mcp.example.com/connect?elicitationId=abc"
    assert settings.callback_url("github") == "https://mcp.example.com/callback/github"
    assert settings.login_callback_url == "https://mcp.example.com/login/callback"
    assert settings.resource_url == "https://mcp.example.com/mcp"


def test_settings_are_immutable_and_replace_checks_types() -> None:
    settings = valid_settings()
    with pytest.raises(ValueError):
        settings.port = 1  # type: ignore[misc]
    assert settings.replace(port="9003").port == 9003
    with pytest.raises(SettingsError, match="MCPUC_PORT"):
        settings.replace(port="eighty")


def test_the_app_factory_refuses_unvalidated_settings() -> None:
    from service.app import create_app

    with pytest.raises(SettingsError, match="MCPUC_PUBLIC_URL"):
        create_app(valid_settings(public_url="http://mcp.example.com"))


def test_the_server_reports_the_package_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    from service.app import create_app

    app = create_app(valid_settings(data_dir=tmp_path))
    assert app.state.mcp_server.version == version("mcp-url-connect") != ""


def test_an_event_loop_that_is_not_installed_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settings_module, "_installed", lambda module: False)
    valid_settings().require_safe_to_serve()  # `auto` falls back to asyncio's own loop
    with pytest.raises(SettingsError, match="MCPUC_EVENT_LOOP is uvloop, but uvloop is not installed"):
        valid_settings(event_loop="uvloop").require_safe_to_serve()


def test_an_unknown_event_loop_names_the_setting() -> None:
    with pytest.raises(
        SettingsError, match="MCPUC_EVENT_LOOP: Input should be 'auto', 'uvloop' or 'asyncio'"
    ):
        load_settings({"MCPUC_EVENT_LOOP": "trio"})
