"""HTTP endpoints of MockGoogle under ``/mockgoogle`` (Starlette handlers)."""

from __future__ import annotations

from authlib.oauth2.rfc6749.util import scope_to_list
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.api.exchange import TokenOwner
from mock_providers.oauth.consent import ConsentFlow, ConsentSettings
from mock_providers.oauth.routes import ProviderRoutes, machine_route
from mock_providers.pages import Pages
from mock_providers.providers.mockgoogle.server import (
    ALG,
    EMAIL_DOMAIN,
    LOGIN_RULE,
    MockGoogle,
    MockGoogleAccessToken,
)

PREFIX = "/mockgoogle"
DISCOVERY_PATH = PREFIX + "/.well-known/openid-configuration"
DEFAULT_LOGIN = f"alice@{EMAIL_DOMAIN}"


_CONSENT = ConsentSettings(
    provider="MockGoogle",
    action=PREFIX + "/authorize",
    extra_parameters=("nonce", "access_type", "prompt", "login_hint", "include_granted_scopes"),
    account_label="MockGoogle account (email)",
    default_login=DEFAULT_LOGIN,
    login_rule=LOGIN_RULE,
    login_hint_parameter="login_hint",
)


def google_owner(token: MockGoogleAccessToken) -> TokenOwner:
    """Whose an accepted MockGoogle token is: the email address, the ``sub``, the granted scopes."""
    return TokenOwner(token.email, token.sub, tuple(scope_to_list(token.scope) or ()))


class MockGoogleRoutes(ProviderRoutes):
    def __init__(self, google: MockGoogle, pages: Pages, origin: str) -> None:
        super().__init__(google, google.protector, pages, origin)
        self.google = google
        self.consent = ConsentFlow(google.server, pages, origin, _CONSENT, account=google.account)

    def routes(self) -> list[Route]:
        own = [
            machine_route(DISCOVERY_PATH, self.discovery, ["GET"]),
            machine_route(PREFIX + "/jwks.json", self.jwks, ["GET"]),
            Route(PREFIX + "/authorize", self.consent.handle, methods=["GET", "POST"]),
            machine_route(PREFIX + "/token", self.token, ["POST"]),
            machine_route(PREFIX + "/userinfo", self.userinfo, ["GET", "POST"]),
            machine_route(PREFIX + "/revoke", self.revoke, ["GET", "POST"]),
        ]
        return [*own, self.api_endpoint(PREFIX, own, google_owner)]  # Google's APIs: mockgoogle/api.py

    def discovery_document(self) -> dict[str, object]:
        issuer = self.google.issuer
        return {
            "issuer": issuer,
            "authorization_endpoint": issuer + "/authorize",
            "token_endpoint": issuer + "/token",
            "userinfo_endpoint": issuer + "/userinfo",
            "revocation_endpoint": issuer + "/revoke",
            "jwks_uri": issuer + "/jwks.json",
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [ALG],
            "scopes_supported": ["openid", "email", "profile"],
            "token_endpoint_auth_methods_supported": self.google.client.auth_methods,
            "claims_supported": [
                "aud",
                "azp",
                "email",
                "email_verified",
                "exp",
                "iat",
                "iss",
                "name",
                "nonce",
                "sub",
                "auth_time",
                "at_hash",
            ],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }

    async def discovery(self, request: Request) -> Response:
        return JSONResponse(self.discovery_document())

    async def jwks(self, request: Request) -> Response:
        return JSONResponse(self.google.jwks(), headers={"Cache-Control": "max-age=300"})

    async def userinfo(self, request: Request) -> Response:
        self.google.userinfo_requests += 1
        token = await self.api_token(request)
        if isinstance(token, Response):
            return token
        account = self.google.account(token.email)
        claims = account.claims(token.scope) if account is not None else {"sub": token.sub}
        return JSONResponse(claims, headers={"Cache-Control": "no-store"})
