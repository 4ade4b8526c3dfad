"""The stand-in downstream's authorization server, in memory, behind the MCP SDK's own routes.

The SDK (`mcp.server.auth`) serves the protocol: RFC 8414 metadata, `/authorize` with PKCE S256,
`/token` (code and refresh), RFC 7591 `/register`, RFC 7009 `/revoke`, and checks the bearer token
of each MCP request. This class is the storage behind it and the parts the SDK leaves to an
authorization server: who the user is (a consent page, `/consent`), Client ID Metadata Documents
(an https `client_id` is fetched and checked), the RFC 9207 `iss` on the way back, the resource a
token is for (RFC 8707), refresh-token rotation.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

CODE_LIFETIME = 300
ACCESS_TOKEN_LIFETIME = 3600
IssMode = Literal["correct", "omit", "wrong"]
# Fetches a Client ID Metadata Document: the JSON object at the URL, or None.
FetchDocument = Callable[[str], Awaitable[dict[str, Any] | None]]


@dataclass
class PendingAuthorization:
    """An authorization request waiting for the user on the consent page."""

    client_id: str
    params: AuthorizationParams


@dataclass
class StandInAuthorization:
    """Knobs: `iss_mode` (the `iss` sent back: RFC 9207 tests), `audience` (None: tokens for the
    resource asked for; a string: tokens for that resource instead: a token for another audience),
    `access_token_lifetime`. Records: `issued_access_tokens`, `registrations`, `token_requests`."""

    issuer: str
    resource: str
    fetch_document: FetchDocument
    scopes: tuple[str, ...] = ("read",)
    iss_mode: IssMode = "correct"
    audience: str | None = None
    access_token_lifetime: int = ACCESS_TOKEN_LIFETIME
    clock: Callable[[], float] = time.time
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    pending: dict[str, PendingAuthorization] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access_tokens: dict[str, AccessToken] = field(default_factory=dict)
    refresh_tokens: dict[str, RefreshToken] = field(default_factory=dict)
    issued_access_tokens: list[str] = field(default_factory=list)
    registrations: list[OAuthClientInformationFull] = field(default_factory=list)
    token_requests: list[dict[str, Any]] = field(default_factory=list)

    # ---- clients ------------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id in self.clients:
            return self.clients[client_id]
        if urlsplit(client_id).scheme == "https":
            return await self._client_from_document(client_id)
        return None

    async def _client_from_document(self, url: str) -> OAuthClientInformationFull | None:
        """draft-ietf-oauth-client-id-metadata-document-00 §4: the document's `client_id` must be
        its own URL, exactly; its redirect URIs are the only ones accepted."""
        document = await self.fetch_document(url)
        if not isinstance(document, dict) or document.get("client_id") != url:
            return None
        try:
            return OAuthClientInformationFull.model_validate(
                {**document, "token_endpoint_auth_method": "none", "client_secret": None}
            )
        except ValidationError:
            return None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        self.registrations.append(client_info)

    # ---- authorization --------------------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        """The SDK checked the client, redirect URI and PKCE: the user decides on `/consent`."""
        request_id = secrets.token_urlsafe(16)
        self.pending[request_id] = PendingAuthorization(client.client_id, params)
        return f"{self.issuer}/consent?request={request_id}"

    def decide(self, request_id: str, login: str, approve: bool) -> str:
        """The consent page's answer: where the browser goes back to (with a code, or an error)."""
        pending = self.pending.pop(request_id, None)
        if pending is None:
            raise AuthorizeError("invalid_request", "unknown or used authorization request")
        params = pending.params
        iss = {"correct": self.issuer, "omit": None, "wrong": "https://wrong-issuer.example"}[self.iss_mode]
        if not approve:
            return construct_redirect_uri(
                str(params.redirect_uri), error="access_denied", state=params.state, iss=iss
            )
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or list(self.scopes),
            expires_at=self.clock() + CODE_LIFETIME,
            client_id=pending.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=login,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=iss)

    # ---- tokens -----------------------------------------------------------------------------------

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        if code is None or code.client_id != client.client_id or code.expires_at < self.clock():
            return None
        return code

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)  # single use
        self.token_requests.append(
            {"grant_type": "authorization_code", "resource": authorization_code.resource}
        )
        return self._issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.refresh_tokens.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh_tokens.pop(refresh_token.token, None)  # rotated (OAuth 2.1 §4.3.1)
        self.token_requests.append({"grant_type": "refresh_token", "resource": refresh_token.resource})
        return self._issue(
            client.client_id, scopes or refresh_token.scopes, refresh_token.resource, refresh_token.subject
        )

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str | None
    ) -> OAuthToken:
        if resource is not None and resource != self.resource:
            raise TokenError("invalid_target", "this server issues tokens for its own resource only")
        access, refresh = f"dsat_{secrets.token_urlsafe(24)}", f"dsrt_{secrets.token_urlsafe(24)}"
        audience = self.audience or resource or self.resource
        expires = int(self.clock()) + self.access_token_lifetime
        self.access_tokens[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=expires,
            resource=audience,
            subject=subject,
            claims={"iss": self.issuer},
        )
        self.refresh_tokens[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        self.issued_access_tokens.append(access)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.access_token_lifetime,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access_tokens.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < self.clock()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access_tokens.pop(token.token, None)
        self.refresh_tokens.pop(token.token, None)

    def expire_access_tokens(self) -> None:
        """Every access token issued so far is expired (refresh tokens stay good)."""
        for token in list(self.access_tokens.values()):
            self.access_tokens[token.token] = token.model_copy(update={"expires_at": int(self.clock()) - 1})
