"""The mock OAuth providers as the RFC conformance tests (tests/unit/mock_providers/conformance/)
drive them: one description per provider and the few flows every test needs, all over HTTP.

Each :class:`OAuthProvider` says where a provider's endpoints are, which client it knows and how a
user approves an authorization there (the dev AS signs the browser in first and consents
implicitly; the third-party mocks show a consent form). The helpers go through public HTTP only,
never through a provider's storage, so they keep working whatever the mocks keep their state in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.mock_provider_setup import (
    BASE,
    GOOGLE_CALLBACK,
    GOOGLE_CLIENT_ID,
    GOOGLE_SECRET,
    HUB_CALLBACK,
    HUB_CLIENT_ID,
    HUB_SECRET,
    LOGIN_CALLBACK,
    LOGIN_CLIENT_ID,
    LOGIN_SECRET,
    SLACK_CALLBACK,
    SLACK_CLIENT_ID,
    SLACK_SECRET,
    dev_as_login,
    pkce_pair,
    query_of,
)


@dataclass(frozen=True)
class OAuthProvider:
    """One mock provider as a client sees it (paths relative to :data:`BASE`)."""

    name: str
    #: RFC 8414 / OIDC issuer; ``None`` for MockSlack, which publishes none (like Slack).
    issuer: str | None
    authorize_path: str
    token_path: str
    client_id: str
    client_secret: str
    redirect_uri: str
    #: Extra authorization parameters a complete grant needs (scopes, Google's offline access).
    grant_params: dict[str, str] = field(default_factory=dict)
    #: ``True``: a consent form (``login`` + ``decision``); ``False``: the dev AS's sign-in.
    consent_form: bool = True
    #: Where a bearer access token is accepted (the provider's API), if it has one.
    api_path: str | None = None

    def __str__(self) -> str:
        return self.name


DEV_AS = OAuthProvider(
    name="devas",
    issuer=BASE,
    authorize_path="/authorize",
    token_path="/token",
    client_id=LOGIN_CLIENT_ID,
    client_secret=LOGIN_SECRET,
    redirect_uri=LOGIN_CALLBACK,
    grant_params={"scope": "openid"},
    consent_form=False,
    api_path="/userinfo",
)
MOCKHUB = OAuthProvider(
    name="mockhub",
    issuer=BASE + "/mockhub",
    authorize_path="/mockhub/authorize",
    token_path="/mockhub/token",
    client_id=HUB_CLIENT_ID,
    client_secret=HUB_SECRET,
    redirect_uri=HUB_CALLBACK,
    grant_params={"scope": "read:user"},
    api_path="/mockhub/user",
)
MOCKGOOGLE = OAuthProvider(
    name="mockgoogle",
    issuer=BASE + "/mockgoogle",
    authorize_path="/mockgoogle/authorize",
    token_path="/mockgoogle/token",
    client_id=GOOGLE_CLIENT_ID,
    client_secret=GOOGLE_SECRET,
    redirect_uri=GOOGLE_CALLBACK,
    grant_params={"scope": "openid email", "access_type": "offline", "prompt": "consent"},
    api_path="/mockgoogle/userinfo",
)
MOCKSLACK = OAuthProvider(
    name="mockslack",
    issuer=None,
    authorize_path="/mockslack/authorize",
    token_path="/mockslack/oauth.v2.access",
    client_id=SLACK_CLIENT_ID,
    client_secret=SLACK_SECRET,
    redirect_uri=SLACK_CALLBACK,
    grant_params={"scope": "chat:write", "user_scope": "search:read"},
)

#: The providers that answer RFC 6749 token endpoint errors as RFC 6749 says (not MockSlack).
RFC6749_PROVIDERS = (DEV_AS, MOCKHUB, MOCKGOOGLE)
#: The providers with an issuer, metadata and RFC 9207 ``iss``.
ISSUING_PROVIDERS = (DEV_AS, MOCKHUB, MOCKGOOGLE)
ALL_PROVIDERS = (DEV_AS, MOCKHUB, MOCKGOOGLE, MOCKSLACK)


def authorization_params(provider: OAuthProvider, challenge: str | None, **extra: str) -> dict[str, str]:
    """A complete authorization request for ``provider``'s client; ``extra`` overrides or adds."""
    params = {
        "response_type": "code",
        "client_id": provider.client_id,
        "redirect_uri": provider.redirect_uri,
        "state": "state-0123",
        **provider.grant_params,
    }
    if challenge is not None:
        params.update(code_challenge=challenge, code_challenge_method="S256")
    params.update(extra)
    return params


async def sign_in_at_dev_as(http: httpx.AsyncClient, username: str = "alice") -> None:
    """Give ``http`` a dev-AS session (the cookie stays in the client)."""
    response = await dev_as_login(http, username)
    assert response.status_code == 200, response.text


async def authorize(
    http: httpx.AsyncClient,
    provider: OAuthProvider,
    params: dict[str, str],
    *,
    decision: str = "approve",
    login: str = "alice",
) -> httpx.Response:
    """The provider's answer to an authorization request the user approves (or denies).

    Consent-form providers get the parameters POSTed with ``login`` and ``decision`` (what the
    form submits); the dev AS gets a GET from a signed-in browser (it consents implicitly, so
    ``decision`` does not apply there).
    """
    if provider.consent_form:
        return await http.post(provider.authorize_path, data={**params, "login": login, "decision": decision})
    await sign_in_at_dev_as(http, login)
    return await http.get(provider.authorize_path, params=params)


def redirect_params(response: httpx.Response, provider: OAuthProvider) -> dict[str, str]:
    """The query of a redirect to the provider's client, asserting that it is one."""
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(provider.redirect_uri + "?"), location
    return query_of(location)


async def obtain_code(
    http: httpx.AsyncClient, provider: OAuthProvider, *, login: str = "alice", **extra: str
) -> tuple[str, str]:
    """An authorization code ``login`` approved, and its PKCE verifier."""
    verifier, challenge = pkce_pair()
    params = authorization_params(provider, challenge, **extra)
    callback = redirect_params(await authorize(http, provider, params, login=login), provider)
    assert "error" not in callback, callback
    return callback["code"], verifier


async def token_request(
    http: httpx.AsyncClient, provider: OAuthProvider, form: dict[str, str], *, auth: str = "basic"
) -> httpx.Response:
    """POST ``form`` to the token endpoint with the client authenticated by ``auth``:
    ``"basic"`` (client_secret_basic), ``"post"`` (client_secret_post) or ``"none"``."""
    if auth == "basic":
        return await http.post(
            provider.token_path, data=form, auth=(provider.client_id, provider.client_secret)
        )
    if auth == "post":
        return await http.post(
            provider.token_path,
            data={**form, "client_id": provider.client_id, "client_secret": provider.client_secret},
        )
    return await http.post(provider.token_path, data=form)


async def exchange_code(
    http: httpx.AsyncClient, provider: OAuthProvider, code: str, verifier: str | None, **extra: str
) -> httpx.Response:
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": provider.redirect_uri}
    if verifier is not None:
        form["code_verifier"] = verifier
    form.update(extra)
    return await token_request(http, provider, form)


async def obtain_tokens(
    http: httpx.AsyncClient, provider: OAuthProvider, *, login: str = "alice"
) -> dict[str, Any]:
    """A successful code exchange's token response."""
    code, verifier = await obtain_code(http, provider, login=login)
    response = await exchange_code(http, provider, code, verifier)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def refresh(
    http: httpx.AsyncClient, provider: OAuthProvider, refresh_token: str, **extra: str
) -> httpx.Response:
    return await token_request(
        http, provider, {"grant_type": "refresh_token", "refresh_token": refresh_token, **extra}
    )


async def api_status(http: httpx.AsyncClient, provider: OAuthProvider, access_token: str) -> int:
    """The status the provider's API answers for a bearer ``access_token``."""
    assert provider.api_path is not None
    response = await http.get(provider.api_path, headers={"Authorization": f"Bearer {access_token}"})
    return response.status_code


def assert_oauth_error(response: httpx.Response, error: str, status: int = 400) -> dict[str, Any]:
    """RFC 6749 §5.2: ``status``, a JSON object with ``error``, not cached (§5.1)."""
    assert response.status_code == status, (response.status_code, _error_of(response))
    assert response.headers["content-type"].split(";")[0] == "application/json"
    body: dict[str, Any] = response.json()
    assert body["error"] == error, body
    assert_not_cached(response)
    return body


def assert_not_cached(response: httpx.Response) -> None:
    """RFC 6749 §5.1: token endpoint responses carry ``Cache-Control: no-store`` and
    ``Pragma: no-cache``."""
    assert response.headers.get("cache-control") == "no-store", response.headers
    assert response.headers.get("pragma") == "no-cache", response.headers


def _error_of(response: httpx.Response) -> object:
    """What an assertion message may show of a response: its error, never a token."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    return (
        {key: body.get(key) for key in ("error", "error_description", "ok")}
        if isinstance(body, dict)
        else None
    )
