"""RFC 6749 conformance of the mock providers, over HTTP: token endpoint responses (§5.1, §5.2),
authorization error responses (§4.1.2.1) and single-use codes (§4.1.2, §10.5).

MockSlack answers Slack's way (HTTP 200, ``{"ok": false, "error": ...}``, Slack's own error names);
its tests assert that documented deviation (docs/mock-providers.md, "Conformance").
"""

from __future__ import annotations

from urllib.parse import urlencode

import httpx
import pytest

from tests.support.mock_conformance import (
    ALL_PROVIDERS,
    DEV_AS,
    MOCKSLACK,
    RFC6749_PROVIDERS,
    OAuthProvider,
    api_status,
    assert_not_cached,
    assert_oauth_error,
    authorization_params,
    authorize,
    exchange_code,
    obtain_code,
    obtain_tokens,
    redirect_params,
    refresh,
    sign_in_at_dev_as,
    token_request,
)
from tests.support.mock_provider_setup import pkce_pair

FOREIGN_CALLBACK = "https://attacker.example/callback"


# -- §5.1 successful token response ---------------------------------------------------------


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_token_response_is_json_bearer_and_not_cached(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    code, verifier = await obtain_code(http, provider)
    response = await exchange_code(http, provider, code, verifier)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].split(";")[0] == "application/json"
    assert_not_cached(response)
    body = response.json()
    assert body["token_type"].lower() == "bearer"
    assert isinstance(body["access_token"], str) and body["access_token"]
    assert isinstance(body["expires_in"], int) and body["expires_in"] > 0
    assert isinstance(body["refresh_token"], str) and body["refresh_token"]


async def test_slack_token_response_is_slack_shaped_and_not_cached(http: httpx.AsyncClient) -> None:
    """Deviation: Slack's oauth.v2.access answers ``ok`` and typed tokens, no ``expires_in``."""
    code, verifier = await obtain_code(http, MOCKSLACK)
    response = await exchange_code(http, MOCKSLACK, code, verifier)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["ok"] is True
    assert body["token_type"] == "bot" and body["access_token"].startswith("xoxb-")
    assert body["authed_user"]["token_type"] == "user"
    assert "expires_in" not in body and "refresh_token" not in body


# -- §5.2 error responses ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_missing_code_is_invalid_request(http: httpx.AsyncClient, provider: OAuthProvider) -> None:
    response = await token_request(
        http, provider, {"grant_type": "authorization_code", "redirect_uri": provider.redirect_uri}
    )
    assert_oauth_error(response, "invalid_request")


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_repeated_parameter_is_invalid_request(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    """§3.2: request parameters MUST NOT be included more than once."""
    code, verifier = await obtain_code(http, provider)
    other_code, _ = await obtain_code(http, provider)
    form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("code", other_code),
        ("redirect_uri", provider.redirect_uri),
        ("code_verifier", verifier),
    ]
    response = await http.post(
        provider.token_path,
        content=urlencode(form),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        auth=(provider.client_id, provider.client_secret),
    )
    assert_oauth_error(response, "invalid_request")


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
@pytest.mark.parametrize(
    "credentials",
    [("right-id", "wrong-secret"), ("unknown-client", "some-secret")],
    ids=["wrong-secret", "unknown-client"],
)
async def test_basic_auth_failure_is_401_with_www_authenticate(
    http: httpx.AsyncClient, provider: OAuthProvider, credentials: tuple[str, str]
) -> None:
    """§5.2 invalid_client: a client that tried HTTP Basic MUST get 401 and a Basic challenge."""
    client_id = provider.client_id if credentials[0] == "right-id" else credentials[0]
    code, verifier = await obtain_code(http, provider)
    response = await http.post(
        provider.token_path,
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": provider.redirect_uri,
            "code_verifier": verifier,
        },
        auth=(client_id, credentials[1]),
    )
    assert_oauth_error(response, "invalid_client", 401)
    assert response.headers["www-authenticate"].startswith("Basic ")
    # The code was not spent on an unauthenticated request.
    assert (await exchange_code(http, provider, code, verifier)).status_code == 200


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_post_auth_failure_and_no_auth_are_invalid_client(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    code, verifier = await obtain_code(http, provider)
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": provider.redirect_uri,
        "code_verifier": verifier,
    }
    wrong = await http.post(
        provider.token_path, data={**form, "client_id": provider.client_id, "client_secret": "wrong"}
    )
    assert wrong.status_code in (400, 401)
    assert_oauth_error(wrong, "invalid_client", wrong.status_code)
    # A confidential client MUST authenticate (§3.2.1): its client_id alone is not enough.
    anonymous = await http.post(provider.token_path, data={**form, "client_id": provider.client_id})
    assert anonymous.status_code in (400, 401)
    assert_oauth_error(anonymous, "invalid_client", anonymous.status_code)


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
@pytest.mark.parametrize("flaw", ["unknown-code", "other-redirect-uri", "no-redirect-uri"])
async def test_bad_code_or_redirect_uri_is_invalid_grant(
    http: httpx.AsyncClient, provider: OAuthProvider, flaw: str
) -> None:
    """§4.1.3/§5.2: the code must be valid and redirect_uri must repeat the authorization's."""
    code, verifier = await obtain_code(http, provider)
    form = {
        "grant_type": "authorization_code",
        "code": "not-a-code" if flaw == "unknown-code" else code,
        "code_verifier": verifier,
    }
    if flaw != "no-redirect-uri":
        form["redirect_uri"] = provider.redirect_uri + ("/other" if flaw == "other-redirect-uri" else "")
    assert_oauth_error(await token_request(http, provider, form), "invalid_grant")


async def test_grant_type_the_client_may_not_use_is_unauthorized_client(http: httpx.AsyncClient) -> None:
    """§5.2 unauthorized_client: a dev-AS client registered for the code grant only."""
    registered = await http.post(
        "/register",
        json={
            "redirect_uris": ["http://127.0.0.1:33418/callback"],
            "token_endpoint_auth_method": "client_secret_basic",
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
        },
    )
    assert registered.status_code == 201, registered.text
    client = registered.json()
    response = await http.post(
        DEV_AS.token_path,
        data={"grant_type": "refresh_token", "refresh_token": "anything"},
        auth=(client["client_id"], client["client_secret"]),
    )
    assert_oauth_error(response, "unauthorized_client")


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
@pytest.mark.parametrize("grant_type", ["password", "client_credentials", "implicit"])
async def test_unsupported_grant_type(
    http: httpx.AsyncClient, provider: OAuthProvider, grant_type: str
) -> None:
    form = {"grant_type": grant_type, "username": "alice", "password": "pw"}
    body = assert_oauth_error(await token_request(http, provider, form), "unsupported_grant_type")
    assert "pw" not in str(body)


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_refresh_beyond_the_granted_scope_is_invalid_scope(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    """§6: the refreshed scope MUST NOT include any scope not originally granted."""
    tokens = await obtain_tokens(http, provider)
    wider = provider.grant_params["scope"] + " admin:everything"
    assert_oauth_error(await refresh(http, provider, tokens["refresh_token"], scope=wider), "invalid_scope")
    # A narrower scope is fine.
    narrower = provider.grant_params["scope"].split()[0]
    response = await refresh(http, provider, tokens["refresh_token"], scope=narrower)
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == narrower


@pytest.mark.parametrize(
    ("form", "slack_error"),
    [
        ({"grant_type": "authorization_code", "code": "not-a-code"}, "invalid_code"),
        ({"grant_type": "password"}, "invalid_grant_type"),
        ({"grant_type": "refresh_token", "refresh_token": "x"}, "invalid_grant_type"),
        ({"grant_type": "authorization_code"}, "invalid_arguments"),
    ],
)
async def test_slack_errors_are_ok_false(
    http: httpx.AsyncClient, form: dict[str, str], slack_error: str
) -> None:
    """Deviation: Slack answers HTTP 200 ``{"ok": false, "error": <Slack's name>}``."""
    form = {**form, "redirect_uri": MOCKSLACK.redirect_uri}
    response = await token_request(http, MOCKSLACK, form)
    assert response.status_code == 200
    assert response.json() == {"ok": False, "error": slack_error}
    assert response.headers["cache-control"] == "no-store"


async def test_slack_repeated_parameter_is_invalid_arguments(http: httpx.AsyncClient) -> None:
    code, verifier = await obtain_code(http, MOCKSLACK)
    form = [
        ("code", code),
        ("code", code),
        ("code_verifier", verifier),
        ("redirect_uri", MOCKSLACK.redirect_uri),
    ]
    response = await http.post(
        MOCKSLACK.token_path,
        content=urlencode(form),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        auth=(MOCKSLACK.client_id, MOCKSLACK.client_secret),
    )
    assert response.json() == {"ok": False, "error": "invalid_arguments"}


async def test_slack_client_errors_are_ok_false(http: httpx.AsyncClient) -> None:
    code, verifier = await obtain_code(http, MOCKSLACK)
    form = {"code": code, "code_verifier": verifier, "redirect_uri": MOCKSLACK.redirect_uri}
    wrong = await http.post(MOCKSLACK.token_path, data=form, auth=(MOCKSLACK.client_id, "wrong"))
    assert (wrong.status_code, wrong.json()) == (200, {"ok": False, "error": "bad_client_secret"})
    unknown = await http.post(MOCKSLACK.token_path, data=form, auth=("123.456", "wrong"))
    assert (unknown.status_code, unknown.json()) == (200, {"ok": False, "error": "invalid_client_id"})


# -- §4.1.2.1 authorization error responses ------------------------------------------------------


def _assert_error_redirect(
    response: httpx.Response, provider: OAuthProvider, error: str, state: str
) -> dict[str, str]:
    params = redirect_params(response, provider)
    assert params["error"] == error, params
    assert params["state"] == state
    assert "code" not in params
    return params


async def _get_authorize(
    http: httpx.AsyncClient, provider: OAuthProvider, params: list[tuple[str, str]]
) -> httpx.Response:
    """A GET of the authorization endpoint from a browser that may consent (signed in at the dev AS)."""
    if not provider.consent_form:
        await sign_in_at_dev_as(http)
    return await http.get(provider.authorize_path, params=tuple(params))


@pytest.mark.parametrize("provider", ALL_PROVIDERS, ids=str)
async def test_unsupported_response_type_is_redirected_with_state(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    _, challenge = pkce_pair()
    params = authorization_params(provider, challenge, state="xyz-state", response_type="token")
    response = await _get_authorize(http, provider, list(params.items()))
    _assert_error_redirect(response, provider, "unsupported_response_type", "xyz-state")


@pytest.mark.parametrize("provider", ALL_PROVIDERS, ids=str)
@pytest.mark.parametrize("repeated", ["scope", "state", "redirect_uri", "client_id"])
async def test_repeated_authorization_parameter_is_refused_without_redirect(
    http: httpx.AsyncClient, provider: OAuthProvider, repeated: str
) -> None:
    """§3.1: parameters MUST NOT repeat. A repeated redirect_uri or client_id cannot be redirected
    to (§4.1.2.1); for the others the mocks also answer a 400 page instead of redirecting
    ``invalid_request``: a documented deviation (authlib checks repetition before the client)."""
    _, challenge = pkce_pair()
    params = authorization_params(provider, challenge)
    items = [*params.items(), (repeated, params[repeated])]
    response = await _get_authorize(http, provider, items)
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "invalid_request" in response.text


@pytest.mark.parametrize("provider", [p for p in ALL_PROVIDERS if p.consent_form], ids=str)
async def test_denied_consent_is_access_denied_with_state(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    _, challenge = pkce_pair()
    params = authorization_params(provider, challenge, state="deny-state")
    response = await authorize(http, provider, params, decision="deny")
    _assert_error_redirect(response, provider, "access_denied", "deny-state")


async def test_slack_without_any_scope_is_invalid_scope_with_state(http: httpx.AsyncClient) -> None:
    _, challenge = pkce_pair()
    params = authorization_params(MOCKSLACK, challenge, state="s-1")
    del params["scope"], params["user_scope"]
    response = await http.get(MOCKSLACK.authorize_path, params=params)
    _assert_error_redirect(response, MOCKSLACK, "invalid_scope", "s-1")


@pytest.mark.parametrize("provider", ALL_PROVIDERS, ids=str)
@pytest.mark.parametrize(
    "flaw", ["foreign-redirect-uri", "unknown-client", "no-client-id", "foreign-redirect-and-bad-type"]
)
async def test_bad_client_or_redirect_uri_is_never_redirected(
    http: httpx.AsyncClient, provider: OAuthProvider, flaw: str
) -> None:
    """§4.1.2.1: with a missing, invalid or mismatching redirect URI or client id the user is told,
    and the browser is NOT redirected (§10.15, open redirectors)."""
    _, challenge = pkce_pair()
    params = authorization_params(provider, challenge)
    if flaw == "foreign-redirect-uri":
        params["redirect_uri"] = FOREIGN_CALLBACK
    elif flaw == "unknown-client":
        params["client_id"] = "unknown-client"
    elif flaw == "no-client-id":
        del params["client_id"]
    else:
        params.update(redirect_uri=FOREIGN_CALLBACK, response_type="token")
    if not provider.consent_form:
        await sign_in_at_dev_as(http)
    for response in (
        await http.get(provider.authorize_path, params=params),
        await http.post(provider.authorize_path, data={**params, "login": "alice", "decision": "approve"}),
    ):
        assert response.status_code == 400, (response.status_code, response.headers)
        assert "location" not in response.headers


# -- §4.1.2 / §10.5 single-use codes -------------------------------------------------------------


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_reused_code_fails_and_revokes_its_tokens(
    http: httpx.AsyncClient, provider: OAuthProvider
) -> None:
    """§4.1.2 / §10.5: a code used twice MUST be refused, and the tokens issued from it SHOULD be
    revoked. The dev AS revokes the refresh token; its access tokens are self-contained JWTs
    (RFC 9068) that no one can revoke before they expire (documented deviation)."""
    code, verifier = await obtain_code(http, provider)
    other = await obtain_tokens(http, provider, login="bob")  # another grant: untouched
    first = await exchange_code(http, provider, code, verifier)
    assert first.status_code == 200, first.status_code
    tokens = first.json()
    assert await api_status(http, provider, tokens["access_token"]) == 200

    assert_oauth_error(await exchange_code(http, provider, code, verifier), "invalid_grant")

    assert_oauth_error(await refresh(http, provider, tokens["refresh_token"]), "invalid_grant")
    revoked_status = 200 if provider is DEV_AS else 401
    assert await api_status(http, provider, tokens["access_token"]) == revoked_status
    assert await api_status(http, provider, other["access_token"]) == 200
    assert (await refresh(http, provider, other["refresh_token"])).status_code == 200


async def test_slack_reused_code_fails(http: httpx.AsyncClient) -> None:
    code, verifier = await obtain_code(http, MOCKSLACK)
    assert (await exchange_code(http, MOCKSLACK, code, verifier)).json()["ok"] is True
    again = await exchange_code(http, MOCKSLACK, code, verifier)
    assert again.json() == {"ok": False, "error": "invalid_code"}
