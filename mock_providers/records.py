"""Request records the mock providers keep for tests (never any secret)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from authlib.oauth2.rfc6749.util import extract_basic_authorization
from starlette.responses import Response

from mock_providers.oauth.starlette_adapter import StarletteOAuth2Request


@dataclass(frozen=True)
class TokenRequestRecord:
    """One request to a token endpoint as tests see it (no secrets)."""

    grant_type: str | None
    client_id: str | None
    ok: bool
    error: str | None = None


def requesting_client_id(oauth_request: StarletteOAuth2Request) -> str | None:
    """The client id from HTTP Basic authentication, else from the form."""
    basic_client_id, _ = extract_basic_authorization(oauth_request.headers)
    client_id: str | None = basic_client_id or oauth_request.form.get("client_id")
    return client_id


def record_token_request(
    oauth_request: StarletteOAuth2Request, response: Response, *, error: str | None = None
) -> TokenRequestRecord:
    """A record of an OAuth token request and its (authlib-made) JSON response.

    ``error`` overrides the error read from the response body.
    """
    ok = response.status_code == 200 and error is None
    if not ok and error is None:
        try:
            error = json.loads(bytes(response.body)).get("error")
        except (ValueError, AttributeError):
            error = "unknown"
    return TokenRequestRecord(
        grant_type=oauth_request.form.get("grant_type"),
        client_id=requesting_client_id(oauth_request),
        ok=ok,
        error=error,
    )


def record_fault(oauth_request: StarletteOAuth2Request, error: str) -> TokenRequestRecord:
    """A record of a token request answered by a failure mode (``error`` names it)."""
    return TokenRequestRecord(
        grant_type=oauth_request.form.get("grant_type"),
        client_id=requesting_client_id(oauth_request),
        ok=False,
        error=error,
    )
