"""MockGoogle: a Google-like OpenID Connect provider for development and tests.

Built from authlib's server classes: authorization code grant with mandatory
S256 PKCE and client authentication, OpenID Connect ID tokens signed RS256
with a key kept in its store (``sub`` = a stable numeric id, ``email``), userinfo,
RFC 9207 ``iss`` in authorization responses. What makes it Google-like:

* refresh tokens only with ``access_type=offline``, and only on the *first*
  consent of a user to a client; later consents omit the refresh token unless
  the request has ``prompt=consent`` (and then the old refresh token stays
  valid too);
* refresh tokens do not rotate and do not expire; a refresh returns a new
  access token (and a new ID token for an ``openid`` grant), no refresh token;
* ``/revoke`` needs no client authentication, takes either token, and revokes
  the user's whole grant to that client (the next offline consent again
  returns a refresh token); an unknown token is ``400 invalid_token``.

Access tokens (``ya29.mockgoogle-...``) and refresh tokens
(``1//mockgoogle-...``) are opaque random strings so tests can scan logs and
storage for leaks. :class:`MockGoogle` (``app.state.mockgoogle``) holds the
state, knobs and counters; docs/mock-providers.md describes them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import MutableSet
from dataclasses import dataclass
from typing import Any

from authlib.oauth2.rfc6749 import OAuth2Request
from authlib.oauth2.rfc6749.util import scope_to_list
from authlib.oidc.core import AuthorizationCodeMixin
from joserfc.jwk import KeySet, RSAKey

from mock_providers.clients import PreRegisteredClient
from mock_providers.config import ClientSpec
from mock_providers.oauth.pkce import RequiredS256CodeChallenge
from mock_providers.oauth.server import (
    GrantedToClient,
    IssuingProvider,
    ProviderAccessToken,
    ProviderAuthorizationServer,
    ProviderCode,
    ProviderCodeGrant,
    ProviderRefreshGrant,
    ProviderRevocationEndpoint,
    SignedIDTokens,
)
from mock_providers.providers.mockgoogle.api import GoogleApi
from mock_providers.store import DurableMap, DurableSet, MockStore, RecordCodec

ACCESS_TOKEN_PREFIX = "ya29.mockgoogle-"
REFRESH_TOKEN_PREFIX = "1//mockgoogle-"
DEFAULT_ACCESS_TOKEN_TTL = 3599
ID_TOKEN_LIFETIME = 3600
ALG = "RS256"
_SIGNING_KEY = "mockgoogle/signing_key"
EMAIL_DOMAIN = "mockgoogle.test"
LOGIN_RULE = (
    f"A MockGoogle account is an email address, or a user name (letters, digits, . _ + -) "
    f"that becomes <name>@{EMAIL_DOMAIN}."
)
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._+-]{0,62})"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_BARE_LOGIN = re.compile(rf"^{_NAME}$")
_EMAIL = re.compile(rf"^{_NAME}@{_LABEL}(?:\.{_LABEL})+$")
# Scopes that release the email address / the name (short and URL forms).
_EMAIL_SCOPES = frozenset({"email", "https://www.googleapis.com/auth/userinfo.email"})
_PROFILE_SCOPES = frozenset({"profile", "https://www.googleapis.com/auth/userinfo.profile"})


@dataclass(frozen=True)
class MockGoogleAccount:
    """A MockGoogle user. ``sub`` is derived from the email, so it is stable everywhere."""

    sub: str
    email: str
    name: str

    @classmethod
    def for_login(cls, login: str) -> MockGoogleAccount | None:
        """The account for an email address or bare user name; ``None`` if it is neither."""
        login = login.strip()
        if _BARE_LOGIN.match(login):
            email = f"{login}@{EMAIL_DOMAIN}"
        elif _EMAIL.match(login):
            email = login
        else:
            return None
        email = email.lower()
        digest = hashlib.sha256(email.encode("utf-8")).digest()
        sub = str(10**20 + int.from_bytes(digest[:8], "big") % (9 * 10**20))  # 21 digits, like Google's
        local = email.split("@", 1)[0]
        name = " ".join(part.capitalize() for part in re.split(r"[._+-]+", local) if part) or local
        return cls(sub=sub, email=email, name=name)

    def get_user_id(self) -> str:
        return self.sub

    def claims(self, scope: str) -> dict[str, Any]:
        """ID token / userinfo claims released for ``scope``."""
        scopes = set(scope_to_list(scope) or [])
        claims: dict[str, Any] = {"sub": self.sub}
        if scopes & _EMAIL_SCOPES:
            claims.update(email=self.email, email_verified=True)
        if scopes & _PROFILE_SCOPES:
            claims["name"] = self.name
        return claims


@dataclass(kw_only=True)
class MockGoogleCode(ProviderCode, AuthorizationCodeMixin):  # type: ignore[misc]  # authlib is untyped
    email: str
    nonce: str | None
    auth_time: int
    #: Whether exchanging this code returns a refresh token (decided at consent).
    offline: bool

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time


@dataclass(kw_only=True)
class MockGoogleAccessToken(ProviderAccessToken):
    email: str
    sub: str


@dataclass(kw_only=True)
class MockGoogleRefreshToken(GrantedToClient):
    """A long-lived refresh token: valid until its grant is revoked."""

    refresh_token: str
    email: str
    sub: str
    revoked: bool = False


class MockGoogleCodeGrant(ProviderCodeGrant["MockGoogle"]):
    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        account: MockGoogleAccount = request.user
        self.store.codes[code] = MockGoogleCode(
            **self.code_fields(code, request),
            email=account.email,
            nonce=data.get("nonce"),
            auth_time=int(self.store.clock()),
            offline=self.store.consent_offline(
                request.client.get_client_id(), account, data.get("access_type"), data.get("prompt")
            ),
        )

    def authenticate_user(self, authorization_code: MockGoogleCode) -> MockGoogleAccount | None:
        return self.store.account(authorization_code.email)

    def query_authorization_code(self, code: str, client: PreRegisteredClient) -> MockGoogleCode | None:
        record: MockGoogleCode | None = super().query_authorization_code(code, client)
        if record is None and code in self.store.used_codes:
            # RFC 6749 section 4.1.2: a code used twice is refused, and the tokens issued
            # from it SHOULD be revoked.
            self.store.revoke_pair(*self.store.used_codes[code])
        return record

    def generate_token(
        self,
        user: Any = None,
        scope: str | None = None,
        grant_type: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        code: MockGoogleCode = self.request.authorization_code
        token: dict[str, Any] = super().generate_token(
            user=user,
            scope=scope,
            grant_type=grant_type,
            expires_in=expires_in,
            include_refresh_token=include_refresh_token and code.offline,
        )
        return token


class MockGoogleRefreshGrant(ProviderRefreshGrant["MockGoogle"]):
    """Google's refresh: the refresh token stays valid and is not sent again."""

    INCLUDE_NEW_REFRESH_TOKEN = False

    def authenticate_refresh_token(self, refresh_token: str) -> MockGoogleRefreshToken | None:
        record = self.provider.refresh_tokens.get(refresh_token)
        return None if record is None or record.revoked else record

    def authenticate_user(self, refresh_token: MockGoogleRefreshToken) -> MockGoogleAccount | None:
        return self.provider.account(refresh_token.email)

    def revoke_old_credential(self, refresh_token: MockGoogleRefreshToken) -> None:
        """Nothing to retire: Google's refresh tokens do not rotate."""


class MockGoogleOpenIDCode(SignedIDTokens):
    """ID tokens for ``openid`` grants: on the code exchange and on every refresh."""

    def __init__(self, google: MockGoogle) -> None:
        super().__init__(google, google.private_key_set, google.kid, ALG)
        self._google = google

    def get_client_claims(self, client: PreRegisteredClient) -> dict[str, Any]:
        now = int(self._google.clock())
        client_id = client.get_client_id()
        return {
            "iss": self._google.issuer,
            "aud": client_id,
            "azp": client_id,
            "iat": now,
            "exp": now + ID_TOKEN_LIFETIME,
        }

    def generate_user_info(self, user: MockGoogleAccount, scope: str) -> dict[str, Any]:
        return user.claims(scope)

    def process_token(self, grant: Any, response: Any) -> dict[str, Any]:
        token: dict[str, Any] = super().process_token(grant, response)
        if "id_token" in token:
            self._google.issued_id_tokens.append(token["id_token"])
        return token


class MockGoogleRevocationEndpoint(ProviderRevocationEndpoint["MockGoogle"]):
    """Google's ``/revoke``: no client authentication; the token may be in the query.

    Either token revokes the user's whole grant to the client. ``200 {}`` on
    success, ``400 invalid_token`` for an unknown or already revoked token.
    """

    def create_endpoint_response(self, request: OAuth2Request) -> tuple[int, dict[str, str], list[Any]]:
        headers = [("Content-Type", "application/json"), ("Cache-Control", "no-store")]
        token_string = request.form.get("token") or request.args.get("token")
        if not token_string:
            return (
                400,
                {"error": "invalid_request", "error_description": "Missing required parameter: token"},
                headers,
            )
        token = self.query_token(token_string, request.form.get("token_type_hint"))
        if token is None or token.revoked:
            return 400, {"error": "invalid_token", "error_description": "Token expired or revoked"}, headers
        self.revoke_token(token, request)
        return 200, {}, headers

    def query_token(
        self, token_string: str, token_type_hint: str | None
    ) -> MockGoogleAccessToken | MockGoogleRefreshToken | None:
        return self.provider.tokens.get(token_string) or self.provider.refresh_tokens.get(token_string)

    def revoke_token(
        self, token: MockGoogleAccessToken | MockGoogleRefreshToken, request: OAuth2Request
    ) -> None:
        self.provider.revoke_pair(token.client_id, token.sub)


class MockGoogleAuthorizationServer(ProviderAuthorizationServer):
    def __init__(self, google: MockGoogle) -> None:
        super().__init__(google)
        self.google = google
        self.register_opaque_tokens(
            ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX, lambda: google.access_token_ttl
        )
        openid = MockGoogleOpenIDCode(google)
        self.register_grant(MockGoogleCodeGrant, [RequiredS256CodeChallenge(), openid])
        self.register_grant(MockGoogleRefreshGrant, [openid])
        self.register_endpoint(MockGoogleRevocationEndpoint)
        self.register_issuer_parameter(google.response_issuer)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        self.google.store_token(token, request.client.get_client_id(), request.user)
        if request.authorization_code is not None:
            pair = (request.client.get_client_id(), request.user.sub)
            self.google.used_codes[request.authorization_code.code] = pair


class MockGoogle(IssuingProvider):
    """State, knobs and counters of one MockGoogle instance.

    Knobs (assign freely in tests):
      * ``iss_mode``: ``"correct"`` (default), ``"omit"`` or ``"wrong"`` -- the
        ``iss`` of authorization responses, as for MockHub.
      * ``access_token_ttl``: seconds (default 3599); for tokens issued from now on.
      * ``token_endpoint_mode`` / ``api_mode``: ``"ok"`` (default), ``"junk"``,
        ``"500"`` or ``"hang"`` for ``/mockgoogle/token`` / ``/mockgoogle/userinfo``;
        ``hang_seconds`` bounds a hang.
      * ``clock``: the time source for expiry and ID token ``iat``/``exp``.

    Counters: ``token_requests``, ``refresh_requests``, ``issued_access_tokens``,
    ``issued_refresh_tokens``, ``issued_id_tokens`` (in order), ``revoked_tokens``,
    ``userinfo_requests``. ``offline_consents`` holds the ``(client_id, sub)``
    pairs that were given a refresh token (the next consent omits it).
    """

    api: GoogleApi

    def __init__(
        self,
        issuer: str,
        client: ClientSpec,
        *,
        access_token_ttl: int = DEFAULT_ACCESS_TOKEN_TTL,
        wrong_issuer: str | None = None,
        store: MockStore | None = None,
    ) -> None:
        super().__init__(
            issuer,
            PreRegisteredClient.from_spec(client),
            access_token_ttl=access_token_ttl,
            wrong_issuer=wrong_issuer or issuer.rsplit("/", 1)[0] + "/evil-google",
            realm="mockgoogle",
            store=store,
        )

        self.issued_id_tokens: list[str] = []
        self.userinfo_requests = 0

        # Durable (mock_providers.store): a restart keeps codes, tokens, consents and the key.
        store = self.mock_store
        self.codes = DurableMap(store, "mockgoogle/codes", RecordCodec(MockGoogleCode, "code"))
        self.tokens = DurableMap(
            store, "mockgoogle/tokens", RecordCodec(self._access_token, "access_token", skip=("clock",))
        )
        self.refresh_tokens: DurableMap[MockGoogleRefreshToken] = DurableMap(
            store, "mockgoogle/refresh_tokens", RecordCodec(MockGoogleRefreshToken, "refresh_token")
        )
        self.offline_consents: MutableSet[tuple[str, ...]] = DurableSet(store, "mockgoogle/offline_consents")
        #: Exchanged authorization codes, with the (client_id, sub) grant they went to (code reuse
        #: revokes it). In memory only: after a restart a used code is refused without revoking.
        self.used_codes: dict[str, tuple[str, str]] = {}

        self._key = self._signing_key(store)
        self.server = MockGoogleAuthorizationServer(self)
        #: Google's APIs (Drive), stood in for under MockGoogle's prefix (mockgoogle/api.py).
        self.api = GoogleApi(EMAIL_DOMAIN)

    # -- keys ------------------------------------------------------------------

    @staticmethod
    def _signing_key(store: MockStore) -> RSAKey:
        """The store's RSA key, made on first use: ID tokens verify across restarts."""
        stored = store.named(_SIGNING_KEY)
        if stored is not None:
            return RSAKey.import_key(json.loads(stored))
        key = RSAKey.generate_key(2048, parameters={"alg": ALG, "use": "sig"}, private=True, auto_kid=True)
        store.set_named(_SIGNING_KEY, json.dumps(key.as_dict(private=True)))
        return key

    @property
    def kid(self) -> str:
        return str(self._key.kid)

    def private_key_set(self) -> KeySet:
        return KeySet([self._key])

    def jwks(self) -> dict[str, Any]:
        """The public signing key, as served at ``/mockgoogle/jwks.json``."""
        public = self._key.as_dict(private=False, kid=self.kid, alg=ALG, use="sig")
        return {"keys": [dict(public)]}

    # -- knobs and test helpers ------------------------------------------------

    def account(self, login: str) -> MockGoogleAccount | None:
        return MockGoogleAccount.for_login(login)

    def revoke_grant(self, login: str) -> int:
        """As if ``login`` removed the app's access in their Google account.

        Revokes every token of that user; their next offline consent returns a
        refresh token again. Returns how many tokens were newly revoked.
        """
        account = self.account(login)
        if account is None:
            return 0
        return self.revoke_pair(None, account.sub)

    def revoke_all_tokens(self) -> int:
        """As if every user removed the app's access."""
        revoked = sum(self.revoke_pair(client_id, sub) for client_id, sub in self._pairs())
        self.offline_consents.clear()
        return revoked

    @property
    def refresh_requests(self) -> int:
        """Requests to ``/mockgoogle/token`` with ``grant_type=refresh_token``."""
        return sum(1 for record in self.token_requests if record.grant_type == "refresh_token")

    def reset_counters(self) -> None:
        self.token_requests.clear()
        self.userinfo_requests = 0

    # -- consent, storage, revocation -------------------------------------------

    def consent_offline(
        self, client_id: str, account: MockGoogleAccount, access_type: str | None, prompt: str | None
    ) -> bool:
        """Whether this consent yields a refresh token; records a first offline consent."""
        if access_type != "offline":
            return False
        pair = (client_id, account.sub)
        first = pair not in self.offline_consents
        self.offline_consents.add(pair)
        return first or "consent" in (prompt or "").split()

    def store_token(self, token: dict[str, Any], client_id: str, account: MockGoogleAccount) -> None:
        now = self.clock()
        scope = token.get("scope", "")
        access = MockGoogleAccessToken(
            access_token=token["access_token"],
            client_id=client_id,
            scope=scope,
            email=account.email,
            sub=account.sub,
            issued_at=now,
            expires_at=now + self.access_token_ttl,
            clock=self.clock_now,
        )
        self.tokens[access.access_token] = access
        self.issued_access_tokens.add(access.access_token)
        refresh_token = token.get("refresh_token")
        if refresh_token:
            self.refresh_tokens[refresh_token] = MockGoogleRefreshToken(
                refresh_token=refresh_token,
                client_id=client_id,
                scope=scope,
                email=account.email,
                sub=account.sub,
            )
            self.issued_refresh_tokens.add(refresh_token)

    def clock_now(self) -> float:
        """Indirection so replacing ``clock`` affects tokens already issued."""
        return self.clock()

    def _access_token(self, **fields: Any) -> MockGoogleAccessToken:
        """An access token record read back from the store, on this provider's clock."""
        return MockGoogleAccessToken(**fields, clock=self.clock_now)

    def revoke_pair(self, client_id: str | None, sub: str) -> int:
        """Revoke every token of user ``sub`` at ``client_id`` (``None``: at any client)."""
        revoked = 0
        records: list[MockGoogleAccessToken | MockGoogleRefreshToken] = [
            *self.tokens.values(),
            *self.refresh_tokens.values(),
        ]
        for record in records:
            if record.sub == sub and client_id in (None, record.client_id) and not record.revoked:
                record.revoked = True
                revoked += 1
                if isinstance(record, MockGoogleAccessToken):
                    self.tokens[record.access_token] = record
                    self.revoked_tokens.add(record.access_token)
                else:
                    self.refresh_tokens[record.refresh_token] = record
                    self.revoked_tokens.add(record.refresh_token)
        for pair in [(c, s) for c, s in self.offline_consents if s == sub and client_id in (None, c)]:
            self.offline_consents.discard(pair)
        return revoked

    def _pairs(self) -> set[tuple[str, str]]:
        return {(t.client_id, t.sub) for t in self.tokens.values()} | {
            (t.client_id, t.sub) for t in self.refresh_tokens.values()
        }
