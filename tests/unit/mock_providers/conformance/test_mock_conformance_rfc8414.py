"""RFC 8414 (authorization server metadata) and OpenID Connect Discovery 1.0 conformance of the
mock providers, over HTTP: the documents are where §3 / OIDC Discovery §4 put them for each issuer
(MockHub's issuer has a path: ``/.well-known/oauth-authorization-server/mockhub``), name that issuer
exactly (§3.3), hold the required fields, and every endpoint they advertise answers as advertised.

MockGoogle publishes OIDC discovery only and MockSlack nothing, like Google and Slack.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import jwt
import pytest
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc9207 import AuthorizationServerMetadata as IssMetadata
from authlib.oidc.discovery import OpenIDProviderMetadata

from tests.support.mock_conformance import (
    DEV_AS,
    ISSUING_PROVIDERS,
    MOCKGOOGLE,
    MOCKHUB,
    OAuthProvider,
    assert_oauth_error,
    authorization_params,
    obtain_code,
    obtain_tokens,
)
from tests.support.mock_provider_setup import BASE, pkce_pair

#: Which metadata each provider publishes, as its real counterpart does.
OAUTH_METADATA = (DEV_AS, MOCKHUB)
OIDC_DISCOVERY = (DEV_AS, MOCKGOOGLE)


def rfc8414_url(issuer: str) -> str:
    """§3.1: the well-known suffix goes between the host and the issuer's path component."""
    parts = urlsplit(issuer)
    path = "/.well-known/oauth-authorization-server" + parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def oidc_discovery_url(issuer: str) -> str:
    """OIDC Discovery §4: the well-known suffix is appended to the issuer."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


async def metadata_of(http: httpx.AsyncClient, provider: OAuthProvider) -> dict[str, Any]:
    """The provider's document from the well-known URL its issuer implies."""
    assert provider.issuer is not None
    url = rfc8414_url(provider.issuer) if provider in OAUTH_METADATA else oidc_discovery_url(provider.issuer)
    response = await http.get(url)
    assert response.status_code == 200, url
    assert response.headers["content-type"].split(";")[0] == "application/json"
    document: dict[str, Any] = response.json()
    return document


def test_well_known_urls_follow_section_3() -> None:
    assert rfc8414_url(BASE + "/mockhub") == BASE + "/.well-known/oauth-authorization-server/mockhub"
    assert rfc8414_url(BASE) == BASE + "/.well-known/oauth-authorization-server"
    assert oidc_discovery_url(BASE + "/mockgoogle") == BASE + "/mockgoogle/.well-known/openid-configuration"


@pytest.mark.parametrize("provider", OAUTH_METADATA, ids=str)
async def test_rfc8414_metadata_is_valid_and_names_its_issuer(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    document = await metadata_of(http, provider)
    assert document["issuer"] == provider.issuer  # §3.3: MUST be identical
    # §2 REQUIRED: issuer, authorization_endpoint, token_endpoint (code grant), response_types_supported.
    AuthorizationServerMetadata(document).validate(metadata_classes=[IssMetadata])
    assert document["response_types_supported"] == ["code"]
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert set(document["grant_types_supported"]) == {"authorization_code", "refresh_token"}


@pytest.mark.parametrize("provider", OIDC_DISCOVERY, ids=str)
async def test_oidc_discovery_is_valid_and_names_its_issuer(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    document = await metadata_of(http, provider)
    if provider is DEV_AS:
        oidc = (await http.get(oidc_discovery_url(BASE))).json()
        assert oidc == document  # one AS, one document under both names
    assert document["issuer"] == provider.issuer
    # OIDC Discovery §3 REQUIRED: + jwks_uri, subject_types_supported, id_token_signing_alg_values_supported.
    OpenIDProviderMetadata(document).validate()
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert document["id_token_signing_alg_values_supported"] == ["RS256"]


async def test_only_the_documents_the_real_providers_publish(http: httpx.AsyncClient) -> None:
    """Deviation by design: MockGoogle has no RFC 8414 document (Google publishes OIDC discovery
    only), MockHub no OIDC discovery (GitHub's user authorization is plain OAuth), MockSlack none."""
    for url in (
        rfc8414_url(BASE + "/mockgoogle"),
        oidc_discovery_url(BASE + "/mockhub"),
        rfc8414_url(BASE + "/mockslack"),
        oidc_discovery_url(BASE + "/mockslack"),
    ):
        assert (await http.get(url)).status_code == 404, url


# -- the advertised endpoints work ------------------------------------------------------------------


@pytest.mark.parametrize("provider", ISSUING_PROVIDERS, ids=str)
async def test_advertised_endpoints_are_the_ones_served(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    document = await metadata_of(http, provider)
    assert document["authorization_endpoint"] == BASE + provider.authorize_path
    assert document["token_endpoint"] == BASE + provider.token_path

    _, challenge = pkce_pair()
    page = await http.get(
        document["authorization_endpoint"], params=authorization_params(provider, challenge)
    )
    assert page.status_code == 200  # the consent page, or the dev AS's sign-in page
    assert "<form" in page.text

    token = await http.post(document["token_endpoint"], data={"grant_type": "unknown"})
    assert_oauth_error(token, "unsupported_grant_type")


@pytest.mark.parametrize("provider", ISSUING_PROVIDERS, ids=str)
async def test_every_advertised_client_auth_method_works(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    """``token_endpoint_auth_methods_supported`` is honest for the provider's (confidential) client."""
    document = await metadata_of(http, provider)
    methods = set(document["token_endpoint_auth_methods_supported"])
    assert {"client_secret_basic", "client_secret_post"} <= methods
    for method in ("client_secret_basic", "client_secret_post"):
        code, verifier = await obtain_code(http, provider)
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": provider.redirect_uri,
            "code_verifier": verifier,
        }
        if method == "client_secret_basic":
            response = await http.post(
                document["token_endpoint"], data=form, auth=(provider.client_id, provider.client_secret)
            )
        else:
            response = await http.post(
                document["token_endpoint"],
                data={**form, "client_id": provider.client_id, "client_secret": provider.client_secret},
            )
        assert response.status_code == 200, (method, response.status_code)


async def test_dev_as_none_method_works_for_a_registered_public_client(http: httpx.AsyncClient) -> None:
    document = await metadata_of(http, DEV_AS)
    assert "none" in document["token_endpoint_auth_methods_supported"]
    registered = await http.post(
        document["registration_endpoint"],
        json={"redirect_uris": ["http://127.0.0.1:33418/callback"], "token_endpoint_auth_method": "none"},
    )
    assert registered.status_code == 201
    client = registered.json()
    assert client["token_endpoint_auth_method"] == "none" and "client_secret" not in client
    public = OAuthProvider(
        name="devas-public",
        issuer=BASE,
        authorize_path=DEV_AS.authorize_path,
        token_path=DEV_AS.token_path,
        client_id=client["client_id"],
        client_secret="",
        redirect_uri="http://127.0.0.1:33418/callback",
        consent_form=False,
    )
    code, verifier = await obtain_code(http, public)
    response = await http.post(
        document["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": public.redirect_uri,
            "code_verifier": verifier,
            "client_id": public.client_id,
        },
    )
    assert response.status_code == 200, response.status_code


@pytest.mark.parametrize("provider", OIDC_DISCOVERY, ids=str)
async def test_advertised_jwks_and_userinfo_verify_the_id_token(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    document = await metadata_of(http, provider)
    tokens = await obtain_tokens(http, provider)
    jwks = (await http.get(document["jwks_uri"])).json()
    header = jwt.get_unverified_header(tokens["id_token"])
    assert header["alg"] in document["id_token_signing_alg_values_supported"]
    key = jwt.PyJWKSet.from_dict(jwks)[header["kid"]]
    claims = jwt.decode(
        tokens["id_token"],
        key=key,
        algorithms=["RS256"],
        audience=provider.client_id,
        issuer=document["issuer"],
    )
    userinfo = await http.get(
        document["userinfo_endpoint"], headers={"Authorization": f"Bearer {tokens['access_token']}"}
    )
    assert userinfo.status_code == 200
    assert userinfo.json()["sub"] == claims["sub"]
    anonymous = await http.get(document["userinfo_endpoint"])
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")


async def test_mockhub_advertised_revocation_endpoint_works(http: httpx.AsyncClient) -> None:
    document = await metadata_of(http, MOCKHUB)
    assert (
        document["revocation_endpoint_auth_methods_supported"]
        == document["token_endpoint_auth_methods_supported"]
    )
    tokens = await obtain_tokens(http, MOCKHUB)
    response = await http.post(
        document["revocation_endpoint"],
        data={"token": tokens["access_token"]},
        auth=(MOCKHUB.client_id, MOCKHUB.client_secret),
    )
    assert response.status_code == 200
    user = await http.get("/mockhub/user", headers={"Authorization": f"Bearer {tokens['access_token']}"})
    assert user.status_code == 401


async def test_mockgoogle_advertised_revocation_endpoint_works(http: httpx.AsyncClient) -> None:
    document = await metadata_of(http, MOCKGOOGLE)
    tokens = await obtain_tokens(http, MOCKGOOGLE)
    response = await http.post(document["revocation_endpoint"], data={"token": tokens["access_token"]})
    assert response.status_code == 200
    userinfo = await http.get(
        document["userinfo_endpoint"], headers={"Authorization": f"Bearer {tokens['access_token']}"}
    )
    assert userinfo.status_code == 401
