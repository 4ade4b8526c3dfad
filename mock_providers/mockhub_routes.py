"""HTTP endpoints of MockHub under ``/mockhub`` (Starlette handlers).

The consent page is a plain form: the validated authorization parameters
travel as hidden fields and are validated again by authlib on POST, so a
test may also POST them directly with ``login`` and ``decision``.
"""

from __future__ import annotations

from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749.util import scope_to_list
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .cors import allow_cors
from .faults import check_mode, fault_label, fault_response
from .mockhub import LOGIN_PATTERN, MockHub, TokenRequestRecord
from .pages import Pages
from .records import record_fault, record_token_request
from .starlette_adapter import StarletteOAuth2Request, read_oauth2_request

PREFIX = "/mockhub"
METADATA_PATH = "/.well-known/oauth-authorization-server" + PREFIX
_CONSENT_PARAMETERS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
)
DEFAULT_LOGIN = "octocat"
_LOGIN_RULE = "A MockHub login is 1-39 letters, digits or single hyphens, not starting or ending with one."


class MockHubRoutes:
    def __init__(self, hub: MockHub, pages: Pages, origin: str) -> None:
        self.hub = hub
        self.pages = pages
        self.origin = origin

    def routes(self) -> list[Route]:
        return [
            Route(METADATA_PATH, allow_cors(self.metadata), methods=["GET", "OPTIONS"]),
            Route(PREFIX + "/authorize", self.authorize, methods=["GET", "POST"]),
            Route(PREFIX + "/token", self.token, methods=["POST"]),
            Route(PREFIX + "/revoke", self.revoke, methods=["POST"]),
            Route(PREFIX + "/user", self.user, methods=["GET"]),
        ]

    def metadata_document(self) -> dict[str, object]:
        issuer = self.hub.issuer
        auth_methods = (
            ["none"]
            if self.hub.client.client_secret is None
            else ["client_secret_basic", "client_secret_post"]
        )
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

    async def _oauth2_request(self, request: Request) -> StarletteOAuth2Request:
        return await read_oauth2_request(request, self.origin)

    def _bad_request(self, error: OAuth2Error) -> Response:
        description = error.description or error.error or "invalid request"
        return self.pages.message(
            "MockHub: invalid authorization request", f"{error.error}: {description}", 400
        )

    async def authorize(self, request: Request) -> Response:
        server = self.hub.server
        try:
            oauth_request = await self._oauth2_request(request)
        except OAuth2Error as error:
            return self._bad_request(error)
        try:
            grant = server.get_consent_grant(oauth_request, end_user=None)
        except OAuth2Error as error:
            redirect = server.authorization_error_response(oauth_request, error)
            return redirect or self._bad_request(error)
        except ValueError as error:  # authlib refuses to build some error descriptions
            return self.pages.message("MockHub: invalid authorization request", str(error), 400)

        if request.method == "GET":
            return self._consent_page(oauth_request, grant.redirect_uri, DEFAULT_LOGIN, None, 200)

        data = oauth_request.payload.data
        decision = data.get("decision")
        login = (data.get("login") or "").strip()
        if decision == "deny":
            denied: Response = server.create_authorization_response(
                grant.request, grant_user=None, grant=grant
            )
            return denied
        if decision != "approve":
            return self._consent_page(
                oauth_request, grant.redirect_uri, login, "Choose Authorize or Deny.", 400
            )
        if not LOGIN_PATTERN.match(login):
            return self._consent_page(oauth_request, grant.redirect_uri, login, _LOGIN_RULE, 400)
        approved: Response = server.create_authorization_response(
            grant.request, grant_user=self.hub.account(login), grant=grant
        )
        return approved

    def _consent_page(
        self,
        oauth_request: StarletteOAuth2Request,
        redirect_uri: str,
        login: str,
        error: str | None,
        status_code: int,
    ) -> Response:
        data = oauth_request.payload.data
        hidden = [(name, data[name]) for name in _CONSENT_PARAMETERS if data.get(name)]
        return self.pages.render(
            "mockhub_consent.html",
            status_code,
            action=PREFIX + "/authorize",
            client_id=data.get("client_id", ""),
            redirect_uri=redirect_uri,
            scopes=scope_to_list(data.get("scope") or "") or [],
            hidden=hidden,
            login=login,
            error=error,
        )

    async def token(self, request: Request) -> Response:
        server = self.hub.server
        try:
            oauth_request = await self._oauth2_request(request)
        except OAuth2Error as error:
            return server.handle_error_response(None, error)
        mode = check_mode(self.hub.token_endpoint_mode)
        if mode != "ok":
            # Recorded first: a hanging request is usually cancelled and never returns.
            self.hub.token_requests.append(record_fault(oauth_request, fault_label(mode)))
            faulty = await fault_response(mode, request, hang_seconds=self.hub.hang_seconds)
            if faulty is not None:
                return faulty
        response: Response = server.create_token_response(oauth_request)
        self.hub.token_requests.append(self._record(oauth_request, response))
        return response

    @staticmethod
    def _record(oauth_request: StarletteOAuth2Request, response: Response) -> TokenRequestRecord:
        return record_token_request(oauth_request, response)

    async def revoke(self, request: Request) -> Response:
        server = self.hub.server
        try:
            oauth_request = await self._oauth2_request(request)
        except OAuth2Error as error:
            return server.handle_error_response(None, error)
        response: Response = server.create_endpoint_response("revocation", oauth_request)
        return response

    async def user(self, request: Request) -> Response:
        self.hub.user_requests += 1
        faulty = await fault_response(self.hub.api_mode, request, hang_seconds=self.hub.hang_seconds)
        if faulty is not None:
            return faulty
        server = self.hub.server
        try:
            oauth_request = await self._oauth2_request(request)
            token = self.hub.protector.validate_request(None, oauth_request)
        except OAuth2Error as error:
            return server.handle_error_response(None, error)
        account = self.hub.account(token.login)
        scopes = scope_to_list(token.scope) or []
        return JSONResponse(
            {"id": account.id, "login": account.login, "name": account.name, "scopes": scopes},
            headers={"X-OAuth-Scopes": ", ".join(scopes), "Cache-Control": "no-store"},
        )
