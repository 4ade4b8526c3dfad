"""Browser login at the MCP authorization server (OpenID Connect, authlib's Starlette client).

The browser session's user is `(iss, sub)` of a verified ID token from the same issuer that
signs the MCP access tokens, so it names users the same way (docs/threat-model.md, "2. `/connect`
and `/callback/<provider>` only for the same user, in the same browser").
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from authlib.integrations.starlette_client import OAuth, OAuthError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from connect_routes.browser_session import check_csrf, start_session
from connect_routes.pages import message
from service.errors import LoginFailed, LoginUnavailable
from service.outbound_http import OutboundHttp
from service.security_checks import require_login_issuer, require_safe_next
from service.settings import Settings

logger = logging.getLogger(__name__)


class Login:
    def __init__(self, settings: Settings, outbound: OutboundHttp | None = None) -> None:
        self._settings = settings
        # authlib builds (and closes) an HTTP client per request: give it the process's TLS
        # context so none is built per request. It caches the server metadata it fetched.
        http = outbound.authlib_options() if outbound is not None else {}
        oauth = OAuth()
        oauth.register(
            "mcp_as",
            client_id=settings.login_client_id,
            client_secret=settings.login_client_secret,
            server_metadata_url=settings.auth_issuer.rstrip("/") + "/.well-known/openid-configuration",
            client_kwargs={"scope": settings.login_scopes, "code_challenge_method": "S256", **http},
        )
        self._client = oauth.create_client("mcp_as")

    def redirect_to_login(self, next_path: str) -> RedirectResponse:
        return RedirectResponse("/login?" + urlencode({"next": next_path}), status_code=303)

    async def login(self, request: Request) -> Response:
        request.session["next"] = require_safe_next(request.query_params.get("next"))
        try:
            response: Response = await self._client.authorize_redirect(
                request, self._settings.login_callback_url
            )
        except Exception as exc:  # metadata fetch failed: the AS is down or misconfigured
            logger.warning("login: authorization server unavailable (%s)", type(exc).__name__)
            raise LoginUnavailable() from None
        return response

    async def callback(self, request: Request) -> Response:
        next_path = require_safe_next(request.session.get("next"))
        try:
            token = await self._client.authorize_access_token(request)
        except OAuthError as exc:
            logger.info("login: rejected (%r)", exc.error)  # %r: the value comes from the query string
            raise LoginFailed() from None
        except Exception as exc:
            logger.warning("login: authorization server error (%s)", type(exc).__name__)
            raise LoginUnavailable() from None
        claims = token.get("userinfo") or {}
        user = require_login_issuer(claims.get("iss"), claims.get("sub"), self._settings.auth_issuer)
        start_session(request, user)  # rotation: nothing from before login survives
        return RedirectResponse(next_path, status_code=303)

    async def logout(self, request: Request) -> Response:
        if not request.session:
            return message(request, "Signed out", "You are signed out of this server.", 200)
        form = await request.form(max_files=0, max_fields=2, max_part_size=1024)
        check_csrf(request, form.get("csrf"))
        request.session.clear()
        return message(request, "Signed out", "You are signed out of this server.", 200)

    def routes(self) -> list[Route]:
        return [
            Route("/login", self.login, methods=["GET"]),
            Route("/login/callback", self.callback, methods=["GET"]),
            Route("/logout", self.logout, methods=["POST"]),
        ]
