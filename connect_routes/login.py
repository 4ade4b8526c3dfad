"""Browser login at the MCP authorization server (OpenID Connect, authlib's Starlette client).

The browser session's user is `(iss, sub)` of a verified ID token from the same issuer that
signs the MCP access tokens, so it names users the same way (docs/threat-model.md, "2. `/connect`
and `/callback/<provider>` only for the same user, in the same browser").

The authorization request may carry two hints for the sign-in page: `prompt=login` (OpenID
Connect Core §3.1.2.1) after "sign out and continue" and for every sign-in that returns to a
connect link, so the authorization server asks who you are instead of reusing its own session
(which another site may have signed in as itself); and `mcpuc_purpose`, a short non-secret
sentence such as "connect MockHub for the MCP client Claude", kept in the session, never taken
from the URL (an authorization server that does not know it ignores it, RFC 6749 §3.1).

A browser that is signed in here is never switched to another user by a sign-in alone
(`require_no_silent_account_switch`): `GET /login` then shows who is signed in and offers the
CSRF-protected "sign out and continue", and `/login/callback` refuses a different user.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import urlencode

import httpx
from authlib.integrations.starlette_client import OAuth, OAuthError, StarletteOAuth2App
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from connect_routes.browser_session import browser_user, check_csrf, session_of, start_session
from connect_routes.error_pages import offer_sign_out
from connect_routes.pages import message
from service.errors import AccountSwitchUnconfirmed, LoginFailed, LoginUnavailable
from service.flow.security_checks import (
    require_login_issuer,
    require_no_silent_account_switch,
    require_safe_next,
    require_same_origin,
)
from service.providers.discovery import discover_metadata
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings
from service.urls import CONNECTIONS_PATH, LOGIN_CALLBACK_PATH, LOGIN_PATH, LOGOUT_PATH, is_connect_link

logger = logging.getLogger(__name__)

ALREADY_SIGNED_IN = "This browser is already signed in here. To sign in as another account, sign out first."
MAX_PURPOSE = 160


HttpClient = Callable[[], AbstractAsyncContextManager[httpx.AsyncClient]]


class DiscoveredMetadataClient(StarletteOAuth2App):  # type: ignore[misc]  # authlib is untyped
    """authlib's Starlette client, given the issuer's metadata by service/providers/discovery.py (RFC 8414
    §3 and OpenID Connect Discovery URLs, the document's `issuer` compared) instead of fetching
    one fixed `server_metadata_url` itself: the bearer check and the login find the issuer's
    metadata by one rule. authlib asks `load_server_metadata` before each step; the first answer
    is kept, a failure is retried at the next sign-in."""

    def __init__(
        self, framework: Any, name: str, *, issuer: str, metadata_http: HttpClient, **kwargs: Any
    ) -> None:
        super().__init__(framework, name, **kwargs)
        self._issuer = issuer
        self._metadata_http = metadata_http

    async def load_server_metadata(self) -> dict[str, Any]:
        if "_loaded_at" not in self.server_metadata:
            async with self._metadata_http() as http:
                metadata = await discover_metadata(http, self._issuer)
            self.server_metadata.update(metadata, _loaded_at=time.time())
        return self.server_metadata  # type: ignore[no-any-return]  # authlib is untyped


class Login:
    def __init__(self, settings: Settings, outbound: OutboundHttp | None = None) -> None:
        self._settings = settings
        # authlib builds (and closes) an HTTP client per request: give it the process's TLS
        # context so none is built per request.
        http = outbound.authlib_options() if outbound is not None else {}
        oauth = OAuth()
        oauth.register(
            "mcp_as",
            client_cls=DiscoveredMetadataClient,
            issuer=settings.auth_issuer,
            metadata_http=_metadata_http(settings, outbound),
            client_id=settings.login_client_id,
            client_secret=settings.login_client_secret,
            client_kwargs={"scope": settings.login_scopes, "code_challenge_method": "S256", **http},
        )
        self._client = oauth.create_client("mcp_as")

    def redirect_to_login(
        self,
        next_path: str,
        request: Request | None = None,
        purpose: str | None = None,
        *,
        switch_account: bool = False,
    ) -> RedirectResponse:
        """To /login, then back to `next_path`. `purpose` (what the sign-in is for) goes into
        `request`'s session; `switch_account` asks the authorization server for a fresh sign-in."""
        if request is not None and purpose:
            session_of(request).keep_login_purpose(purpose[:MAX_PURPOSE])
        query = {"next": next_path, **({"prompt": "login"} if switch_account else {})}
        return RedirectResponse(f"{LOGIN_PATH}?{urlencode(query)}", status_code=303)

    async def login(self, request: Request) -> Response:
        next_path = require_safe_next(request.query_params.get("next"))
        signed_in = browser_user(request, self._settings)
        try:
            # mutant: login.no_switch_on_login
            require_no_silent_account_switch(signed_in.user if signed_in else None, None)
        except AccountSwitchUnconfirmed:
            return offer_sign_out(
                request,
                self._settings,
                AccountSwitchUnconfirmed(ALREADY_SIGNED_IN),
                next_path,
                title="Already signed in",
                continue_as=True,
            )
        session = session_of(request)
        session.next_path = next_path
        hints: dict[str, str] = {}
        purpose = session.take_login_purpose()
        if purpose is not None:
            hints["mcpuc_purpose"] = purpose[:MAX_PURPOSE]
        # "login" is the one value we send; a sign-in for a connect link always asks it.
        # mutant: login.prompt_login_for_connect_links drop 1
        if request.query_params.get("prompt") == "login" or is_connect_link(next_path):
            hints["prompt"] = "login"
        try:
            response: Response = await self._client.authorize_redirect(
                request, self._settings.login_callback_url, **hints
            )
        except Exception as exc:  # metadata fetch failed: the AS is down or misconfigured
            logger.warning("login: authorization server unavailable (%s)", type(exc).__name__)
            raise LoginUnavailable() from None
        return response

    async def callback(self, request: Request) -> Response:
        next_path = require_safe_next(session_of(request).next_path)
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
        signed_in = browser_user(request, self._settings)
        try:
            # mutant: login.no_switch_on_callback
            require_no_silent_account_switch(signed_in.user if signed_in else None, user)
        except AccountSwitchUnconfirmed as refused:
            logger.info("login: refused to replace the signed-in user with another")
            return offer_sign_out(request, self._settings, refused, next_path)
        start_session(request, user, claims)  # rotation: nothing from before login survives
        return RedirectResponse(next_path, status_code=303)

    async def logout(self, request: Request) -> Response:
        """POST (CSRF-protected). With `next`, "sign out and continue": back to that link through
        a fresh sign-in (the same safe paths as the login's `next`)."""
        # mutant: origin.logout
        require_same_origin(request.headers.get("origin"), self._settings.public_url)
        session = session_of(request)
        if not session:
            return _signed_out(request)
        form = await request.form(max_files=0, max_fields=2, max_part_size=1024)
        check_csrf(request, form.get("csrf"))
        session.clear()
        next_path = form.get("next")
        if next_path is not None:
            return self.redirect_to_login(require_safe_next(next_path), switch_account=True)
        return _signed_out(request)

    def routes(self) -> list[Route]:
        return [
            Route(LOGIN_PATH, self.login, methods=["GET"]),
            Route(LOGIN_CALLBACK_PATH, self.callback, methods=["GET"]),
            Route(LOGOUT_PATH, self.logout, methods=["POST"]),
        ]


def _metadata_http(settings: Settings, outbound: OutboundHttp | None) -> HttpClient:
    """The process's pooled client when there is one, else a client for the one request."""
    if outbound is not None:
        return lambda: contextlib.nullcontext(outbound.client)
    return lambda: httpx.AsyncClient(timeout=settings.http_timeout, follow_redirects=False)


def _signed_out(request: Request) -> Response:
    return message(
        request,
        "Signed out",
        "You are signed out of this server.",
        200,
        back=CONNECTIONS_PATH,
        back_text="Sign in again to see your connections",
    )
