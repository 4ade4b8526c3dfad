"""RFC 9068 JWT access tokens of the development authorization server.

``/token`` and :func:`mint_access_token` sign through the same
:class:`DevAccessTokenGenerator` (authlib's RFC 9068 generator), so a minted
token is indistinguishable from one obtained through the OAuth flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from authlib.common.security import generate_token
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from joserfc.jwk import KeySet

from mock_providers.dev_as.keys import DevKeys, load_dev_keys

ACCESS_TOKEN_LIFETIME = 3600


@dataclass(frozen=True)
class DevUser:
    """A dev-AS user as bound to one grant.

    ``audience`` is the RFC 8707 resource the grant is for (``None``: the
    configured default); ``auth_time`` is when the user signed in, if known.
    """

    username: str
    auth_time: int | None = None
    audience: str | None = None

    def get_user_id(self) -> str:
        return self.username


@dataclass(frozen=True)
class _NamedClient:
    """The one thing the generator needs from a client: its id."""

    client_id: str

    def get_client_id(self) -> str:
        return self.client_id


def _new_refresh_token(**_: Any) -> str:
    return str(generate_token(48))


class DevAccessTokenGenerator(JWTBearerTokenGenerator):  # type: ignore[misc]  # authlib is untyped
    """authlib's RFC 9068 generator with the dev AS's key, audience and lifetime.

    Tokens carry ``typ: at+jwt`` and the key's ``kid`` in the header and the
    claims iss, sub, aud, client_id, scope, iat, exp, jti (plus auth_time when
    the user signed in interactively).
    """

    def __init__(self, keys: DevKeys, lifetime: int = ACCESS_TOKEN_LIFETIME) -> None:
        if lifetime <= 0:
            raise ValueError("access token lifetime must be positive")
        super().__init__(
            issuer=keys.issuer,
            alg=keys.alg,
            refresh_token_generator=_new_refresh_token,
            expires_generator=lifetime,
        )
        self._keys = keys
        self._key_set = keys.private_key_set()

    def get_jwks(self) -> KeySet:
        # A key set, not a single key: joserfc then writes the key's kid into the header.
        return self._key_set

    def get_audiences(self, client: Any, user: Any, scope: Any) -> str:
        if isinstance(user, DevUser) and user.audience:
            return user.audience
        return self._keys.audience

    def get_auth_time(self, user: Any) -> int | None:
        return user.auth_time if isinstance(user, DevUser) else None

    def sign(self, subject: str, *, audience: str | None, client_id: str, scope: str) -> str:
        """Sign an access token outside any OAuth flow (what ``dev-token`` does)."""
        token: str = self.access_token_generator(
            client=_NamedClient(client_id),
            grant_type="urn:mcp-url-connect:dev-token",
            user=DevUser(username=subject, audience=audience),
            scope=scope,
        )
        return token


def mint_access_token(
    data_dir: Path,
    subject: str,
    *,
    audience: str | None = None,
    lifetime: int = ACCESS_TOKEN_LIFETIME,
    client_id: str = "dev-token",
    scope: str = "",
) -> str:
    """Sign an access token for ``subject`` exactly as the dev AS's ``/token`` does.

    Uses the key, issuer and default audience stored in ``<data_dir>/dev-as.json``
    by a dev AS that ran with that data directory; raises
    :class:`~mock_providers.NoDevKeys` when there is none.
    """
    if not subject:
        raise ValueError("subject must not be empty")
    keys = load_dev_keys(data_dir)
    generator = DevAccessTokenGenerator(keys, lifetime=lifetime)
    return generator.sign(subject, audience=audience, client_id=client_id, scope=scope)
