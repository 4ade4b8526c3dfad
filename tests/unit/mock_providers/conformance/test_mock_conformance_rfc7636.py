"""RFC 7636 (PKCE) conformance of the mock providers, over HTTP, as every mock enforces it:
S256 only (§4.2, §4.3), for every client; the verifier checked at the token endpoint (§4.6) and
its form (§4.1: 43-128 characters of ``[A-Za-z0-9-._~]``).

MockSlack enforces the same rules and answers in Slack's words (docs/mock-providers.md).
"""

from __future__ import annotations

import base64
import hashlib

import httpx
import pytest

from tests.support.mock_conformance import (
    ALL_PROVIDERS,
    MOCKSLACK,
    RFC6749_PROVIDERS,
    OAuthProvider,
    assert_oauth_error,
    authorization_params,
    authorize,
    exchange_code,
    redirect_params,
    sign_in_at_dev_as,
)
from tests.support.mock_provider_setup import pkce_pair

UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"


def s256(verifier: str) -> str:
    """§4.2: BASE64URL(SHA256(ASCII(code_verifier))), unpadded."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def code_for(http: httpx.AsyncClient, provider: OAuthProvider, challenge: str) -> str:
    response = await authorize(http, provider, authorization_params(provider, challenge))
    callback = redirect_params(response, provider)
    assert "code" in callback, callback
    return callback["code"]


async def refused_authorization(
    http: httpx.AsyncClient, provider: OAuthProvider, params: dict[str, str]
) -> dict[str, str]:
    """The error redirect for ``params``, GET and POST alike (the consent form posts them back)."""
    if not provider.consent_form:
        await sign_in_at_dev_as(http)
    callback = redirect_params(await http.get(provider.authorize_path, params=params), provider)
    if provider.consent_form:
        posted = await http.post(
            provider.authorize_path, data={**params, "login": "a", "decision": "approve"}
        )
        assert redirect_params(posted, provider) == callback
    assert "code" not in callback
    assert callback["state"] == params["state"]
    return callback


# -- authorization request: S256 only, always --------------------------------------------------


@pytest.mark.parametrize("provider", ALL_PROVIDERS, ids=str)
async def test_missing_code_challenge_is_refused(http: httpx.AsyncClient, provider: OAuthProvider) -> None:
    """Every mock requires PKCE from every client (OAuth 2.1 §4.1.1; RFC 9700 §2.1.1)."""
    callback = await refused_authorization(http, provider, authorization_params(provider, None))
    assert callback["error"] == "invalid_request"


@pytest.mark.parametrize("provider", ALL_PROVIDERS, ids=str)
@pytest.mark.parametrize("method", ["plain", None, "S512", "s256"])
async def test_only_s256_is_accepted(
    http: httpx.AsyncClient, provider: OAuthProvider, method: str | None
) -> None:
    """§4.3: ``plain`` (also the default when the method is absent) is refused, as is anything
    else that is not exactly ``S256``."""
    _, challenge = pkce_pair()
    params = authorization_params(provider, challenge)
    if method is None:
        del params["code_challenge_method"]
    else:
        params["code_challenge_method"] = method
    callback = await refused_authorization(http, provider, params)
    assert callback["error"] == "invalid_request"


@pytest.mark.parametrize("provider", ALL_PROVIDERS, ids=str)
@pytest.mark.parametrize("challenge", ["abc", "A" * 42, "A" * 129, "A" * 42 + "="])
async def test_malformed_code_challenge_is_refused(
    http: httpx.AsyncClient, provider: OAuthProvider, challenge: str
) -> None:
    """§4.2: an S256 challenge is a 43-character base64url string (at most §4.1's 128)."""
    callback = await refused_authorization(http, provider, authorization_params(provider, challenge))
    assert callback["error"] == "invalid_request"


# -- token request: the verifier ------------------------------------------------------------------


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_wrong_verifier_is_invalid_grant(http: httpx.AsyncClient, provider: OAuthProvider) -> None:
    """§4.6: a verifier whose S256 differs from the challenge is ``invalid_grant``."""
    _, challenge = pkce_pair()
    code = await code_for(http, provider, challenge)
    other_verifier, _ = pkce_pair()
    assert_oauth_error(await exchange_code(http, provider, code, other_verifier), "invalid_grant")


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
async def test_missing_verifier_is_refused(http: httpx.AsyncClient, provider: OAuthProvider) -> None:
    """A code bound to a challenge is useless without its verifier (no PKCE downgrade)."""
    _, challenge = pkce_pair()
    code = await code_for(http, provider, challenge)
    assert_oauth_error(await exchange_code(http, provider, code, None), "invalid_request")


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
@pytest.mark.parametrize(
    "verifier",
    ["A" * 42, "A" * 129, "A" * 42 + "+", "A" * 42 + "/", "A" * 42 + "=", "A" * 42 + " "],
    ids=["42-chars", "129-chars", "plus", "slash", "padding", "space"],
)
async def test_verifier_outside_the_grammar_is_refused(
    http: httpx.AsyncClient, provider: OAuthProvider, verifier: str
) -> None:
    """§4.1: code-verifier = 43*128 unreserved; one outside it is refused even when its S256
    matches the challenge."""
    code = await code_for(http, provider, s256(verifier))
    assert_oauth_error(await exchange_code(http, provider, code, verifier), "invalid_request")


@pytest.mark.parametrize("provider", RFC6749_PROVIDERS, ids=str)
@pytest.mark.parametrize("verifier", [UNRESERVED[:43], (UNRESERVED * 2)[:128]], ids=["43-chars", "128-chars"])
async def test_verifier_at_the_grammar_bounds_is_accepted(
    http: httpx.AsyncClient, provider: OAuthProvider, verifier: str
) -> None:
    code = await code_for(http, provider, s256(verifier))
    response = await exchange_code(http, provider, code, verifier)
    assert response.status_code == 200, response.status_code


async def test_slack_verifier_errors(http: httpx.AsyncClient) -> None:
    """Deviation (Slack's words): a wrong verifier is ``invalid_code``, a missing or malformed one
    ``invalid_code_verifier``; both HTTP 200 ``{"ok": false}``."""
    _, challenge = pkce_pair()
    code = await code_for(http, MOCKSLACK, challenge)
    wrong, _ = pkce_pair()
    answers = [
        (await exchange_code(http, MOCKSLACK, code, candidate)).json()
        for candidate in (wrong, None, "A" * 42)
    ]
    assert answers == [
        {"ok": False, "error": "invalid_code"},
        {"ok": False, "error": "invalid_code_verifier"},
        {"ok": False, "error": "invalid_code_verifier"},
    ]
