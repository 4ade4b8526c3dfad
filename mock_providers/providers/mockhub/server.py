"""MockHub: a GitHub-like third-party OAuth 2 provider for development and tests.

Built from authlib's server classes: authorization code grant with mandatory
S256 PKCE and client authentication, rotating refresh tokens with reuse
detection (a GitHub App's expiring user tokens), RFC 7009 revocation, RFC 9207
``iss`` in authorization responses. Access tokens (``mhat_...``) and refresh
tokens (``mhrt_...``) are opaque random strings so tests can scan logs and
storage for leaks.

:class:`MockHub` is what tests hold (``app.state.mockhub``): it owns the
authlib server and all state, and exposes knobs (``iss_mode``,
``access_token_ttl``, ``rotate_refresh_tokens``, ``token_endpoint_mode``, ...)
and counters (``token_requests``, ``issued_access_tokens``,
``reuse_detections``, ...). docs/mock-providers.md describes them all.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from authlib.oauth2.rfc6749 import OAuth2Request

from mock_providers.clients import TOKEN_AUTH_METHODS, PreRegisteredClient
from mock_providers.config import ClientSpec
from mock_providers.oauth.pkce import RequiredS256CodeChallenge
from mock_providers.oauth.server import (
    IssuingProvider,
    ProviderAccessToken,
    ProviderAuthorizationServer,
    ProviderCode,
    ProviderCodeGrant,
    ProviderRefreshGrant,
    ProviderRevocationEndpoint,
)
from mock_providers.providers.mockhub.accounts import LOGIN_PATTERN, LOGIN_RULE, MockHubAccount
from mock_providers.providers.mockhub.api import GitHubApi
from mock_providers.records import TokenRequestRecord
from mock_providers.store import DurableIndex, DurableMap, MockStore, RecordCodec

__all__ = [
    "LOGIN_PATTERN",
    "LOGIN_RULE",
    "MockHub",
    "MockHubAccount",
    "MockHubClient",
    "MockHubToken",
    "TokenRequestRecord",
]

ACCESS_TOKEN_PREFIX = "mhat_"
REFRESH_TOKEN_PREFIX = "mhrt_"


class MockHubClient(PreRegisteredClient):
    """The one registered client. Redirect URIs must match exactly."""


@dataclass(kw_only=True)
class MockHubCode(ProviderCode):
    login: str


@dataclass(kw_only=True)
class MockHubToken(ProviderAccessToken):
    """One access token with (usually) its refresh token.

    ``grant_id`` names the authorization (one code exchange) the token descends
    from: refreshing keeps it, so reuse detection can revoke the whole family.
    ``refresh_expires_at`` is ``None`` when the refresh token does not expire.
    """

    refresh_token: str | None
    login: str
    grant_id: str = ""
    refresh_expires_at: float | None = None

    def refresh_token_expired(self) -> bool:
        return self.refresh_expires_at is not None and self.clock() >= self.refresh_expires_at


class MockHubCodeGrant(ProviderCodeGrant["MockHub"]):
    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        self.store.codes[code] = MockHubCode(**self.code_fields(code, request), login=request.user.login)

    def authenticate_user(self, authorization_code: MockHubCode) -> MockHubAccount:
        return MockHubAccount.for_login(authorization_code.login)

    def query_authorization_code(self, code: str, client: PreRegisteredClient) -> MockHubCode | None:
        record: MockHubCode | None = super().query_authorization_code(code, client)
        if record is None and code in self.store.used_codes:
            # RFC 6749 section 4.1.2: a code used twice is refused, and the tokens issued
            # from it SHOULD be revoked.
            self.store.revoke_family(self.store.used_codes[code])
        return record


class MockHubRefreshGrant(ProviderRefreshGrant["MockHub"]):
    """Refresh as a GitHub App's expiring user tokens do.

    With ``hub.rotate_refresh_tokens`` (the default) each use returns a new
    refresh token and retires the old one; presenting a retired one again is
    reuse: the answer is ``invalid_grant`` and (``hub.revoke_grant_on_reuse``,
    the default) every token of the grant is revoked.
    Without rotation the refresh token stays valid and is not sent again.
    """

    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> MockHubToken | None:
        retired = self.provider.used_refresh_tokens.get(refresh_token)
        if retired is not None:
            self.provider.detect_reuse(retired)
            return None
        record = self.provider.tokens_by_refresh.get(refresh_token)
        if record is None or record.refresh_token_expired():
            return None
        return record

    def authenticate_user(self, refresh_token: MockHubToken) -> MockHubAccount:
        return MockHubAccount.for_login(refresh_token.login)

    def issue_token(self, user: MockHubAccount, refresh_token: MockHubToken) -> dict[str, Any]:
        scope = self.request.payload.scope or refresh_token.get_scope()
        token: dict[str, Any] = self.generate_token(
            user=user, scope=scope, include_refresh_token=self.provider.rotate_refresh_tokens
        )
        return token

    def revoke_old_credential(self, refresh_token: MockHubToken) -> None:
        if refresh_token.refresh_token and self.provider.rotate_refresh_tokens:
            self.provider.tokens_by_refresh.pop(refresh_token.refresh_token, None)
            self.provider.used_refresh_tokens[refresh_token.refresh_token] = refresh_token


class MockHubRevocationEndpoint(ProviderRevocationEndpoint["MockHub"]):
    """RFC 7009. Revoking an access token revokes its refresh token too; revoking a refresh
    token revokes its whole grant."""

    CLIENT_AUTH_METHODS = TOKEN_AUTH_METHODS

    def query_token(self, token_string: str, token_type_hint: str | None) -> MockHubToken | None:
        by_access = self.provider.tokens.get(token_string)
        by_refresh = self.provider.tokens_by_refresh.get(token_string)
        if token_type_hint == "refresh_token":
            return by_refresh or by_access
        return by_access or by_refresh

    def revoke_token(self, token: MockHubToken, request: OAuth2Request) -> None:
        if request.form.get("token") == token.refresh_token:
            # RFC 7009 section 2.1: revoking a refresh token SHOULD invalidate every access
            # token of the same grant, also those issued before a rotation.
            self.provider.revoke_family(token.grant_id)
        else:
            self.provider.revoke(token)


class MockHubAuthorizationServer(ProviderAuthorizationServer):
    def __init__(self, hub: MockHub) -> None:
        super().__init__(hub)
        self.hub = hub
        self.register_opaque_tokens(ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX, lambda: hub.access_token_ttl)
        self.register_grant(MockHubCodeGrant, [RequiredS256CodeChallenge()])
        self.register_grant(MockHubRefreshGrant)
        self.register_endpoint(MockHubRevocationEndpoint)
        self.register_issuer_parameter(hub.response_issuer)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        # request.refresh_token is the record being refreshed (None for a code exchange).
        record = self.hub.store_token(
            token, request.client.get_client_id(), request.user.login, parent=request.refresh_token
        )
        if request.authorization_code is not None:
            self.hub.used_codes[request.authorization_code.code] = record.grant_id


class MockHub(IssuingProvider):
    """State, knobs and counters of one MockHub instance.

    Knobs (assign freely in tests):
      * ``iss_mode``: ``"correct"`` (default), ``"omit"`` or ``"wrong"`` -- the
        ``iss`` the authorization response carries (RFC 9207 mix-up tests);
        ``"wrong"`` sends ``wrong_issuer``.
      * ``access_token_ttl``: seconds; ``expires_in`` of tokens issued from now on.
      * ``rotate_refresh_tokens``: ``True`` (default) -- every refresh returns a
        new refresh token and retires the old one. ``False`` -- the refresh token
        stays valid and no new one is sent.
      * ``revoke_grant_on_reuse``: ``True`` (default) -- presenting a retired
        refresh token revokes every token of its grant (reuse detection);
        ``False`` -- it is merely refused. Either way: ``invalid_grant``.
      * ``refresh_token_lifetime``: seconds, or ``None`` (default: no expiry), for
        refresh tokens issued from now on; sent as ``refresh_token_expires_in``.
      * ``token_endpoint_mode`` / ``api_mode``: ``"ok"`` (default), ``"junk"``,
        ``"500"`` or ``"hang"`` for ``/mockhub/token`` / ``/mockhub/user``
        (see :mod:`mock_providers.faults`); ``hang_seconds`` bounds a hang.
      * ``clock``: the time source for expiry (replace to fast-forward).

    Counters: ``token_requests`` (every ``/mockhub/token`` request, in order),
    ``refresh_requests`` (those with ``grant_type=refresh_token``),
    ``issued_access_tokens``, ``issued_refresh_tokens``, ``revoked_tokens``,
    ``reuse_detections`` (retired refresh tokens presented again),
    ``user_requests`` (``/mockhub/user`` calls, authorized or not).
    """

    api: GitHubApi

    def __init__(
        self,
        issuer: str,
        client: ClientSpec,
        *,
        access_token_ttl: int = 28800,
        wrong_issuer: str | None = None,
        store: MockStore | None = None,
    ) -> None:
        super().__init__(
            issuer,
            MockHubClient.from_spec(client),
            access_token_ttl=access_token_ttl,
            wrong_issuer=wrong_issuer or issuer.rsplit("/", 1)[0] + "/evil-hub",
            realm="mockhub",
            store=store,
        )
        self.rotate_refresh_tokens = True
        self.revoke_grant_on_reuse = True
        self.refresh_token_lifetime: int | None = None

        self.user_requests = 0
        self.reuse_detections = 0

        # Durable (mock_providers.store): a restart keeps every code, token and grant family.
        store = self.mock_store
        self.codes = DurableMap(store, "mockhub/codes", RecordCodec(MockHubCode, "code"))
        tokens: DurableMap[MockHubToken] = DurableMap(
            store,
            "mockhub/tokens",
            RecordCodec(self._token, "access_token", secret_fields=("refresh_token",), skip=("clock",)),
        )
        self.tokens = tokens
        #: The record now holding each live refresh token.
        self.tokens_by_refresh = DurableIndex(store, "mockhub/by_refresh", tokens)
        #: Refresh tokens retired by rotation, with the record they belonged to.
        self.used_refresh_tokens = DurableIndex(store, "mockhub/retired_refresh", tokens)
        #: Exchanged authorization codes, with the grant they started (code reuse revokes it). In
        #: memory only: after a restart a used code is refused as unknown without revoking.
        self.used_codes: dict[str, str] = {}

        self.server = MockHubAuthorizationServer(self)
        #: GitHub's REST API, stood in for under MockHub's prefix (mock_providers/providers/mockhub/api.py).
        self.api = GitHubApi(self.clock_now)

    # -- knobs and test helpers ------------------------------------------------

    def account(self, login: str) -> MockHubAccount | None:
        """The account for ``login``; ``None`` if it is not a valid MockHub login (``LOGIN_RULE``)."""
        login = login.strip()
        return MockHubAccount.for_login(login) if LOGIN_PATTERN.match(login) else None

    def expire_refresh_tokens(self) -> None:
        """Make every refresh token issued so far expired (refreshing answers ``invalid_grant``)."""
        now = self.clock()
        for key, token in self.tokens.items():
            if token.refresh_token:
                token.refresh_expires_at = min(token.refresh_expires_at or now, now)
                self.tokens[key] = token

    def revoke_all_tokens(self) -> int:
        """As if every user revoked the app at MockHub; returns how many access tokens were newly revoked."""
        return self._revoke_where(lambda token: True)

    def revoke_grant(self, login: str) -> int:
        """As if ``login`` revoked the app: every token issued to that user stops working.

        Returns how many access tokens were newly revoked.
        """
        wanted = login.lower()
        return self._revoke_where(lambda token: token.login.lower() == wanted)

    @property
    def refresh_requests(self) -> int:
        """Requests to ``/mockhub/token`` with ``grant_type=refresh_token``."""
        return sum(1 for record in self.token_requests if record.grant_type == "refresh_token")

    def reset_counters(self) -> None:
        self.token_requests.clear()
        self.user_requests = 0
        self.reuse_detections = 0

    # -- refresh token reuse ---------------------------------------------------

    def detect_reuse(self, retired: MockHubToken) -> None:
        """A retired refresh token came back: count it; revoke its whole grant (per knob)."""
        self.reuse_detections += 1
        if self.revoke_grant_on_reuse:
            grant_id = retired.grant_id
            self._revoke_where(lambda token: token.grant_id == grant_id)

    def revoke_family(self, grant_id: str) -> int:
        """Revoke every token descended from one authorization (code exchange)."""
        return self._revoke_where(lambda token: token.grant_id == grant_id)

    def _revoke_where(self, predicate: Callable[[MockHubToken], bool]) -> int:
        live = {token.access_token for token in self.tokens.values() if not token.revoked}
        for token in [token for token in self.tokens.values() if predicate(token)]:
            self.revoke(token)  # may also revoke the token now holding its refresh token
        return sum(1 for access_token in live if self.tokens[access_token].revoked)

    # -- storage ---------------------------------------------------------------

    def store_token(
        self, token: dict[str, Any], client_id: str, login: str, *, parent: MockHubToken | None = None
    ) -> MockHubToken:
        """Record a token response; ``parent`` is the record a refresh started from.

        A new refresh token in ``token`` gets ``refresh_token_lifetime`` (and the
        response ``refresh_token_expires_in``); without one, the parent's refresh
        token carries over to the new record with its expiry.
        """
        now = self.clock()
        refresh_token = token.get("refresh_token")
        refresh_expires_at = None
        if refresh_token and self.refresh_token_lifetime is not None:
            refresh_expires_at = now + self.refresh_token_lifetime
            token["refresh_token_expires_in"] = self.refresh_token_lifetime
        if not refresh_token and parent is not None:
            refresh_token, refresh_expires_at = parent.refresh_token, parent.refresh_expires_at
        record = MockHubToken(
            access_token=token["access_token"],
            refresh_token=refresh_token,
            client_id=client_id,
            scope=token.get("scope", ""),
            login=login,
            issued_at=now,
            expires_at=now + self.access_token_ttl,
            clock=self.clock_now,
            grant_id=parent.grant_id if parent is not None else secrets.token_hex(8),
            refresh_expires_at=refresh_expires_at,
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

    def _token(self, **fields: Any) -> MockHubToken:
        """A token record read back from the store, on this hub's clock."""
        return MockHubToken(**fields, clock=self.clock_now)

    def revoke(self, token: MockHubToken) -> None:
        """Revoke an access token and its refresh token (and whichever access token holds it now)."""
        token.revoked = True
        self.tokens[token.access_token] = token
        self.revoked_tokens.add(token.access_token)
        if token.refresh_token:
            holder = self.tokens_by_refresh.pop(token.refresh_token, None)
            self.revoked_tokens.add(token.refresh_token)
            if holder is not None and not holder.revoked:
                self.revoke(holder)
