"""The consent page of MockHub, MockGoogle and MockSlack: one form, approve or deny.

The validated authorization parameters travel as hidden fields and authlib
validates them again on POST, so a test may POST them directly with ``login``
(the account) and ``decision`` (``approve``/``deny``). The providers keep no
session of their own: every authorization shows the page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749.util import scope_to_list
from starlette.requests import Request
from starlette.responses import Response

from mock_providers.oauth.starlette_adapter import (
    StarletteAuthorizationServer,
    StarletteOAuth2Request,
    read_oauth2_request,
)
from mock_providers.pages import Pages

ScopeGroups = list[tuple[str, list[str]]]
#: The authorization parameters every consent form carries back (providers add their own).
STANDARD_PARAMETERS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
)


def listed_scopes(data: dict[str, str]) -> ScopeGroups:
    """The requested ``scope`` (space-separated) under one heading."""
    scopes = scope_to_list(data.get("scope") or "") or []
    return [("It asks for these scopes:", scopes)] if scopes else []


@dataclass(frozen=True)
class ConsentSettings:
    """What differs between the providers' consent pages."""

    provider: str
    action: str
    account_label: str
    default_login: str
    login_rule: str
    login_maxlength: int = 254
    login_hint_parameter: str | None = None
    #: Provider-specific authorization parameters the form carries besides the standard ones.
    extra_parameters: tuple[str, ...] = ()
    approve_label: str = "Allow"
    #: Authorization parameters the provider makes optional (filled in when absent).
    defaults: tuple[tuple[str, str], ...] = ()


class ConsentFlow:
    """``GET``/``POST`` handler (:meth:`handle`) of a provider's ``/authorize``.

    ``account`` maps the submitted login to the account authlib binds to the
    code, or ``None`` when the login is not acceptable; ``scope_groups`` lists
    the requested scopes under headings for the page; ``suggest_login``, if
    given, proposes the login to prefill when the request has no usable hint.
    """

    def __init__(
        self,
        server: StarletteAuthorizationServer,
        pages: Pages,
        origin: str,
        settings: ConsentSettings,
        *,
        account: Callable[[str], Any | None],
        scope_groups: Callable[[dict[str, str]], ScopeGroups] = listed_scopes,
        suggest_login: Callable[[Request], str | None] | None = None,
    ) -> None:
        self.server = server
        self.pages = pages
        self.origin = origin
        self.settings = settings
        self.account = account
        self.scope_groups = scope_groups
        self.suggest_login = suggest_login

    async def handle(self, request: Request) -> Response:
        server = self.server
        try:
            oauth_request = await read_oauth2_request(request, self.origin, dict(self.settings.defaults))
        except OAuth2Error as error:
            return self._bad_request(error)
        try:
            grant = server.get_consent_grant(oauth_request, end_user=None)
        except OAuth2Error as error:
            redirect = server.authorization_error_response(oauth_request, error)
            return redirect or self._bad_request(error)
        except ValueError as error:  # authlib refuses to build some error descriptions
            return self._page_error(str(error))

        data = oauth_request.payload.data
        if request.method == "GET":
            return self._page(oauth_request, grant.redirect_uri, self._prefill(request, data), None, 200)

        decision = data.get("decision")
        login = (data.get("login") or "").strip()
        if decision == "deny":
            denied: Response = server.create_authorization_response(
                grant.request, grant_user=None, grant=grant
            )
            return denied
        if decision != "approve":
            choose = f"Choose {self.settings.approve_label} or Deny."
            return self._page(oauth_request, grant.redirect_uri, login, choose, 400)
        account = self.account(login)
        if account is None:
            return self._page(oauth_request, grant.redirect_uri, login, self.settings.login_rule, 400)
        approved: Response = server.create_authorization_response(
            grant.request, grant_user=account, grant=grant
        )
        return approved

    def _prefill(self, request: Request, data: dict[str, str]) -> str:
        """The login hint if valid, else the suggested login if valid, else the default."""
        hint = data.get(self.settings.login_hint_parameter or "")
        suggested = self.suggest_login(request) if self.suggest_login is not None else None
        for login in (hint, suggested):
            if login and self.account(login) is not None:
                return login
        return self.settings.default_login

    def _bad_request(self, error: OAuth2Error) -> Response:
        description = error.description or error.error or "invalid request"
        return self._page_error(f"{error.error}: {description}")

    def _page_error(self, message: str) -> Response:
        return self.pages.message(f"{self.settings.provider}: invalid authorization request", message, 400)

    def _page(
        self,
        oauth_request: StarletteOAuth2Request,
        redirect_uri: str,
        login: str,
        error: str | None,
        status_code: int,
    ) -> Response:
        data = oauth_request.payload.data
        names = (*STANDARD_PARAMETERS, *self.settings.extra_parameters)
        hidden = [(name, data[name]) for name in names if data.get(name)]
        return self.pages.render(
            "consent.html",
            status_code,
            provider=self.settings.provider,
            action=self.settings.action,
            client_id=data.get("client_id", ""),
            redirect_uri=redirect_uri,
            scope_groups=self.scope_groups(data),
            hidden=hidden,
            account_label=self.settings.account_label,
            login=login,
            login_maxlength=self.settings.login_maxlength,
            approve_label=self.settings.approve_label,
            error=error,
        )
