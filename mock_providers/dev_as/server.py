"""The development MCP authorization server, assembled from authlib's server classes.

Authorization code grant with mandatory S256 PKCE, RFC 8707 ``resource``
(which becomes the access token's ``aud``), OpenID Connect ID tokens, rotating
refresh tokens, RFC 7591 dynamic client registration, RFC 9068 JWT access
tokens, RFC 9207 ``iss`` in authorization responses and OIDC userinfo. Registered
clients, codes and refresh tokens live in a :class:`~mock_providers.store.MockStore`
(durable under the data dir when the app is built with one); the signing key is in
``dev-as.json`` (see :mod:`mock_providers.dev_as.keys`). Access tokens are self-contained JWTs.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from authlib.consts import default_json_headers
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import OAuth2Request, ResourceProtector
from authlib.oauth2.rfc6749.grants import RefreshTokenGrant
from authlib.oauth2.rfc7591 import (
    ClientRegistrationEndpoint,
    InvalidClientMetadataError,
    InvalidRedirectURIError,
)
from authlib.oauth2.rfc9068 import JWTBearerTokenValidator
from authlib.oidc.core import UserInfoEndpoint
from joserfc.jwk import KeySet

from mock_providers.clients import TOKEN_AUTH_METHODS, PreRegisteredClient
from mock_providers.config import ClientSpec, MockProvidersConfig
from mock_providers.dev_as.keys import DevKeys
from mock_providers.dev_as.models import PUBLIC, DevAuthorizationCode, DevClient, DevRefreshToken
from mock_providers.dev_as.tokens import DevAccessTokenGenerator, DevUser
from mock_providers.oauth.issuer_parameter import StarletteIssuerParameter
from mock_providers.oauth.pkce import RequiredS256CodeChallenge
from mock_providers.oauth.server import ProviderCodeGrant, SignedIDTokens
from mock_providers.oauth.starlette_adapter import StarletteAuthorizationServer
from mock_providers.store import DurableMap, MockStore, RecordCodec
from service.errors import BlankClientName
from service.flow.security_checks import require_visible_client_name


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]  # authlib is untyped
    """RFC 8707: the requested resource is invalid or not allowed."""

    error = "invalid_target"


def _requested_resources(request: OAuth2Request) -> list[str]:
    return list(request.payload.datalist.get("resource", []))


def _check_resource_uri(resource: str) -> None:
    parts = urlsplit(resource)
    if not parts.scheme or not parts.netloc or parts.fragment or "#" in resource:
        raise InvalidTargetError("'resource' must be an absolute URI without a fragment.")


class ResourceIndicator:
    """RFC 8707 for the code grant: one ``resource`` per authorization request.

    The value is stored with the code (see ``save_authorization_code``); a
    ``resource`` at the token endpoint must repeat it.
    """

    def __call__(self, grant: Any) -> None:
        grant.register_hook("after_validate_authorization_request_payload", self.check_authorization)
        grant.register_hook("after_validate_token_request", self.check_token)

    def check_authorization(self, grant: Any, _result: Any) -> None:
        resources = _requested_resources(grant.request)
        if len(resources) > 1:
            raise InvalidTargetError("Only one 'resource' per request is supported.")
        for resource in resources:
            _check_resource_uri(resource)

    def check_token(self, grant: Any, _result: Any) -> None:
        resources = _requested_resources(grant.request)
        if resources and resources != [grant.request.authorization_code.audience]:
            raise InvalidTargetError("'resource' differs from the authorization request.")


class DevAuthorizationCodeGrant(ProviderCodeGrant["DevAuthorizationServer"]):
    @property
    def store(self) -> DevAuthorizationServer:
        server: DevAuthorizationServer = self.server
        return server

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        user: DevUser = request.user
        data = request.payload.data
        self.store.codes[code] = DevAuthorizationCode(
            **self.code_fields(code, request),
            username=user.username,
            auth_time=user.auth_time,
            audience=data.get("resource") or self.store.keys.audience,
            nonce=data.get("nonce"),
        )

    def query_authorization_code(self, code: str, client: PreRegisteredClient) -> DevAuthorizationCode | None:
        record: DevAuthorizationCode | None = super().query_authorization_code(code, client)
        if record is None and code in self.store.used_codes:
            # RFC 6749 section 4.1.2: a code used twice is refused, and the tokens issued
            # from it SHOULD be revoked.
            self.store.revoke_grant(self.store.used_codes[code])
        return record

    def authenticate_user(self, authorization_code: DevAuthorizationCode) -> DevUser:
        return DevUser(
            username=authorization_code.username,
            auth_time=authorization_code.auth_time,
            audience=authorization_code.audience,
        )


class DevRefreshTokenGrant(RefreshTokenGrant):  # type: ignore[misc]  # authlib is untyped
    """Refresh with rotation: each use returns a new refresh token and retires the old."""

    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True

    def validate_token_request(self) -> None:
        super().validate_token_request()
        resources = _requested_resources(self.request)
        if resources and resources != [self.request.refresh_token.audience]:
            raise InvalidTargetError("'resource' differs from the original grant.")

    def authenticate_refresh_token(self, refresh_token: str) -> DevRefreshToken | None:
        server: DevAuthorizationServer = self.server
        retired_grant = server.retired_refresh_tokens.get(refresh_token)
        if retired_grant is not None:
            # OAuth 2.1 section 4.3.1 / RFC 9700 section 4.14.2: a rotated-out refresh token
            # came back, so two parties hold the grant; revoke its live refresh token.
            server.revoke_grant(retired_grant)
            return None
        return server.refresh_tokens.get(refresh_token)

    def authenticate_user(self, refresh_token: DevRefreshToken) -> DevUser:
        return DevUser(
            username=refresh_token.username,
            auth_time=refresh_token.auth_time,
            audience=refresh_token.audience,
        )

    def revoke_old_credential(self, refresh_token: DevRefreshToken) -> None:
        server: DevAuthorizationServer = self.server
        server.refresh_tokens.pop(refresh_token.refresh_token, None)
        server.retired_refresh_tokens[refresh_token.refresh_token] = refresh_token.grant_id


class DevOpenIDCode(SignedIDTokens):
    """OIDC for the code grant: an ID token when the scope contains ``openid``."""

    def __init__(self, server: DevAuthorizationServer) -> None:
        super().__init__(server, server.keys.private_key_set, server.keys.kid, server.keys.alg)
        self._server = server

    def get_client_claims(self, client: DevClient) -> dict[str, Any]:
        return {"iss": self._server.issuer, "aud": client.get_client_id()}

    def generate_user_info(self, user: DevUser, scope: str) -> dict[str, Any]:
        return dev_user_claims(user.username, scope)


def dev_user_claims(username: str, scope: str) -> dict[str, Any]:
    """OIDC Core §5.4: `profile` adds the name, `email` the e-mail address. A development user
    is only a user name, so both are made from it (the e-mail under the reserved `.example`)."""
    scopes = scope.split()
    claims: dict[str, Any] = {"sub": username}
    if "profile" in scopes:
        claims["name"] = username
    if "email" in scopes:
        claims["email"] = f"{username}@dev-as.example"
    return claims


class DevClientRegistrationEndpoint(ClientRegistrationEndpoint):  # type: ignore[misc]  # authlib is untyped
    """RFC 7591 open registration (no initial access token), kept in the dev AS's store."""

    def authenticate_token(self, request: Any) -> str:
        return "open-registration"  # anyone may register a client

    def get_server_metadata(self) -> dict[str, Any]:
        server: DevAuthorizationServer = self.server
        return server.metadata()

    def extract_client_metadata(self, request: Any) -> dict[str, Any]:
        metadata: dict[str, Any] = super().extract_client_metadata(request)
        name = metadata.get("client_name")
        if name is not None:
            try:
                require_visible_client_name(str(name))
            except BlankClientName:
                raise InvalidClientMetadataError(
                    "'client_name' must show a visible letter and no blank or invisible characters."
                ) from None
        return metadata

    def generate_client_info(self, request: Any) -> dict[str, Any]:
        info: dict[str, Any] = super().generate_client_info(request)
        if request.payload.data.get("token_endpoint_auth_method") == PUBLIC:
            info.pop("client_secret", None)
            info.pop("client_secret_expires_at", None)
        return info

    def save_client(
        self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any
    ) -> DevClient:
        redirect_uris = client_metadata.get("redirect_uris") or []
        if not isinstance(redirect_uris, list) or not redirect_uris:
            raise InvalidRedirectURIError("'redirect_uris' is required.")
        client = DevClient(
            client_id=client_info["client_id"],
            client_secret=client_info.get("client_secret"),
            redirect_uris=tuple(str(uri) for uri in redirect_uris),
            grant_types=tuple(client_metadata.get("grant_types") or ("authorization_code", "refresh_token")),
            response_types=tuple(client_metadata.get("response_types") or ("code",)),
            client_name=client_metadata.get("client_name"),
            metadata=dict(client_metadata),
        )
        server: DevAuthorizationServer = self.server
        server.clients[client.client_id] = client
        return client


class DevAccessTokenValidator(JWTBearerTokenValidator):  # type: ignore[misc]  # authlib is untyped
    """Accepts the dev AS's own access tokens, whatever their audience."""

    def __init__(self, keys: DevKeys) -> None:
        super().__init__(issuer=keys.issuer, resource_server=None)
        self._key_set = keys.public_key_set()

    def get_jwks(self) -> KeySet:
        return self._key_set


class DevUserInfoEndpoint(UserInfoEndpoint):  # type: ignore[misc]  # authlib is untyped
    """OIDC userinfo: ``{"sub": ...}`` for an access token with the ``openid`` scope.

    authlib's ``__call__`` uses ``ResourceProtector.acquire_token``, which only
    exists in its Flask/Django integrations; this one validates explicitly.
    """

    def __init__(self, keys: DevKeys) -> None:
        protector = ResourceProtector()
        protector.register_token_validator(DevAccessTokenValidator(keys))
        super().__init__(resource_protector=protector)

    def __call__(self, request: OAuth2Request) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        claims = self.resource_protector.validate_request(["openid"], request)
        return 200, self.generate_user_info(claims["sub"], claims.get("scope", "")), default_json_headers

    def generate_user_info(self, user: str, scope: str) -> dict[str, Any]:
        return dev_user_claims(user, scope)


def _spec_client(spec: ClientSpec, name: str) -> DevClient:
    return DevClient(
        client_id=spec.client_id,
        client_secret=spec.client_secret,
        redirect_uris=tuple(spec.redirect_uris),
        client_name=name,
    )


class DevAuthorizationServer(StarletteAuthorizationServer):
    """authlib authorization server holding the dev AS's clients, codes and tokens."""

    def __init__(self, config: MockProvidersConfig, keys: DevKeys, store: MockStore | None = None) -> None:
        super().__init__()
        self.issuer = config.issuer
        self.keys = keys
        store = store or MockStore.in_memory()
        # Durable: an MCP client registered (RFC 7591) or holding a refresh token before a
        # restart keeps working. A client id is no secret; its secret is stored as a digest.
        self.clients: DurableMap[DevClient] = DurableMap(
            store, "devas/clients", RecordCodec(DevClient, None, secret_fields=("client_secret",))
        )
        self.codes: DurableMap[DevAuthorizationCode] = DurableMap(
            store, "devas/codes", RecordCodec(DevAuthorizationCode, "code")
        )
        self.refresh_tokens: DurableMap[DevRefreshToken] = DurableMap(
            store, "devas/refresh_tokens", RecordCodec(DevRefreshToken, "refresh_token")
        )
        # In memory only: after a restart a retired refresh token or a used code is refused as
        # unknown (invalid_grant) without revoking its grant.
        #: Refresh tokens retired by rotation, with their grant id (for reuse detection).
        self.retired_refresh_tokens: dict[str, str] = {}
        #: Exchanged authorization codes, with their grant id (code reuse revokes the grant).
        self.used_codes: dict[str, str] = {}
        self.clock: Callable[[], float] = time.time
        self.access_token_generator = DevAccessTokenGenerator(keys)
        self.issuer_parameter = StarletteIssuerParameter(lambda: self.issuer)

        login = _spec_client(config.login_client, "MCP server browser login")
        self.clients[login.client_id] = login

        self.register_token_generator("default", self.access_token_generator)
        self.register_grant(
            DevAuthorizationCodeGrant,
            [RequiredS256CodeChallenge(), DevOpenIDCode(self), ResourceIndicator()],
        )
        self.register_grant(DevRefreshTokenGrant)
        self.register_endpoint(DevClientRegistrationEndpoint)
        self.register_endpoint(DevUserInfoEndpoint(keys))
        self.register_extension(self.issuer_parameter)

    def query_client(self, client_id: str) -> DevClient | None:
        return self.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        refresh_token = token.get("refresh_token")
        if not refresh_token:
            return
        user: DevUser = request.user
        parent: DevRefreshToken | None = request.refresh_token  # None for a code exchange
        self.refresh_tokens[refresh_token] = DevRefreshToken(
            refresh_token=refresh_token,
            client_id=request.client.get_client_id(),
            scope=token.get("scope", ""),
            username=user.username,
            auth_time=user.auth_time,
            audience=user.audience or self.keys.audience,
            grant_id=parent.grant_id if parent is not None else secrets.token_hex(8),
        )
        if request.authorization_code is not None:
            self.used_codes[request.authorization_code.code] = self.refresh_tokens[refresh_token].grant_id

    def revoke_grant(self, grant_id: str) -> None:
        """Revoke the refresh tokens of one authorization (its access tokens are self-contained
        JWTs, which cannot be revoked before they expire)."""
        if not grant_id:  # no grant named (the field's default): never "every token"
            return
        for token in [t for t in self.refresh_tokens.values() if t.grant_id == grant_id]:
            del self.refresh_tokens[token.refresh_token]

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 metadata, also served as OpenID Connect discovery."""
        base = self.issuer
        return {
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "registration_endpoint": f"{base}/register",
            "jwks_uri": f"{base}/jwks.json",
            "userinfo_endpoint": f"{base}/userinfo",
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": list(TOKEN_AUTH_METHODS),
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [self.keys.alg],
            "claims_supported": ["iss", "sub", "aud", "iat", "exp", "auth_time", "nonce", "name", "email"],
            "prompt_values_supported": ["none", "login"],
        }
