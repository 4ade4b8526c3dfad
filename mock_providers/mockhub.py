"""MockHub: a GitHub-like third-party OAuth 2 provider for development and tests.

Built from authlib's server classes: authorization code grant with mandatory
S256 PKCE and client authentication, rotating refresh tokens, RFC 7009
revocation, RFC 9207 ``iss`` in authorization responses. Access tokens
(``mhat_...``) and refresh tokens (``mhrt_...``) are opaque random strings so
tests can scan logs and storage for leaks.

:class:`MockHub` is what tests hold (``app.state.mockhub``): it owns the
authlib server and all state, and exposes knobs (``iss_mode``,
``access_token_ttl``, ``clock``) and counters (``token_requests``,
``issued_access_tokens``, ...).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from authlib.common.security import generate_token
from authlib.oauth2.rfc6749 import ClientMixin, OAuth2Request, ResourceProtector, TokenMixin
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc6749.models import AuthorizationCodeMixin
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator
from authlib.oauth2.rfc7009 import RevocationEndpoint

from .config import ClientSpec
from .issuer_parameter import StarletteIssuerParameter
from .pkce import RequiredS256CodeChallenge
from .starlette_adapter import StarletteAuthorizationServer

IssMode = Literal["correct", "omit", "wrong"]
ACCESS_TOKEN_PREFIX = "mhat_"
REFRESH_TOKEN_PREFIX = "mhrt_"
AUTHORIZATION_CODE_LIFETIME = 600
TOKEN_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")
LOGIN_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class MockHubAccount:
    """A MockHub user. ``id`` is derived from the login, so it is stable everywhere."""

    id: int
    login: str
    name: str

    @classmethod
    def for_login(cls, login: str) -> MockHubAccount:
        digest = hashlib.sha256(login.lower().encode("utf-8")).digest()
        return cls(
            id=1000 + int.from_bytes(digest[:4], "big") % 90_000_000, login=login, name=f"{login} (MockHub)"
        )

    def get_user_id(self) -> int:
        return self.id


@dataclass(frozen=True)
class TokenRequestRecord:
    """One request to ``/mockhub/token`` as tests see it (no secrets)."""

    grant_type: str | None
    client_id: str | None
    ok: bool
    error: str | None = None


@dataclass
class MockHubClient(ClientMixin):  # type: ignore[misc]  # authlib is untyped
    """The one registered client. Redirect URIs must match exactly."""

    client_id: str
    client_secret: str | None
    redirect_uris: tuple[str, ...]

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
        return secrets.compare_digest(self.client_secret.encode(), client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.client_secret is None:
            return method == "none"
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class MockHubCode(AuthorizationCodeMixin):  # type: ignore[misc]  # authlib is untyped
    code: str
    client_id: str
    redirect_uri: str | None
    scope: str
    login: str
    code_challenge: str | None
    code_challenge_method: str | None
    expires_at: float

    def get_redirect_uri(self) -> str | None:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class MockHubToken(TokenMixin):  # type: ignore[misc]  # authlib is untyped
    """One access token with (usually) its refresh token."""

    access_token: str
    refresh_token: str | None
    client_id: str
    scope: str
    login: str
    issued_at: float
    expires_at: float
    clock: Callable[[], float] = field(repr=False, default=time.time)
    revoked: bool = False

    def check_client(self, client: Any) -> bool:
        return bool(client.get_client_id() == self.client_id)

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return int(self.expires_at - self.issued_at)

    def is_expired(self) -> bool:
        return self.clock() >= self.expires_at

    def is_revoked(self) -> bool:
        return self.revoked


class MockHubCodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]  # authlib is untyped
    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_AUTH_METHODS

    @property
    def hub(self) -> MockHub:
        hub: MockHub = self.server.hub
        return hub

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        self.hub.codes[code] = MockHubCode(
            code=code,
            client_id=request.client.get_client_id(),
            redirect_uri=data.get("redirect_uri"),
            scope=request.scope or "",
            login=request.user.login,
            code_challenge=data.get("code_challenge"),
            code_challenge_method=data.get("code_challenge_method"),
            expires_at=self.hub.clock() + AUTHORIZATION_CODE_LIFETIME,
        )

    def query_authorization_code(self, code: str, client: MockHubClient) -> MockHubCode | None:
        record = self.hub.codes.get(code)
        if record is None or record.client_id != client.client_id:
            return None
        if record.expires_at <= self.hub.clock():
            self.hub.codes.pop(code, None)
            return None
        return record

    def delete_authorization_code(self, authorization_code: MockHubCode) -> None:
        self.hub.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: MockHubCode) -> MockHubAccount:
        return self.hub.account(authorization_code.login)


class MockHubRefreshGrant(RefreshTokenGrant):  # type: ignore[misc]  # authlib is untyped
    """Rotating refresh: a new refresh token each time; the old one stops working."""

    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True

    @property
    def hub(self) -> MockHub:
        hub: MockHub = self.server.hub
        return hub

    def authenticate_refresh_token(self, refresh_token: str) -> MockHubToken | None:
        return self.hub.tokens_by_refresh.get(refresh_token)

    def authenticate_user(self, refresh_token: MockHubToken) -> MockHubAccount:
        return self.hub.account(refresh_token.login)

    def revoke_old_credential(self, refresh_token: MockHubToken) -> None:
        if refresh_token.refresh_token:
            self.hub.tokens_by_refresh.pop(refresh_token.refresh_token, None)


class MockHubRevocationEndpoint(RevocationEndpoint):  # type: ignore[misc]  # authlib is untyped
    """RFC 7009. Revoking either token of a pair revokes both."""

    CLIENT_AUTH_METHODS = TOKEN_AUTH_METHODS

    @property
    def hub(self) -> MockHub:
        hub: MockHub = self.server.hub
        return hub

    def query_token(self, token_string: str, token_type_hint: str | None) -> MockHubToken | None:
        by_access = self.hub.tokens.get(token_string)
        by_refresh = self.hub.tokens_by_refresh.get(token_string)
        if token_type_hint == "refresh_token":
            return by_refresh or by_access
        return by_access or by_refresh

    def revoke_token(self, token: MockHubToken, request: OAuth2Request) -> None:
        self.hub.revoke(token)


class MockHubTokenValidator(BearerTokenValidator):  # type: ignore[misc]  # authlib is untyped
    def __init__(self, hub: MockHub) -> None:
        super().__init__(realm="mockhub")
        self._hub = hub

    def authenticate_token(self, token_string: str) -> MockHubToken | None:
        return self._hub.tokens.get(token_string)


class MockHubAuthorizationServer(StarletteAuthorizationServer):
    def __init__(self, hub: MockHub) -> None:
        super().__init__()
        self.hub = hub
        self.issuer_parameter = StarletteIssuerParameter(hub.response_issuer)
        self.register_token_generator(
            "default",
            BearerTokenGenerator(
                access_token_generator=self._new_access_token,
                refresh_token_generator=self._new_refresh_token,
                expires_generator=lambda client, grant_type: hub.access_token_ttl,
            ),
        )
        self.register_grant(MockHubCodeGrant, [RequiredS256CodeChallenge()])
        self.register_grant(MockHubRefreshGrant)
        self.register_endpoint(MockHubRevocationEndpoint)
        self.register_extension(self.issuer_parameter)

    @staticmethod
    def _new_access_token(**_: Any) -> str:
        return ACCESS_TOKEN_PREFIX + str(generate_token(40))

    @staticmethod
    def _new_refresh_token(**_: Any) -> str:
        return REFRESH_TOKEN_PREFIX + str(generate_token(40))

    def query_client(self, client_id: str) -> MockHubClient | None:
        client = self.hub.client
        return client if client.client_id == client_id else None

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        self.hub.store_token(token, request.client.get_client_id(), request.user.login)


class MockHub:
    """State, knobs and counters of one MockHub instance.

    Knobs (assign freely in tests):
      * ``iss_mode``: ``"correct"`` (default), ``"omit"`` or ``"wrong"`` -- the
        ``iss`` the authorization response carries (RFC 9207 mix-up tests);
        ``"wrong"`` sends ``wrong_issuer``.
      * ``access_token_ttl``: seconds; ``expires_in`` of tokens issued from now on.
      * ``clock``: the time source for expiry (replace to fast-forward).

    Counters: ``token_requests`` (every ``/mockhub/token`` request, in order),
    ``issued_access_tokens``, ``issued_refresh_tokens``, ``revoked_tokens``,
    ``user_requests`` (``/mockhub/user`` calls, authorized or not).
    """

    def __init__(
        self,
        issuer: str,
        client: ClientSpec,
        *,
        access_token_ttl: int = 28800,
        wrong_issuer: str | None = None,
    ) -> None:
        self.issuer = issuer
        self.client = MockHubClient(client.client_id, client.client_secret, tuple(client.redirect_uris))
        self.iss_mode: IssMode = "correct"
        self.wrong_issuer = wrong_issuer or issuer.rsplit("/", 1)[0] + "/evil-hub"
        self.access_token_ttl = access_token_ttl
        self.clock: Callable[[], float] = time.time

        self.token_requests: list[TokenRequestRecord] = []
        self.issued_access_tokens: set[str] = set()
        self.issued_refresh_tokens: set[str] = set()
        self.revoked_tokens: set[str] = set()
        self.user_requests = 0

        self.codes: dict[str, MockHubCode] = {}
        self.tokens: dict[str, MockHubToken] = {}
        self.tokens_by_refresh: dict[str, MockHubToken] = {}

        self.server = MockHubAuthorizationServer(self)
        self.protector = ResourceProtector()
        self.protector.register_token_validator(MockHubTokenValidator(self))

    # -- knobs and test helpers ------------------------------------------------

    def response_issuer(self) -> str | None:
        """The ``iss`` value for the next authorization response, per ``iss_mode``."""
        if self.iss_mode == "omit":
            return None
        if self.iss_mode == "wrong":
            return self.wrong_issuer
        return self.issuer

    def account(self, login: str) -> MockHubAccount:
        return MockHubAccount.for_login(login)

    def expire_access_tokens(self) -> None:
        """Make every access token issued so far expired (refresh tokens stay valid)."""
        now = self.clock()
        for token in self.tokens.values():
            token.expires_at = min(token.expires_at, now)

    def revoke_all_tokens(self) -> None:
        """As if every user revoked the app at MockHub."""
        for token in list(self.tokens.values()):
            self.revoke(token)

    def reset_counters(self) -> None:
        self.token_requests.clear()
        self.user_requests = 0

    # -- storage ---------------------------------------------------------------

    def store_token(self, token: dict[str, Any], client_id: str, login: str) -> MockHubToken:
        now = self.clock()
        record = MockHubToken(
            access_token=token["access_token"],
            refresh_token=token.get("refresh_token"),
            client_id=client_id,
            scope=token.get("scope", ""),
            login=login,
            issued_at=now,
            expires_at=now + self.access_token_ttl,
            clock=self.clock_now,
        )
        self.tokens[record.access_token] = record
        self.issued_access_tokens.add(record.access_token)
        if record.refresh_token:
            self.tokens_by_refresh[record.refresh_token] = record
            self.issued_refresh_tokens.add(record.refresh_token)
        return record

    def clock_now(self) -> float:
        """Indirection so replacing ``clock`` affects tokens already issued."""
        return self.clock()

    def revoke(self, token: MockHubToken) -> None:
        token.revoked = True
        self.revoked_tokens.add(token.access_token)
        if token.refresh_token:
            self.tokens_by_refresh.pop(token.refresh_token, None)
            self.revoked_tokens.add(token.refresh_token)
