"""What MockHub, MockGoogle and MockSlack (and, for codes and clients, the dev AS) share:
authlib's server classes bound to one provider.

Each provider is a :class:`MockProvider` (MockHub and MockGoogle, which have an issuer and a
bearer-token API, an :class:`IssuingProvider`) with its own records and knobs besides. These
bases are the parts that are the same for all of them: the common knobs and counters, the
authorization code record and its lookup (one pre-registered client, expiry by the provider's
clock), opaque bearer access tokens and their validator, ID-token signing, and the authorization
server that knows the one client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from authlib.common.security import generate_token
from authlib.oauth2.rfc6749 import InvalidRequestError, OAuth2Request, ResourceProtector, TokenMixin
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc6749.models import AuthorizationCodeMixin
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oidc.core import OpenIDCode
from joserfc.jwk import KeySet

from mock_providers.api.stand_in import StandInApi
from mock_providers.clients import TOKEN_AUTH_METHODS, PreRegisteredClient
from mock_providers.faults import (
    DEFAULT_DRIP_SECONDS,
    DEFAULT_HANG_SECONDS,
    DEFAULT_HUGE_BODY_BYTES,
    EndpointMode,
)
from mock_providers.oauth.issuer_parameter import StarletteIssuerParameter
from mock_providers.oauth.starlette_adapter import StarletteAuthorizationServer
from mock_providers.records import TokenRequestRecord
from mock_providers.store import MockStore

AUTHORIZATION_CODE_LIFETIME = 600
IssMode = Literal["correct", "omit", "wrong"]


class MockProvider:
    """State, knobs and counters every third-party mock has (docs/mock-providers.md).

    Knobs: ``token_endpoint_mode`` / ``api_mode`` (:mod:`mock_providers.faults`),
    ``hang_seconds``, ``huge_body_bytes``, ``drip_seconds``, ``clock`` (the time source for
    expiry; replace to fast-forward).
    Counters: ``token_requests``, ``issued_access_tokens``, ``revoked_tokens``.
    """

    #: Authorization codes by value; each provider's own :class:`ProviderCode` subclass.
    codes: MutableMapping[str, Any]
    server: ProviderAuthorizationServer
    #: The provider's API stand-in: the routes a test adds, the built-in surface, the rate limits.
    api: StandInApi

    def __init__(self, client: PreRegisteredClient, store: MockStore | None = None) -> None:
        self.client = client
        #: Where codes and tokens live (:mod:`mock_providers.store`); memory by default.
        self.mock_store = store or MockStore.in_memory()
        self.token_endpoint_mode: EndpointMode = "ok"
        self.api_mode: EndpointMode = "ok"
        self.hang_seconds = DEFAULT_HANG_SECONDS
        self.huge_body_bytes = DEFAULT_HUGE_BODY_BYTES
        self.drip_seconds = DEFAULT_DRIP_SECONDS
        self.clock: Callable[[], float] = time.time
        self.token_requests: list[TokenRequestRecord] = []
        self.issued_access_tokens: set[str] = set()
        self.revoked_tokens: set[str] = set()


class IssuingProvider(MockProvider):
    """A provider with an issuer of its own and expiring bearer access tokens (``tokens``) that
    its API checks (``protector``): MockHub and MockGoogle.

    Knobs: ``iss_mode``: ``"correct"`` (default), ``"omit"`` or ``"wrong"`` -- the ``iss`` the
    authorization response carries (RFC 9207 mix-up tests; ``"wrong"`` sends ``wrong_issuer``);
    ``access_token_ttl``: seconds, for tokens issued from now on.
    """

    tokens: MutableMapping[str, Any]

    def __init__(
        self,
        issuer: str,
        client: PreRegisteredClient,
        *,
        access_token_ttl: int,
        wrong_issuer: str,
        realm: str,
        store: MockStore | None = None,
    ) -> None:
        super().__init__(client, store)
        self.issuer = issuer
        self.iss_mode: IssMode = "correct"
        self.wrong_issuer = wrong_issuer
        self.access_token_ttl = access_token_ttl
        self.issued_refresh_tokens: set[str] = set()
        self.protector = ResourceProtector()
        self.protector.register_token_validator(ProviderTokenValidator(realm, self))

    def response_issuer(self) -> str | None:
        """The ``iss`` value for the next authorization response, per ``iss_mode``."""
        if self.iss_mode == "omit":
            return None
        if self.iss_mode == "wrong":
            return self.wrong_issuer
        return self.issuer

    def expire_access_tokens(self) -> None:
        """Make every access token issued so far expired (refresh tokens stay valid)."""
        now = self.clock()
        for key, token in self.tokens.items():
            token.expires_at = min(token.expires_at, now)
            self.tokens[key] = token  # kept: records read from the store are copies


class CodeStore(Protocol):
    """Where a code grant keeps its codes: a provider, or the dev AS's server."""

    @property
    def codes(self) -> MutableMapping[str, Any]: ...

    clock: Callable[[], float]


StoreT = TypeVar("StoreT", bound=CodeStore)
ProviderT = TypeVar("ProviderT", bound="MockProvider")


@dataclass(kw_only=True)
class ProviderCode(AuthorizationCodeMixin):  # type: ignore[misc]  # authlib is untyped
    """An authorization code as every provider records it; providers add who approved it."""

    code: str
    client_id: str
    redirect_uri: str | None
    scope: str
    code_challenge: str | None
    code_challenge_method: str | None
    expires_at: float

    def get_redirect_uri(self) -> str | None:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass(kw_only=True)
class GrantedToClient:
    """A token record: which client it was issued to, for what scope."""

    client_id: str
    scope: str

    def check_client(self, client: Any) -> bool:
        return bool(client.get_client_id() == self.client_id)

    def get_scope(self) -> str:
        return self.scope


@dataclass(kw_only=True)
class ProviderAccessToken(GrantedToClient, TokenMixin):  # type: ignore[misc]  # authlib is untyped
    """An opaque bearer access token; ``clock`` is the provider's, so tests can fast-forward."""

    access_token: str
    issued_at: float
    expires_at: float
    clock: Callable[[], float] = field(repr=False, default=time.time)
    revoked: bool = False

    def get_expires_in(self) -> int:
        return int(self.expires_at - self.issued_at)

    def is_expired(self) -> bool:
        return self.clock() >= self.expires_at

    def is_revoked(self) -> bool:
        return self.revoked


class ProviderCodeGrant(AuthorizationCodeGrant, Generic[StoreT]):  # type: ignore[misc]  # authlib is untyped
    """authlib's code grant over ``store.codes``: a code is for one client and expires."""

    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_AUTH_METHODS

    @property
    def store(self) -> StoreT:
        """The provider (``server.provider``) by default."""
        store: StoreT = self.server.provider
        return store

    def code_fields(self, code: str, request: OAuth2Request) -> dict[str, Any]:
        """The :class:`ProviderCode` fields of a code being issued for ``request``."""
        data = request.payload.data
        return {
            "code": code,
            "client_id": request.client.get_client_id(),
            "redirect_uri": data.get("redirect_uri"),
            "scope": request.scope or "",
            "code_challenge": data.get("code_challenge"),
            "code_challenge_method": data.get("code_challenge_method"),
            "expires_at": self.store.clock() + AUTHORIZATION_CODE_LIFETIME,
        }

    def query_authorization_code(self, code: str, client: PreRegisteredClient) -> Any:
        record = self.store.codes.get(code)
        if record is None or record.client_id != client.client_id:
            return None
        if record.expires_at <= self.store.clock():
            self.store.codes.pop(code, None)
            return None
        return record

    def delete_authorization_code(self, authorization_code: ProviderCode) -> None:
        self.store.codes.pop(authorization_code.code, None)


class ServesProvider(Generic[ProviderT]):
    """For authlib grants and endpoints: ``provider``, typed, is their server's provider."""

    server: Any

    @property
    def provider(self) -> ProviderT:
        provider: ProviderT = self.server.provider
        return provider


class ProviderRefreshGrant(ServesProvider[ProviderT], RefreshTokenGrant):  # type: ignore[misc]  # authlib is untyped
    """authlib's refresh grant with the providers' client authentication methods."""

    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_AUTH_METHODS


class ProviderRevocationEndpoint(ServesProvider[ProviderT], RevocationEndpoint):  # type: ignore[misc]  # authlib is untyped
    """authlib's RFC 7009 endpoint bound to the server's provider."""

    def check_params(self, request: OAuth2Request, client: Any) -> None:
        """RFC 7009 section 2.1: ``token_type_hint`` only speeds up the lookup (the server
        searches every token type anyway), so an unknown hint is ignored. authlib refuses it
        with a 401 ``unsupported_token_type``, an error section 2.2.1 keeps for token types the
        server cannot revoke."""
        if "token" not in request.form:
            raise InvalidRequestError("Missing 'token'.")


class SignedIDTokens(OpenIDCode):  # type: ignore[misc]  # authlib is untyped
    """OpenID Connect ID tokens for ``openid`` grants, signed with one RSA key (``kid`` in the
    header); a nonce counts as used while a code of the same client carries it."""

    def __init__(self, store: CodeStore, key_set: Callable[[], KeySet], kid: str, alg: str) -> None:
        super().__init__(require_nonce=False)
        self._store = store
        self._key_set = key_set
        self._kid = kid
        self._alg = alg

    def exists_nonce(self, nonce: str, request: OAuth2Request) -> bool:
        client_id = request.payload.client_id
        return any(c.nonce == nonce and c.client_id == client_id for c in self._store.codes.values())

    def resolve_client_private_key(self, client: Any) -> KeySet:
        return self._key_set()

    def get_client_algorithm(self, client: Any) -> str:
        return self._alg

    def get_encode_header(self, client: Any) -> dict[str, str]:
        return {"alg": self._alg, "typ": "JWT", "kid": self._kid}


class ProviderTokenValidator(BearerTokenValidator):  # type: ignore[misc]  # authlib is untyped
    """RFC 6750 bearer tokens looked up in the provider's ``tokens``."""

    def __init__(self, realm: str, provider: IssuingProvider) -> None:
        super().__init__(realm=realm)
        self._provider = provider

    def authenticate_token(self, token_string: str) -> ProviderAccessToken | None:
        token: ProviderAccessToken | None = self._provider.tokens.get(token_string)
        return token


class ProviderAuthorizationServer(StarletteAuthorizationServer):
    """authlib's authorization server for a provider with one pre-registered client."""

    def __init__(self, provider: MockProvider) -> None:
        super().__init__()
        self.provider = provider

    def query_client(self, client_id: str) -> PreRegisteredClient | None:
        client = self.provider.client
        return client if client.client_id == client_id else None

    def register_opaque_tokens(
        self, access_prefix: str, refresh_prefix: str, expires_in: Callable[[], int]
    ) -> None:
        """Random access and refresh tokens with recognisable prefixes (tests scan for leaks)."""
        self.register_token_generator(
            "default",
            BearerTokenGenerator(
                access_token_generator=lambda **_: access_prefix + str(generate_token(40)),
                refresh_token_generator=lambda **_: refresh_prefix + str(generate_token(40)),
                expires_generator=lambda client, grant_type: expires_in(),
            ),
        )

    def register_issuer_parameter(self, response_issuer: Callable[[], str | None]) -> None:
        """RFC 9207 ``iss`` in authorization responses, as ``response_issuer`` says."""
        self.issuer_parameter = StarletteIssuerParameter(response_issuer)
        self.register_extension(self.issuer_parameter)
