"""HTTP endpoints of MockHub under ``/mockhub`` (Starlette handlers).

The consent page is the shared :class:`~mock_providers.oauth.consent.ConsentFlow`. It
prefills a login derived from the user signed in at the dev AS (``alice`` ->
``alice-hub``), so the account a user connects is recognisably theirs;
``octocat`` when nobody is signed in there.
"""

from __future__ import annotations

import re

from authlib.oauth2.rfc6749.util import scope_to_list
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.api.exchange import TokenOwner
from mock_providers.dev_as.routes import session_user
from mock_providers.faults import mangle
from mock_providers.oauth.consent import ConsentFlow, ConsentSettings
from mock_providers.oauth.routes import ProviderRoutes, machine_route
from mock_providers.pages import Pages
from mock_providers.providers.mockhub.api import WEB
from mock_providers.providers.mockhub.server import LOGIN_RULE, MockHub, MockHubAccount, MockHubToken

PREFIX = "/mockhub"
METADATA_PATH = "/.well-known/oauth-authorization-server" + PREFIX
DEFAULT_LOGIN = "octocat"
LOGIN_SUFFIX = "-hub"


_CONSENT = ConsentSettings(
    provider="MockHub",
    action=PREFIX + "/authorize",
    account_label="MockHub account",
    default_login=DEFAULT_LOGIN,
    login_rule=LOGIN_RULE,
    login_maxlength=39,
    approve_label="Authorize",
)


def login_for_dev_user(request: Request) -> str | None:
    """``<dev-AS user>-hub`` for the user signed in at the dev AS (same origin, same session)."""
    user = session_user(request)
    if user is None:
        return None
    stem = re.sub(r"[^A-Za-z0-9]+", "-", user.username).strip("-")[: 39 - len(LOGIN_SUFFIX)].rstrip("-")
    return stem + LOGIN_SUFFIX if stem else None


def github_owner(token: MockHubToken) -> TokenOwner:
    """Whose an accepted MockHub token is: the login, its GitHub-style id, the granted scopes."""
    return TokenOwner(
        token.login, str(MockHubAccount.for_login(token.login).id), tuple(scope_to_list(token.scope) or ())
    )


class MockHubRoutes(ProviderRoutes):
    def __init__(self, hub: MockHub, pages: Pages, origin: str) -> None:
        super().__init__(hub, hub.protector, pages, origin)
        self.hub = hub
        self.consent = ConsentFlow(
            hub.server, pages, origin, _CONSENT, account=hub.account, suggest_login=login_for_dev_user
        )

    def routes(self) -> list[Route]:
        own = [
            machine_route(METADATA_PATH, self.metadata, ["GET"]),
            Route(PREFIX + "/authorize", self.consent.handle, methods=["GET", "POST"]),
            Route(PREFIX + "/token", self.token, methods=["POST"]),
            Route(PREFIX + "/revoke", self.revoke, methods=["POST"]),
            Route(PREFIX + "/user", self.user, methods=["GET"]),
        ]
        return [*own, self.api_endpoint(PREFIX, own, github_owner)]  # GitHub's REST API: mockhub/api.py

    def metadata_document(self) -> dict[str, object]:
        issuer = self.hub.issuer
        auth_methods = self.hub.client.auth_methods
        return {
            "issuer": issuer,
            "authorization_endpoint": issuer + "/authorize",
            "token_endpoint": issuer + "/token",
            "revocation_endpoint": issuer + "/revoke",
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": auth_methods,
            "revocation_endpoint_auth_methods_supported": auth_methods,
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }

    async def metadata(self, request: Request) -> Response:
        return JSONResponse(self.metadata_document())

    async def user(self, request: Request) -> Response:
        self.hub.user_requests += 1
        token = await self.api_token(request)
        if isinstance(token, Response):
            return token
        account = MockHubAccount.for_login(token.login)
        scopes = scope_to_list(token.scope) or []
        profile = {
            "id": account.id,
            "login": account.login,
            "name": account.name,
            "scopes": scopes,
            # What GitHub's /user also says that tools read (docs/mock-providers.md, "MockHub").
            "html_url": f"{WEB}/{account.login}",
            "type": "User",
            "public_repos": len(self.hub.api.repositories_of(account.login)),
        }
        response = JSONResponse(
            profile, headers={"X-OAuth-Scopes": ", ".join(scopes), "Cache-Control": "no-store"}
        )
        return mangle(self.hub.api_mode, response, drip_seconds=self.hub.drip_seconds)
