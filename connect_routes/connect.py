"""`/connect` and `/callback`: the browser half of a URL-mode elicitation.

The routes parse the request, call the connect flow (service/flow/connect.py, which owns the
elicitation's status and runs the checks of service/flow/security_checks.py) and render its result.
Refusals are raised as `service.errors` and rendered by connect_routes/error_pages.py.

/connect   GET: the browser's session user must be the user who asked (client-elicitation.mdx,
           "Phishing"); the page shows which account is connecting which service, for which MCP
           client and since when. Signed out: the login, told what it is for.
           POST (CSRF-protected): a one-time `state`, bound to the elicitation and this browser,
           and a redirect to the provider with PKCE S256.
/connect/cancel  POST (CSRF-protected, same checks as POST /connect): the link stops working and
           the MCP client that asked is told it was declined.
/callback/<provider>  the state is consumed once; same browser, same user, same provider
           (one redirect URI per provider); RFC 9207 `iss`; the code is
           exchanged at the token endpoint stored with the state; the token set is stored,
           then the elicitation is completed and the MCP session notified.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from connect_routes.browser_session import browser_user, check_csrf, csrf_token
from connect_routes.headers import HEADERS
from connect_routes.login import Login
from connect_routes.pages import message, page, timestamp
from service.errors import (
    BlankClientName,
    ConnectCsrfTokenMismatch,
    InvalidApiKey,
    InvalidRequest,
    MalformedElicitationId,
    NotSignedIn,
)
from service.flow.browser_session import BrowserUser
from service.flow.connect import API_KEY_MAX_LENGTH, CallbackParams
from service.flow.security_checks import (
    require_opaque_id,
    require_same_origin,
    require_signed_in,
    require_visible_client_name,
)
from service.providers.catalogue import ProviderConfig
from service.runtime import Runtime
from service.urls import (
    CALLBACK_PATH,
    CONNECT_API_KEY_PATH,
    CONNECT_CANCEL_PATH,
    CONNECT_PATH,
    ELICITATION_ID_PARAM,
    connect_link,
    origin,
)
from token_store import PendingElicitation

MAX_PARAM = 2048
MAX_CLIENT_SHOWN = 64  # a client id may be a long URL (client ID metadata documents)
FRESH_SIGN_IN = 300  # seconds since the issuer authenticated the user that count as "just now"

CANCELLED_TITLE = "Connection cancelled"
CANCELLED_TEXT = "Nothing was connected. Your MCP client is told; you can close this tab."


class ConnectRoutes:
    def __init__(self, runtime: Runtime, login: Login) -> None:
        self._settings = runtime.settings
        self._login = login
        self._flow = runtime.flow

    def routes(self) -> list[Route]:
        return [
            Route(CONNECT_PATH, self.confirm, methods=["GET"]),
            Route(CONNECT_PATH, self.connect, methods=["POST"]),
            Route(CALLBACK_PATH, self.callback, methods=["GET"]),
            Route(CONNECT_API_KEY_PATH, self.api_key, methods=["POST"]),
            Route(CONNECT_CANCEL_PATH, self.cancel, methods=["POST"]),
        ]

    async def confirm(self, request: Request) -> Response:
        """GET: check the link and the user, then show who is connecting what (no state change)."""
        elicitation_id = require_opaque_id(
            request.query_params.get(ELICITATION_ID_PARAM, ""), MalformedElicitationId
        )
        browser = browser_user(request, self._settings)
        if browser is None:
            return self._login.redirect_to_login(
                connect_link(elicitation_id), request, await self._purpose(elicitation_id)
            )
        link = await self._flow.check_link(browser.user, elicitation_id)
        elicitation, provider = link.elicitation, link.provider
        if provider.kind == "api_key":
            return self._api_key_form(request, browser, elicitation, provider)
        response = page(
            request,
            "confirm.html",
            provider=provider.display_name,
            account=browser.user.sub,
            name=browser.name,
            email=browser.email,
            issuer_host=urlsplit(browser.user.iss).netloc,
            fresh=browser.auth_time is not None and 0 <= time.time() - browser.auth_time <= FRESH_SIGN_IN,
            scopes=elicitation.scopes,
            elicitation_id=elicitation.id,
            csrf=csrf_token(request),
            client_name=_client_shown(elicitation),
            requested_at=timestamp(elicitation.created_at),
        )
        # The form's POST answers with a redirect to the provider: allow that origin for it.
        response.headers["Content-Security-Policy"] = HEADERS["Content-Security-Policy"].replace(
            "form-action 'self'", f"form-action 'self' {origin(provider.authorize_url)}"
        )
        return response

    async def connect(self, request: Request) -> Response:
        """POST from the confirmation page: one-time state, then the provider's authorize endpoint."""
        browser, _form, elicitation_id = await self._posted(request, max_part_size=1024)
        link = await self._flow.check_link(browser.user, elicitation_id)
        url = await self._flow.open(link, browser.binding)
        return RedirectResponse(url, status_code=303)

    async def cancel(self, request: Request) -> Response:
        """POST from Cancel on the confirmation or API-key page: pending → failed (the flow's
        `decline`, which also tells the MCP session that asked), after the checks of POST /connect."""
        # mutant: connect.csrf_on_cancel "await self._posted(request, max_part_size=1024)" -> \
        #   "(require_signed_in(browser_user(request, self._settings), NotSignedIn), None, " \
        #   "str((await request.form()).get('elicitationId')))"
        browser, _form, elicitation_id = await self._posted(request, max_part_size=1024)
        # mutant: connect.same_user_on_cancel "browser.user" -> \
        #   "((await self._flow.elicitation(elicitation_id)) or browser).user"
        link = await self._flow.check_link(browser.user, elicitation_id)
        await self._flow.decline(link.elicitation.id)
        return message(request, CANCELLED_TITLE, CANCELLED_TEXT, 200)

    async def _purpose(self, elicitation_id: str) -> str | None:
        """What a signed-out visitor is asked to sign in for, e.g. "connect MockHub for the MCP
        client Claude". Only the service and the client's own name: nothing about the user, and
        no same-user check has run yet, so no more than the link's holder was shown already."""
        named = await self._flow.unchecked_link(elicitation_id)
        if named is None:
            return None
        elicitation, provider = named
        return f"connect {provider.display_name} for the MCP client {_client_shown(elicitation)}"

    async def _posted(self, request: Request, *, max_part_size: int) -> tuple[BrowserUser, FormData, str]:
        """The checks every POST of the connect pages makes first, in one place: our own origin
        (when named), a signed-in browser, a bounded form, the session's CSRF token, an id of the
        shape we mint."""
        # mutant: origin.connect_posts
        require_same_origin(request.headers.get("origin"), self._settings.public_url)
        browser = require_signed_in(browser_user(request, self._settings), NotSignedIn)
        form = await request.form(max_files=0, max_fields=4, max_part_size=max_part_size)
        # mutant: connect.csrf_on_posts
        check_csrf(request, form.get("csrf"), ConnectCsrfTokenMismatch)
        elicitation_id = form.get(ELICITATION_ID_PARAM)
        if not isinstance(elicitation_id, str):
            raise ConnectCsrfTokenMismatch()
        return browser, form, require_opaque_id(elicitation_id, MalformedElicitationId)

    def _api_key_form(
        self,
        request: Request,
        browser: BrowserUser,
        elicitation: PendingElicitation,
        provider: ProviderConfig,
        error: str = "",
        status_code: int = 200,
    ) -> Response:
        # client-elicitation.mdx: secrets such as API keys go through a URL-mode page of the
        # server, never through form-mode elicitation (the client and the model would see them).
        return page(
            request,
            "api_key.html",
            status_code,
            provider=provider.display_name,
            account=browser.user.sub,
            elicitation_id=elicitation.id,
            csrf=csrf_token(request),
            error=error,
            client_name=_client_shown(elicitation),
            requested_at=timestamp(elicitation.created_at),
        )

    async def api_key(self, request: Request) -> Response:
        """POST from the API-key page: check the key with the provider, then store it encrypted."""
        browser, form, elicitation_id = await self._posted(request, max_part_size=API_KEY_MAX_LENGTH + 64)
        key = form.get("api_key")
        link = await self._flow.check_link(browser.user, elicitation_id)
        try:
            connection = await self._flow.open_with_api_key(link, key if isinstance(key, str) else "")
        except InvalidApiKey as refused:
            return self._api_key_form(request, browser, link.elicitation, link.provider, refused.text, 400)
        return _connected(request, link.provider, connection.account_label)

    async def callback(self, request: Request) -> Response:
        """The provider's redirect back: bounded parameters, then the flow's `finish` (which
        consumes the state before anything else)."""
        params = request.query_params
        if any(len(v) > MAX_PARAM for v in params.values()):
            raise InvalidRequest("A parameter is too long.")
        browser = browser_user(request, self._settings)
        provider, connection = await self._flow.finish(
            CallbackParams(
                path_provider=request.path_params.get("provider"),
                query=params,
                session_user=browser.user if browser else None,
                session_binding=browser.binding if browser else None,
            )
        )
        return _connected(request, provider, connection.account_label)


def _client_shown(elicitation: PendingElicitation) -> str:
    """Which MCP client asked: its own name when it gave one at `initialize` and it shows (no
    blank or invisible letters, `require_visible_client_name`), else the client id of its access
    token; untrusted text, cut short here and escaped by Jinja."""
    if elicitation.client_name:
        try:
            return require_visible_client_name(elicitation.client_name)[:MAX_CLIENT_SHOWN]
        except BlankClientName:
            pass
    return elicitation.client_id[:MAX_CLIENT_SHOWN]


def _connected(request: Request, provider: ProviderConfig, account_label: str) -> Response:
    return page(request, "connected.html", 200, provider=provider.display_name, account=account_label)
