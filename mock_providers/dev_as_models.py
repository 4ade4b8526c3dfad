"""In-memory records of the development authorization server."""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from authlib.oauth2.rfc6749 import ClientMixin, TokenMixin
from authlib.oidc.core import AuthorizationCodeMixin

PUBLIC = "none"
SECRET_METHODS = ("client_secret_basic", "client_secret_post")


def _is_loopback_http(uri: str) -> bool:
    parts = urlsplit(uri)
    if parts.scheme != "http" or not parts.hostname:
        return False
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def _same_except_port(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.path, pa.query, pa.fragment) == (
        pb.scheme,
        pb.hostname,
        pb.path,
        pb.query,
        pb.fragment,
    )


@dataclass
class DevClient(ClientMixin):  # type: ignore[misc]  # authlib is untyped
    """A client of the dev AS: pre-registered or registered through RFC 7591.

    Public clients (no secret) authenticate with ``none``; confidential ones
    with either ``client_secret_basic`` or ``client_secret_post``. Redirect
    URIs match exactly, except that a loopback-IP http redirect URI may use
    any port (RFC 8252 section 7.3).
    """

    client_id: str
    client_secret: str | None
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...] = ("authorization_code", "refresh_token")
    response_types: tuple[str, ...] = ("code",)
    client_name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_public(self) -> bool:
        return self.client_secret is None

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        # The dev AS grants whatever scope is asked for.
        if not scope:
            return ""
        return " ".join(dict.fromkeys(scope.split()))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        if redirect_uri in self.redirect_uris:
            return True
        if not _is_loopback_http(redirect_uri):
            return False
        return any(
            _is_loopback_http(registered) and _same_except_port(registered, redirect_uri)
            for registered in self.redirect_uris
        )

    def check_client_secret(self, client_secret: str) -> bool:
        if self.client_secret is None:
            return False
        return secrets.compare_digest(self.client_secret.encode(), client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.is_public:
            return method == PUBLIC
        return method in SECRET_METHODS

    def check_response_type(self, response_type: str) -> bool:
        return response_type in self.response_types

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


@dataclass
class DevAuthorizationCode(AuthorizationCodeMixin):  # type: ignore[misc]  # authlib is untyped
    code: str
    client_id: str
    redirect_uri: str | None
    scope: str
    username: str
    auth_time: int | None
    audience: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    expires_at: float

    def get_redirect_uri(self) -> str | None:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int | None:
        return self.auth_time

    def get_acr(self) -> str | None:
        return None

    def get_amr(self) -> list[str] | None:
        return None


@dataclass
class DevRefreshToken(TokenMixin):  # type: ignore[misc]  # authlib is untyped
    refresh_token: str
    client_id: str
    scope: str
    username: str
    auth_time: int | None
    audience: str

    def check_client(self, client: Any) -> bool:
        return bool(client.get_client_id() == self.client_id)

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return 0

    def is_expired(self) -> bool:
        return False

    def is_revoked(self) -> bool:
        return False
