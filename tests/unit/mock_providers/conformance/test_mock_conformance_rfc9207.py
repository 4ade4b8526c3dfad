"""RFC 9207 conformance of the mock providers, over HTTP: every authorization response, success or
error, carries ``iss`` equal to the issuer of the provider's metadata (§2, §2.4), and the metadata
says so (§3).

MockSlack has no issuer and sends no ``iss``, like Slack (docs/mock-providers.md).
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.mock_conformance import (
    DEV_AS,
    ISSUING_PROVIDERS,
    MOCKGOOGLE,
    MOCKHUB,
    MOCKSLACK,
    OAuthProvider,
    authorization_params,
    authorize,
    redirect_params,
    sign_in_at_dev_as,
)
from tests.support.mock_provider_setup import pkce_pair

METADATA_PATHS = {
    DEV_AS.name: "/.well-known/oauth-authorization-server",
    MOCKHUB.name: "/.well-known/oauth-authorization-server/mockhub",
    MOCKGOOGLE.name: "/mockgoogle/.well-known/openid-configuration",
}


async def metadata_issuer(http: httpx.AsyncClient, provider: OAuthProvider) -> str:
    response = await http.get(METADATA_PATHS[provider.name])
    assert response.status_code == 200
    metadata = response.json()
    # §3: the metadata announces the parameter, so a client may insist on it.
    assert metadata["authorization_response_iss_parameter_supported"] is True
    issuer: str = metadata["issuer"]
    assert issuer == provider.issuer
    return issuer


@pytest.mark.parametrize("provider", ISSUING_PROVIDERS, ids=str)
async def test_successful_response_carries_the_metadata_issuer(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    _, challenge = pkce_pair()
    callback = redirect_params(
        await authorize(http, provider, authorization_params(provider, challenge)), provider
    )
    assert "code" in callback
    assert callback["iss"] == await metadata_issuer(http, provider)


@pytest.mark.parametrize("provider", ISSUING_PROVIDERS, ids=str)
@pytest.mark.parametrize("flaw", ["no-code-challenge", "unsupported-response-type"])
async def test_error_response_carries_the_metadata_issuer(
    http: httpx.AsyncClient, provider: OAuthProvider, flaw: str
) -> None:
    """§2: "including error responses"."""
    _, challenge = pkce_pair()
    if flaw == "no-code-challenge":
        params = authorization_params(provider, None)
    else:
        params = authorization_params(provider, challenge, response_type="token")
    if not provider.consent_form:
        await sign_in_at_dev_as(http)
    callback = redirect_params(await http.get(provider.authorize_path, params=params), provider)
    assert "error" in callback and "code" not in callback
    assert callback["iss"] == await metadata_issuer(http, provider)


@pytest.mark.parametrize("provider", [MOCKHUB, MOCKGOOGLE], ids=str)
async def test_denied_consent_carries_the_metadata_issuer(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    _, challenge = pkce_pair()
    response = await authorize(http, provider, authorization_params(provider, challenge), decision="deny")
    callback = redirect_params(response, provider)
    assert callback["error"] == "access_denied"
    assert callback["iss"] == await metadata_issuer(http, provider)


async def test_dev_as_login_required_error_carries_the_issuer(http: httpx.AsyncClient) -> None:
    """``prompt=none`` without a signed-in user: OIDC ``login_required``, redirected, with ``iss``."""
    _, challenge = pkce_pair()
    params = authorization_params(DEV_AS, challenge, prompt="none")
    callback = redirect_params(await http.get(DEV_AS.authorize_path, params=params), DEV_AS)
    assert callback["error"] == "login_required"
    assert callback["iss"] == await metadata_issuer(http, DEV_AS)


async def test_issuers_are_distinct(http: httpx.AsyncClient) -> None:
    """The point of RFC 9207 (mix-up defence): one origin, three issuers a client can tell apart."""
    issuers = {await metadata_issuer(http, provider) for provider in ISSUING_PROVIDERS}
    assert len(issuers) == len(ISSUING_PROVIDERS)


async def test_slack_sends_no_iss(http: httpx.AsyncClient) -> None:
    """Deviation: Slack does not implement RFC 9207, nor does MockSlack (no issuer, no metadata)."""
    _, challenge = pkce_pair()
    success = redirect_params(
        await authorize(http, MOCKSLACK, authorization_params(MOCKSLACK, challenge)), MOCKSLACK
    )
    denied = redirect_params(
        await authorize(http, MOCKSLACK, authorization_params(MOCKSLACK, challenge), decision="deny"),
        MOCKSLACK,
    )
    assert "code" in success and denied["error"] == "access_denied"
    assert "iss" not in success and "iss" not in denied
