"""The provider catalogue: presets, validation that names the field, discovery."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from service.providers.catalogue import (
    PRESETS,
    ProviderConfig,
    ProviderError,
    build_provider,
    resolve_discovery,
)
from service.settings import Settings

SECRET = {"MCPUC_PROVIDER_HUB_CLIENT_SECRET": "s3cret"}


def hub(**spec: Any) -> Any:
    return build_provider("hub", {"client_id": "cid", **spec}, SECRET)


@pytest.mark.parametrize("preset", ["github", "github_app", "google", "slack"])
def test_presets_give_complete_https_providers(preset: str) -> None:
    provider = hub(preset=preset)
    assert provider.authorize_url.startswith("https://")
    assert provider.token_url.startswith("https://")
    assert provider.userinfo_url.startswith("https://")
    assert provider.client_secret == "s3cret"
    assert provider.account_field


def test_google_preset_asks_for_offline_access_and_consent_for_refresh() -> None:
    google = hub(preset="google")
    assert google.authorize_params["access_type"] == "offline"
    assert google.consent_prompt_for_refresh
    assert google.revocation_url == "https://oauth2.googleapis.com/revoke"


def test_slack_preset_reads_the_user_token_and_asks_user_scopes() -> None:
    slack = hub(preset="slack")
    assert slack.token_path == "authed_user"
    assert slack.scope_param == "user_scope"


def test_entra_substitutes_the_tenant_and_requires_one() -> None:
    entra = hub(preset="entra", tenant="contoso.onmicrosoft.com")
    assert (
        entra.authorize_url
        == "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/authorize"
    )
    with pytest.raises(ProviderError, match=r"providers\.hub\.tenant"):
        hub(preset="entra")


def test_configuration_overrides_the_preset() -> None:
    assert hub(preset="github", scopes=["repo"]).scopes == ("repo",)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"preset": "nope"}, "preset"),
        ({"preset": "github", "kind": "magic"}, "kind"),
        ({"preset": "github", "authorize_url": "http://evil.example/authorize"}, "authorize_url"),
        ({"preset": "github", "token_auth_method": "private_key_jwt"}, "token_auth_method"),
        ({"preset": "github", "scopes": "repo"}, "scopes"),
        ({"preset": "oauth2", "token_url": "https://x.example/token"}, "authorize_url"),
        ({"preset": "github", "redirect_uri": "https://evil.example"}, "redirect_uri"),
        ({"preset": "github", "authorize_params": {"a": 1}}, "authorize_params"),
    ],
)
def test_invalid_entries_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ProviderError, match=rf"providers\.hub\.{field}"):
        hub(**spec)


def test_a_confidential_client_needs_its_secret_from_the_environment() -> None:
    with pytest.raises(ProviderError, match="MCPUC_PROVIDER_HUB_CLIENT_SECRET"):
        build_provider("hub", {"preset": "github", "client_id": "cid"}, {})


def test_plain_http_only_on_loopback_unless_explicitly_allowed() -> None:
    loopback = hub(
        preset="oauth2",
        authorize_url="http://127.0.0.1:1/a",
        token_url="http://127.0.0.1:1/t",
        userinfo_url="http://127.0.0.1:1/u",
    )
    assert loopback.token_url.startswith("http://")
    remote = {"authorize_url": "http://hub/a", "token_url": "http://hub/t", "userinfo_url": "http://hub/u"}
    with pytest.raises(ProviderError):
        hub(preset="oauth2", **remote)
    assert hub(preset="oauth2", insecure_http=True, **remote).token_url == "http://hub/t"


def test_api_key_providers_need_no_client() -> None:
    keys = build_provider(
        "keys", {"kind": "api_key", "api_key_header": "X-API-Key", "api_key_format": "{key}"}, {}
    )
    assert keys.kind == "api_key"
    with pytest.raises(ProviderError, match=r"api_key_format"):
        build_provider("keys", {"kind": "api_key", "api_key_format": "Bearer"}, {})


def test_every_preset_is_known_to_the_docs_table() -> None:
    assert set(PRESETS) == {"github", "github_app", "google", "slack", "entra", "oidc", "oauth2"}


def _metadata_client(metadata: dict[str, Any], status: int = 200) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(status, json=metadata))
    )


METADATA = {
    "issuer": "https://idp.example",
    "authorization_endpoint": "https://idp.example/auth",
    "token_endpoint": "https://idp.example/token",
    "userinfo_endpoint": "https://idp.example/me",
    "revocation_endpoint": "https://idp.example/revoke",
    "code_challenge_methods_supported": ["S256"],
    "authorization_response_iss_parameter_supported": True,
}


async def test_discovery_fills_the_endpoints_and_the_rfc9207_issuer() -> None:
    provider = hub(preset="oidc", discovery_url="https://idp.example/.well-known/openid-configuration")
    async with _metadata_client(METADATA) as http:
        resolved = await resolve_discovery(provider, http)
    assert resolved.token_url == "https://idp.example/token"
    assert resolved.revocation_url == "https://idp.example/revoke"
    assert resolved.issuer == "https://idp.example"


async def test_discovery_refuses_a_provider_without_s256() -> None:
    provider = hub(preset="oidc", discovery_url="https://idp.example/.well-known/openid-configuration")
    async with _metadata_client({**METADATA, "code_challenge_methods_supported": ["plain"]}) as http:
        with pytest.raises(ProviderError, match="S256"):
            await resolve_discovery(provider, http)


async def test_discovery_failure_names_the_provider() -> None:
    provider = hub(preset="oidc", discovery_url="https://idp.example/.well-known/openid-configuration")
    async with _metadata_client({}, status=500) as http:
        with pytest.raises(ProviderError, match=r"providers\.hub\.discovery_url"):
            await resolve_discovery(provider, http)


@pytest.mark.parametrize(
    ("field", "value"), [("refresh_keepalive", -1), ("keepalive_rate", 0), ("keepalive_rate", 5000)]
)
def test_keepalive_settings_out_of_range_are_refused(field: str, value: float) -> None:
    spec = {"preset": "google", "client_id": "c", "client_secret": "s", field: value}
    with pytest.raises(ProviderError, match=f"providers.g.{field}"):
        build_provider("g", spec, environ={})


def test_the_model_keeps_the_rules_however_it_is_built() -> None:
    endpoints = {f"{key}_url": f"http://hub.example/{key}" for key in ("authorize", "token", "userinfo")}
    with pytest.raises(ValidationError, match="authorize_url"):
        ProviderConfig(name="hub", client_id="cid", client_secret="s", **endpoints)
    # Settings holds the models: a table given to it is validated as the file's would be.
    settings = Settings(providers={"hub": {"preset": "github", "client_id": "cid", "client_secret": "s"}})
    assert settings.providers["hub"] == hub(preset="github").model_copy(update={"client_secret": "s"})
    with pytest.raises(ValidationError, match="client_id"):
        Settings(providers={"hub": {"preset": "github"}})


def test_an_error_names_the_field_never_the_value() -> None:
    with pytest.raises(ProviderError) as caught:
        hub(preset="github", token_url="http://evil.example/secret-looking-value")
    assert str(caught.value) == "providers.hub.token_url: must be an https URL (plain http only on loopback)"


def test_a_validation_error_never_quotes_the_client_secret() -> None:
    """A provider built in code without its client id: the error names the field, never the input
    (pydantic would otherwise quote the whole table, client secret included)."""
    table = {"client_secret": "CANARY-SECRET"}
    with pytest.raises(ValidationError) as direct:
        ProviderConfig(name="hub", **table)
    with pytest.raises(ValidationError) as nested:
        Settings(providers={"hub": table})
    for error in (direct.value, nested.value):
        assert "client_id" in str(error) and "CANARY-SECRET" not in str(error)
