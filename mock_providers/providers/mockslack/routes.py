"""HTTP endpoints of MockSlack under ``/mockslack`` (Starlette handlers).

Web API methods (``oauth.v2.access``, ``auth.test``, ``auth.revoke``) answer
like Slack's: status 200 with ``{"ok": true, ...}`` or ``{"ok": false,
"error": "<code>"}``. A token may come as ``Authorization: Bearer`` or as a
``token`` parameter.
"""

from __future__ import annotations

import json

from authlib.oauth2 import OAuth2Error
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mock_providers.api.exchange import TokenOwner
from mock_providers.api.routes import ApiEndpoint
from mock_providers.faults import check_mode, fault_label, fault_response
from mock_providers.oauth.consent import ConsentFlow, ConsentSettings, ScopeGroups
from mock_providers.oauth.starlette_adapter import (
    StarletteOAuth2Request,
    read_form_items,
    read_oauth2_request,
)
from mock_providers.pages import Pages
from mock_providers.providers.mockslack.formats import split_scopes
from mock_providers.providers.mockslack.server import LOGIN_RULE, MockSlack, MockSlackToken
from mock_providers.records import TokenRequestRecord, record_fault, requesting_client_id

PREFIX = "/mockslack"
DEFAULT_LOGIN = "alice"
_SLACK_SERVER_ERROR = {"ok": False, "error": "internal_error"}
# authlib's OAuth 2 error codes as Slack's oauth.v2.access names them.
_ERRORS = {
    "invalid_grant": "invalid_code",
    "unsupported_grant_type": "invalid_grant_type",
    "unauthorized_client": "invalid_grant_type",
    "invalid_request": "invalid_arguments",
    "invalid_scope": "invalid_scope",
}


_CONSENT = ConsentSettings(
    provider="MockSlack",
    action=PREFIX + "/authorize",
    extra_parameters=("user_scope", "team"),
    account_label="MockSlack user name",
    default_login=DEFAULT_LOGIN,
    login_rule=LOGIN_RULE,
    login_maxlength=80,
    defaults=(("response_type", "code"),),
)


def _scope_groups(data: dict[str, str]) -> ScopeGroups:
    groups: ScopeGroups = []
    bot = split_scopes(data.get("scope"))
    user = split_scopes(data.get("user_scope"))
    if bot:
        groups.append(("As a bot in the workspace, it asks for:", bot))
    if user:
        groups.append(("On your behalf, it asks for:", user))
    return groups


def slack_error(oauth_error: str, description: str, *, known_client: bool) -> str:
    """The Slack error string for an authlib token endpoint error."""
    if oauth_error == "invalid_client":
        return "bad_client_secret" if known_client else "invalid_client_id"
    if "redirect_uri" in description:
        return "bad_redirect_uri"
    if "code_verifier" in description:
        return "invalid_code_verifier"
    return _ERRORS.get(oauth_error, oauth_error)


def slack_ok(body: dict[str, object], scopes: str | None = None) -> JSONResponse:
    headers = {"Cache-Control": "no-store"}
    if scopes is not None:
        headers["X-OAuth-Scopes"] = scopes
    return JSONResponse(body, headers=headers)


class MockSlackRoutes:
    def __init__(self, slack: MockSlack, pages: Pages, origin: str) -> None:
        self.slack = slack
        self.pages = pages
        self.origin = origin
        self.consent = ConsentFlow(
            slack.server, pages, origin, _CONSENT, account=slack.account, scope_groups=_scope_groups
        )

    def routes(self) -> list[Route]:
        own = [
            Route(PREFIX + "/authorize", self.consent.handle, methods=["GET", "POST"]),
            Route(PREFIX + "/oauth.v2.access", self.access, methods=["POST"]),
            Route(PREFIX + "/auth.test", self.auth_test, methods=["GET", "POST"]),
            Route(PREFIX + "/auth.revoke", self.auth_revoke, methods=["GET", "POST"]),
        ]
        # Slack's Web API methods (mockslack/api.py), behind the same token check as auth.test.
        return [*own, ApiEndpoint(self.slack.api, PREFIX, own, self._api_owner, self._api_fault).route()]

    async def access(self, request: Request) -> Response:
        """``oauth.v2.access``: exchange a code for the bot and/or user token."""
        server = self.slack.server
        try:
            oauth_request = await read_oauth2_request(
                request, self.origin, {"grant_type": "authorization_code"}
            )
        except OAuth2Error as bad:
            return JSONResponse({"ok": False, "error": bad.error})
        mode = check_mode(self.slack.token_endpoint_mode)
        if mode != "ok":
            self.slack.token_requests.append(record_fault(oauth_request, fault_label(mode)))
            faulty = await fault_response(
                mode, request, hang_seconds=self.slack.hang_seconds, server_error_body=_SLACK_SERVER_ERROR
            )
            if faulty is not None:
                return faulty
        response: Response = server.create_token_response(oauth_request)
        slack_error_code = None
        if response.status_code != 200:
            slack_error_code = self._slack_error(oauth_request, response)
            response = JSONResponse(
                {"ok": False, "error": slack_error_code}, headers={"Cache-Control": "no-store"}
            )
        self.slack.token_requests.append(
            TokenRequestRecord(
                grant_type=oauth_request.form.get("grant_type"),
                client_id=requesting_client_id(oauth_request),
                ok=slack_error_code is None,
                error=slack_error_code,
            )
        )
        return response

    def _slack_error(self, oauth_request: StarletteOAuth2Request, response: Response) -> str:
        try:
            body = json.loads(bytes(response.body))
            oauth_error, description = str(body.get("error")), str(body.get("error_description", ""))
        except (ValueError, AttributeError):
            return "internal_error"
        known_client = requesting_client_id(oauth_request) == self.slack.client.client_id
        return slack_error(oauth_error, description, known_client=known_client)

    async def _token_from(self, request: Request) -> tuple[str | None, dict[str, str]]:
        """The presented token (Bearer header, else ``token`` parameter) and all parameters."""
        params = dict(request.query_params)
        params.update(await read_form_items(request))
        authorization = request.headers.get("authorization", "")
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip(), params
        return params.get("token") or None, params

    def _authenticate(self, token: str | None) -> MockSlackToken | str:
        """The token's record, or the Slack error for it."""
        if token is None:
            return "not_authed"
        record = self.slack.tokens.get(token)
        if record is None:
            return "invalid_auth"
        if record.revoked:
            return "token_revoked"
        return record

    async def _api_fault(self, request: Request) -> Response | None:
        """The answer ``api_mode`` asks for instead of the Web API's, or ``None``."""
        return await fault_response(
            self.slack.api_mode,
            request,
            hang_seconds=self.slack.hang_seconds,
            server_error_body=_SLACK_SERVER_ERROR,
        )

    async def _api_owner(self, request: Request) -> TokenOwner | str:
        """Whose the presented token is, or Slack's error for it."""
        token, _ = await self._token_from(request)
        record = self._authenticate(token)
        if isinstance(record, str):
            return record
        return TokenOwner(record.user, record.user_id, tuple(split_scopes(record.scope)))

    async def auth_test(self, request: Request) -> Response:
        self.slack.auth_test_requests += 1
        faulty = await self._api_fault(request)
        if faulty is not None:
            return faulty
        token, _ = await self._token_from(request)
        record = self._authenticate(token)
        if isinstance(record, str):
            return slack_ok({"ok": False, "error": record})
        body: dict[str, object] = {
            "ok": True,
            "url": self.origin.rstrip("/") + PREFIX + "/",
            "team": self.slack.team_name,
            "user": record.user,
            "team_id": record.team_id,
            "user_id": record.user_id,
            "is_enterprise_install": False,
        }
        if record.kind == "bot":
            body["bot_id"] = self.slack.bot_id
        return slack_ok(body, scopes=record.scope)

    async def auth_revoke(self, request: Request) -> Response:
        """``auth.revoke``: revoke the presented token (``test=1``: only check it)."""
        token, params = await self._token_from(request)
        record = self._authenticate(token)
        if isinstance(record, str):
            return slack_ok({"ok": False, "error": record})
        if params.get("test", "").lower() in ("1", "true"):
            return slack_ok({"ok": True, "revoked": False})
        self.slack.revoke(record)
        return slack_ok({"ok": True, "revoked": True})
