"""HTTP endpoints of the development authorization server (Starlette handlers).

``/authorize`` validates the request with authlib first; a browser without a
``devas_session`` login gets the development login page (a user name, no
password), which posts to ``/login`` (with the session's CSRF token) and comes back.
``prompt=login`` and an exceeded ``max_age`` ask for the login again (OpenID Connect Core
§3.1.2.1). Consent is implicit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from functools import partial
from urllib.parse import urlencode, urlsplit

from authlib.oauth2 import OAuth2Error
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from mock_providers.dev_as.server import DevAuthorizationServer
from mock_providers.dev_as.tokens import DevUser
from mock_providers.oauth.routes import machine_route
from mock_providers.oauth.starlette_adapter import (
    StarletteOAuth2Request,
    read_form_items,
    read_json_request,
    read_oauth2_request,
)
from mock_providers.pages import Pages
from service.errors import CsrfTokenMismatch
from service.flow.names import lookalike_note
from service.flow.security_checks import mint_opaque_id, require_csrf_token

SESSION_COOKIE = "devas_session"
LOGIN_CSRF = "login_csrf"
_USERNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")
_USERNAME_RULE = "Use 1-64 letters, digits or . _ @ + - (starting with a letter or digit)."


def session_user(request: Request) -> DevUser | None:
    username = request.session.get("username")
    auth_time = request.session.get("auth_time")
    if not isinstance(username, str) or not _USERNAME.match(username) or not isinstance(auth_time, int):
        return None
    return DevUser(username=username, auth_time=auth_time)


def login_form_token(request: Request) -> str:
    """This browser's synchronizer token for the login form, kept in its dev AS session: a login
    POST must carry it (`require_csrf_token`), so another site cannot sign the browser in as its
    own user (login CSRF: RFC 6749 §10.12)."""
    token = request.session.get(LOGIN_CSRF)
    if not isinstance(token, str):
        token = mint_opaque_id()
        request.session[LOGIN_CSRF] = token
    return token


def _needs_login(user: DevUser | None, data: dict[str, str], now: float) -> bool:
    """No user, `prompt=login`, or a sign-in older than `max_age` seconds (OIDC Core §3.1.2.1)."""
    if user is None or "login" in (data.get("prompt") or "").split():
        return True
    max_age = data.get("max_age") or ""
    return max_age.isdigit() and (user.auth_time is None or now - user.auth_time > int(max_age))


def _safe_return_to(value: str) -> str | None:
    """Only same-origin ``/authorize?...`` URLs: the login form is no open redirect."""
    if "\\" in value:
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or parts.path != "/authorize":
        return None
    return value


class DevAuthorizationRoutes:
    def __init__(self, server: DevAuthorizationServer, pages: Pages) -> None:
        self.server = server
        self.pages = pages

    def routes(self) -> list[Route]:
        return [
            machine_route("/.well-known/oauth-authorization-server", self.metadata, ["GET"]),
            machine_route("/.well-known/openid-configuration", self.metadata, ["GET"]),
            machine_route("/jwks.json", self.jwks, ["GET"]),
            machine_route("/register", self.register, ["POST"]),
            Route("/authorize", self.authorize, methods=["GET", "POST"]),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["GET", "POST"]),
            machine_route("/token", self.token, ["POST"]),
            machine_route("/userinfo", self.userinfo, ["GET", "POST"]),
        ]

    async def _oauth2_request(self, request: Request) -> StarletteOAuth2Request:
        return await read_oauth2_request(request, self.server.issuer)

    async def metadata(self, request: Request) -> Response:
        return JSONResponse(self.server.metadata())

    async def jwks(self, request: Request) -> Response:
        return JSONResponse(self.server.keys.public_jwks(), headers={"Cache-Control": "max-age=300"})

    async def register(self, request: Request) -> Response:
        json_request = await read_json_request(request, self.server.issuer)
        response: Response = self.server.create_endpoint_response("client_registration", json_request)
        return response

    async def token(self, request: Request) -> Response:
        return await self._respond(request, self.server.create_token_response)

    async def userinfo(self, request: Request) -> Response:
        return await self._respond(request, partial(self.server.create_endpoint_response, "userinfo"))

    async def _respond(
        self, request: Request, create_response: Callable[[StarletteOAuth2Request], Response]
    ) -> Response:
        """authlib's answer to ``request``, or its error response when the request is unreadable."""
        try:
            oauth_request = await self._oauth2_request(request)
        except OAuth2Error as error:
            return self.server.handle_error_response(None, error)
        return create_response(oauth_request)

    async def authorize(self, request: Request) -> Response:
        try:
            oauth_request = await self._oauth2_request(request)
        except OAuth2Error as error:
            return self._bad_request(error)
        user = session_user(request)
        try:
            grant = self.server.get_consent_grant(oauth_request, end_user=user)
        except OAuth2Error as error:
            redirect = self.server.authorization_error_response(oauth_request, error)
            return redirect or self._bad_request(error)
        except ValueError as error:  # authlib refuses to build some error descriptions
            return self.pages.message("Invalid authorization request", str(error), 400)

        if _needs_login(user, oauth_request.payload.data, self.server.clock()):
            return self._login_page(request, oauth_request, grant.request.client, status_code=200)
        response: Response = self.server.create_authorization_response(
            grant.request, grant_user=user, grant=grant
        )
        return response

    def _bad_request(self, error: OAuth2Error) -> Response:
        description = error.description or error.error or "invalid request"
        return self.pages.message("Invalid authorization request", f"{error.error}: {description}", 400)

    def _login_page(
        self, request: Request, oauth_request: StarletteOAuth2Request, client: object, status_code: int
    ) -> Response:
        params = [
            (key, value)
            for key, values in oauth_request.payload.datalist.items()
            if key not in ("prompt", "max_age")  # signing in satisfies both
            for value in values
        ]
        client_name = str(getattr(client, "client_name", None) or getattr(client, "client_id", ""))
        return self.pages.render(
            "devas_login.html",
            status_code,
            action="/login",
            csrf=login_form_token(request),
            return_to="/authorize?" + urlencode(params),
            client_name=client_name,
            client_note=lookalike_note(client_name),
            # What the client says the sign-in is for (mcp-url-connect sends `mcpuc_purpose`, e.g.
            # "connect MockHub for the MCP client X"); untrusted text, shortened and escaped.
            purpose=(oauth_request.payload.data.get("mcpuc_purpose") or "")[:160],
            scope=oauth_request.payload.data.get("scope") or "",
            username="",
            error=None,
        )

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.pages.render(
                "devas_login.html",
                action="/login",
                csrf=login_form_token(request),
                return_to="",
                client_name=None,
                client_note=None,
                purpose="",
                scope="",
                username="",
                error=None,
            )
        form = dict(await read_form_items(request))
        try:
            # mutant: dev_as.login_csrf
            require_csrf_token(request.session.get(LOGIN_CSRF), form.get("csrf"))
        except CsrfTokenMismatch:
            return self.pages.message(
                "Sign-in refused", "The sign-in form was not this server's. Start again.", 403
            )
        username = form.get("username", "").strip()
        return_to = _safe_return_to(form.get("return_to", ""))
        if not _USERNAME.match(username):
            return self.pages.render(
                "devas_login.html",
                400,
                action="/login",
                csrf=login_form_token(request),
                return_to=return_to or "",
                client_name=None,
                client_note=None,
                purpose="",
                scope="",
                username=username,
                error=_USERNAME_RULE,
            )
        request.session.clear()
        request.session["username"] = username
        request.session["auth_time"] = int(time.time())
        if return_to is None:
            return self.pages.message(
                "Signed in", f"You are signed in to the development server as {username}."
            )
        return RedirectResponse(return_to, status_code=303)

    async def logout(self, request: Request) -> Response:
        request.session.clear()
        return self.pages.message("Signed out", "You are signed out of the development authorization server.")
