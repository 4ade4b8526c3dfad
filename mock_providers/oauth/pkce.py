"""PKCE (RFC 7636) as both mock servers enforce it: S256, for every client."""

from __future__ import annotations

from typing import Any

from authlib.oauth2.rfc6749 import InvalidRequestError
from authlib.oauth2.rfc7636 import CodeChallenge


class RequiredS256CodeChallenge(CodeChallenge):  # type: ignore[misc]  # authlib is untyped
    """authlib's ``CodeChallenge`` extension, tightened.

    authlib makes PKCE mandatory only for public clients and also accepts
    ``plain``. Here every authorization request must carry a ``code_challenge``
    with ``code_challenge_method=S256``; every code therefore has a challenge,
    so authlib then demands and checks a ``code_verifier`` at the token endpoint
    whatever the client type.
    """

    SUPPORTED_CODE_CHALLENGE_METHOD = ("S256",)

    def __init__(self) -> None:
        super().__init__(required=True)

    def validate_code_challenge(self, grant: Any, redirect_uri: Any) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: missing 'code_challenge'.")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("PKCE 'code_challenge_method' must be 'S256'.")
        super().validate_code_challenge(grant, redirect_uri)
