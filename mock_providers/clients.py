"""The one pre-registered client each third-party mock provider knows."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Self

from authlib.oauth2.rfc6749 import ClientMixin

from mock_providers.config import ClientSpec
from mock_providers.store import SecretDigest

#: Client authentication methods the mock providers' token endpoints accept;
#: which one a client may use depends on whether it has a secret.
TOKEN_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")


@dataclass
class PreRegisteredClient(ClientMixin):  # type: ignore[misc]  # authlib is untyped
    """A client from a :class:`~mock_providers.ClientSpec`. Redirect URIs match exactly.

    Public (no secret): token endpoint auth method ``none``. Confidential:
    ``client_secret_basic`` or ``client_secret_post``. Any scope is granted.
    """

    client_id: str
    client_secret: str | None
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...] = ("authorization_code", "refresh_token")

    @classmethod
    def from_spec(cls, spec: ClientSpec, grant_types: tuple[str, ...] | None = None) -> Self:
        client = cls(spec.client_id, spec.client_secret, tuple(spec.redirect_uris))
        if grant_types is not None:
            client.grant_types = grant_types
        return client

    @property
    def auth_methods(self) -> list[str]:
        """What metadata documents advertise for this client."""
        return ["none"] if self.client_secret is None else ["client_secret_basic", "client_secret_post"]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        if not scope:
            return ""
        return " ".join(dict.fromkeys(scope.split()))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        if self.client_secret is None:
            return False
        if isinstance(self.client_secret, SecretDigest):  # registered before a restart
            return self.client_secret.matches(client_secret)
        return secrets.compare_digest(self.client_secret.encode(), client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.client_secret is None:
            return method == "none"
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types
