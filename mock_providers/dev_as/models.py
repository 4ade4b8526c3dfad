"""In-memory records of the development authorization server."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from authlib.oauth2.rfc6749 import TokenMixin
from authlib.oidc.core import AuthorizationCodeMixin

from mock_providers.clients import PreRegisteredClient
from mock_providers.oauth.server import ProviderCode

PUBLIC = "none"


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
class DevClient(PreRegisteredClient):
    """A client of the dev AS: pre-registered or registered through RFC 7591.

    Public clients (no secret) authenticate with ``none``; confidential ones
    with either ``client_secret_basic`` or ``client_secret_post``. Redirect
    URIs match exactly, except that a loopback-IP http redirect URI may use
    any port (RFC 8252 section 7.3).
    """

    response_types: tuple[str, ...] = ("code",)
    client_name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_public(self) -> bool:
        return self.client_secret is None

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        if redirect_uri in self.redirect_uris:
            return True
        if not _is_loopback_http(redirect_uri):
            return False
        return any(
            _is_loopback_http(registered) and _same_except_port(registered, redirect_uri)
            for registered in self.redirect_uris
        )

    def check_response_type(self, response_type: str) -> bool:
        return response_type in self.response_types


@dataclass(kw_only=True)
class DevAuthorizationCode(ProviderCode, AuthorizationCodeMixin):  # type: ignore[misc]  # authlib is untyped
    username: str
    auth_time: int | None
    audience: str
    nonce: str | None

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
    #: The authorization (code exchange) this token descends from; rotation keeps it.
    grant_id: str = ""

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
