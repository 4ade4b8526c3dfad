"""`/connect` and `/callback`: the browser half of a URL-mode elicitation.

/connect   the browser's session user must be the user who asked (client-elicitation.mdx,
           "Phishing"); then a one-time `state`, bound to the elicitation and this browser,
           and a redirect to the provider with PKCE S256.
/callback  the state is consumed once; same browser, same user; RFC 9207 `iss`; the code is
           exchanged at the token endpoint stored with the state; the token set is stored,
           then the elicitation is completed and the MCP session notified.
"""

from __future__ import annotations

import logging
import re
import secrets
import time

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from connect_routes.browser_session import BrowserUser, browser_user
from connect_routes.login import Login
from connect_routes.pages import message, page
from connect_routes.provider_oauth import TokenExchangeError, authorization_url, exchange_code
from service.provider_api import ProviderApiError, fetch_userinfo
from service.runtime import Runtime
from token_store import (
    Connection,
    ConnectionKey,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    StoreUnavailable,
    UserRef,
)

logger = logging.getLogger(__name__)

OPAQUE_ID = re.compile(r"^[A-Za-z0-9_-]{16,128}$")  # ids and states we mint: token_urlsafe(32)
MAX_PARAM = 2048


def same_user(browser: BrowserUser, user: UserRef) -> bool:
    """DESIGN invariant 2: the browser's user is the user the elicitation was created for."""
    return browser.user == user


class ConnectRoutes:
    def __init__(self, runtime: Runtime, login: Login) -> None:
        self._runtime = runtime
        self._settings = runtime.settings
        self._login = login

    def routes(self) -> list[Route]:
        return [
            Route("/connect", self.connect, methods=["GET"]),
            Route("/callback", self.callback, methods=["GET"]),
        ]

    async def connect(self, request: Request) -> Response:
        elicitation_id = request.query_params.get("elicitationId", "")
        if not OPAQUE_ID.match(elicitation_id):
            return message(request, "Invalid link", "This connect link is malformed.", 400)
        browser = browser_user(request, self._settings)
        if browser is None:
            return self._login.redirect_to_login(f"/connect?elicitationId={elicitation_id}")
        try:
            return await self._start_authorization(request, browser, elicitation_id)
        except StoreUnavailable:
            return _unavailable(request)

    async def _start_authorization(
        self, request: Request, browser: BrowserUser, elicitation_id: str
    ) -> Response:
        store = self._runtime.store
        elicitation = await store.get_elicitation(elicitation_id)
        if elicitation is None:
            return message(
                request,
                "Link expired",
                "This link is unknown or has expired. Ask again from your MCP client.",
                404,
            )
        if not same_user(browser, elicitation.user):
            logger.warning("connect: browser user differs from the elicitation's user; refused")
            return message(
                request,
                "Not your link",
                "This link was created for another account. Sign in as the account that asked, "
                "or ask again from your own MCP client.",
                403,
            )
        provider = self._settings.providers.get(elicitation.provider)
        if provider is None:
            return message(request, "Unknown service", "This server no longer offers that service.", 404)
        # Single use: only one browser visit moves the elicitation out of PENDING.
        opened = await store.transition_elicitation(
            elicitation.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED
        )
        if opened is None:
            return message(
                request,
                "Link already used",
                "This link was already used. Ask again from your MCP client.",
                409,
            )
        now = time.time()
        state = OAuthState(
            state=secrets.token_urlsafe(32),  # DESIGN invariant 3
            elicitation=opened,
            browser_binding=browser.binding,
            code_verifier=secrets.token_urlsafe(64),  # RFC 7636 §4.1: 43-128 chars of high entropy
            redirect_uri=self._settings.callback_url,
            token_endpoint=provider.token_url,
            expected_issuer=provider.issuer,
            created_at=now,
            expires_at=now + self._settings.state_ttl,
        )
        await store.put_oauth_state(state)
        url = authorization_url(provider, state.redirect_uri, opened.scopes, state.state, state.code_verifier)
        return RedirectResponse(url, status_code=303)

    async def callback(self, request: Request) -> Response:
        params = request.query_params
        if any(len(v) > MAX_PARAM for v in params.values()):
            return message(request, "Invalid request", "A parameter is too long.", 400)
        state_value = params.get("state", "")
        if not OPAQUE_ID.match(state_value):
            return message(request, "Invalid request", "The state parameter is missing or malformed.", 400)
        try:
            return await self._finish(request, state_value)
        except StoreUnavailable:
            return _unavailable(request)

    async def _finish(self, request: Request, state_value: str) -> Response:
        store = self._runtime.store
        params = request.query_params
        # Consumed before any other check: a state is good for exactly one callback.
        state = await store.take_oauth_state(state_value)
        if state is None:
            return message(
                request, "Link expired", "This sign-in is unknown, expired or already finished.", 400
            )
        elicitation = state.elicitation
        browser = browser_user(request, self._settings)
        if (
            browser is None
            or browser.binding != state.browser_binding
            or not same_user(browser, elicitation.user)
        ):
            await self._fail(elicitation)
            logger.warning("callback: not the browser or user that started the flow; refused")
            return message(
                request, "Not allowed", "Finish the sign-in in the browser where you started it.", 403
            )
        provider = self._settings.providers.get(elicitation.provider)
        if provider is None:
            await self._fail(elicitation)
            return message(request, "Unknown service", "This server no longer offers that service.", 404)
        if state.expected_issuer is not None and params.get("iss") != state.expected_issuer:
            # RFC 9207 §2.4: a missing or different `iss` means a mix-up; do not redeem the code.
            await self._fail(elicitation)
            logger.warning("callback: issuer mismatch for provider %s", provider.name)
            return message(
                request, "Sign-in refused", "The response did not come from the expected service.", 400
            )
        if "error" in params:
            await self._fail(elicitation)
            return page(
                request,
                "provider_error.html",
                400,
                provider=provider.display_name,
                error=params.get("error", "")[:64],
                description=params.get("error_description", "")[:256],
            )
        code = params.get("code", "")
        if not code:
            await self._fail(elicitation)
            return message(request, "Invalid request", "The response carries no authorization code.", 400)
        try:
            tokens = await exchange_code(
                provider,
                token_endpoint=state.token_endpoint,
                redirect_uri=state.redirect_uri,
                scopes=elicitation.scopes,
                code=code,
                code_verifier=state.code_verifier,
                timeout_seconds=self._settings.http_timeout,
            )
            profile = await fetch_userinfo(self._runtime.http, provider, tokens.access_token)
        except (TokenExchangeError, ProviderApiError) as exc:
            await self._fail(elicitation)
            logger.warning("callback: provider %s: %s", provider.name, exc)
            return message(request, "Connection failed", f"{provider.display_name}: {exc}.", 502)
        account = profile.get(provider.account_field)
        if account is None or isinstance(account, (dict, list)):
            await self._fail(elicitation)
            return message(
                request, "Connection failed", f"{provider.display_name} did not name the account.", 502
            )
        now = time.time()
        connection = Connection(
            key=ConnectionKey(elicitation.user, provider.name, str(account)),
            tokens=tokens,
            account_label=str(profile.get(provider.label_field, account))[:128],
            connected_at=now,
            updated_at=now,
        )
        await store.put_connection(connection)  # the token set first, then the completion
        completed = await store.transition_elicitation(
            elicitation.id, ElicitationStatus.OPENED, ElicitationStatus.COMPLETE
        )
        if completed is not None:
            await self._runtime.hub.completed(completed)
        logger.info("connected provider=%s account=%s", provider.name, connection.key.account)
        return page(
            request, "connected.html", 200, provider=provider.display_name, account=connection.account_label
        )

    async def _fail(self, elicitation: PendingElicitation) -> None:
        await self._runtime.store.transition_elicitation(
            elicitation.id, ElicitationStatus.OPENED, ElicitationStatus.FAILED
        )


def _unavailable(request: Request) -> Response:
    return message(
        request, "Temporarily unavailable", "The server cannot reach its storage. Try again shortly.", 503
    )
