"""`/connect` and `/callback`: the browser half of a URL-mode elicitation.

/connect   GET: the browser's session user must be the user who asked (client-elicitation.mdx,
           "Phishing"); the page shows which account is connecting which service.
           POST (CSRF-protected): a one-time `state`, bound to the elicitation and this browser,
           and a redirect to the provider with PKCE S256.
/callback/<provider>  the state is consumed once; same browser, same user, same provider
           (one redirect URI per provider); RFC 9207 `iss`; the code is
           exchanged at the token endpoint stored with the state; the token set is stored,
           then the elicitation is completed and the MCP session notified.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import time
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from connect_routes.browser_session import BrowserUser, browser_user, csrf_ok, csrf_token
from connect_routes.headers import HEADERS
from connect_routes.login import Login
from connect_routes.pages import message, page
from service.audit import audit
from service.provider_api import ProviderApiError, fetch_userinfo, field_at
from service.provider_oauth import TokenExchangeError, authorization_url, exchange_code
from service.providers import ProviderConfig
from service.runtime import Runtime
from token_store import (
    Connection,
    ConnectionKey,
    ConnectionStatus,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    StoreUnavailable,
    TokenSet,
    UserRef,
)

logger = logging.getLogger(__name__)

OPAQUE_ID = re.compile(
    r"[A-Za-z0-9_-]{16,128}"
)  # used with fullmatch  # ids and states we mint: token_urlsafe(32)
MAX_PARAM = 2048
MAX_API_KEY = 4096
API_KEY = re.compile(r"[\x21-\x7e]{8,4096}")  # printable, no spaces: what keys look like


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
            Route("/connect", self.confirm, methods=["GET"]),
            Route("/connect", self.connect, methods=["POST"]),
            Route("/callback/{provider}", self.callback, methods=["GET"]),
            Route("/connect/api-key", self.api_key, methods=["POST"]),
        ]

    async def confirm(self, request: Request) -> Response:
        """GET: check the link and the user, then show who is connecting what (no state change)."""
        elicitation_id = request.query_params.get("elicitationId", "")
        if not OPAQUE_ID.fullmatch(elicitation_id):
            return message(request, "Invalid link", "This connect link is malformed.", 400)
        browser = browser_user(request, self._settings)
        if browser is None:
            return self._login.redirect_to_login(f"/connect?elicitationId={elicitation_id}")
        try:
            checked = await self._checked(request, browser, elicitation_id)
        except StoreUnavailable:
            return _unavailable(request)
        if isinstance(checked, Response):
            return checked
        elicitation, provider = checked
        if provider.kind == "api_key":
            return self._api_key_form(request, browser, elicitation, provider)
        response = page(
            request,
            "confirm.html",
            provider=provider.display_name,
            account=browser.user.sub,
            scopes=elicitation.scopes,
            elicitation_id=elicitation.id,
            csrf=csrf_token(request),
        )
        # The form's POST answers with a redirect to the provider: allow that origin for it.
        response.headers["Content-Security-Policy"] = HEADERS["Content-Security-Policy"].replace(
            "form-action 'self'", f"form-action 'self' {_origin(provider.authorize_url)}"
        )
        return response

    async def connect(self, request: Request) -> Response:
        """POST from the confirmation page: one-time state, then the provider's authorize endpoint."""
        posted = await self._posted(request, max_part_size=1024)
        if isinstance(posted, Response):
            return posted
        browser, _form, elicitation_id = posted
        try:
            checked = await self._checked(request, browser, elicitation_id)
            if isinstance(checked, Response):
                return checked
            return await self._redirect_to_provider(request, browser, *checked)
        except StoreUnavailable:
            return _unavailable(request)

    async def _posted(
        self, request: Request, *, max_part_size: int
    ) -> tuple[BrowserUser, FormData, str] | Response:
        """The checks every POST of the connect pages makes first, in one place: a signed-in
        browser, a bounded form, the session's CSRF token (OWASP synchronizer token), an id of
        the shape we mint."""
        browser = browser_user(request, self._settings)
        if browser is None:
            return message(request, "Not signed in", "Open the link from your MCP client again.", 401)
        form = await request.form(max_files=0, max_fields=4, max_part_size=max_part_size)
        elicitation_id = form.get("elicitationId")
        if not csrf_ok(request, form.get("csrf")) or not isinstance(elicitation_id, str):
            return message(request, "Not allowed", "The form was stale. Open the link again.", 403)
        if not OPAQUE_ID.fullmatch(elicitation_id):
            return message(request, "Invalid link", "This connect link is malformed.", 400)
        return browser, form, elicitation_id

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
        )

    async def api_key(self, request: Request) -> Response:
        """POST from the API-key page: check the key with the provider, then store it encrypted."""
        posted = await self._posted(request, max_part_size=MAX_API_KEY + 64)
        if isinstance(posted, Response):
            return posted
        browser, form, elicitation_id = posted
        key = form.get("api_key")
        try:
            checked = await self._checked(request, browser, elicitation_id)
            if isinstance(checked, Response):
                return checked
            elicitation, provider = checked
            if provider.kind != "api_key":
                return message(request, "Invalid request", "This service does not use API keys.", 400)
            key = key.strip() if isinstance(key, str) else ""
            if not API_KEY.fullmatch(key):
                return self._api_key_form(
                    request, browser, elicitation, provider, "That does not look like a key.", 400
                )
            profile: dict[str, Any] = {provider.account_field: "default"}
            if provider.userinfo_url:
                try:
                    profile = await fetch_userinfo(self._runtime.http, provider, key)
                except ProviderApiError as exc:
                    return self._api_key_form(request, browser, elicitation, provider, f"{exc}.", 400)
            opened = await self._runtime.store.transition_elicitation(
                elicitation.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED
            )
            if opened is None:
                return message(
                    request,
                    "Link already used",
                    "This link was already used. Ask again from your MCP client.",
                    409,
                )
            return await self._complete(request, opened, provider, TokenSet(access_token=key), profile)
        except StoreUnavailable:
            return _unavailable(request)

    async def _checked(
        self, request: Request, browser: BrowserUser, elicitation_id: str
    ) -> tuple[PendingElicitation, ProviderConfig] | Response:
        """The live elicitation and its provider, or the page that says why not."""
        elicitation = await self._runtime.store.get_elicitation(elicitation_id)
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
        if elicitation.status is not ElicitationStatus.PENDING:
            return message(
                request,
                "Link already used",
                "This link was already used. Ask again from your MCP client.",
                409,
            )
        return elicitation, provider

    async def _redirect_to_provider(
        self,
        request: Request,
        browser: BrowserUser,
        elicitation: PendingElicitation,
        provider: ProviderConfig,
    ) -> Response:
        store = self._runtime.store
        now = time.time()
        state = OAuthState(
            state=secrets.token_urlsafe(32),  # DESIGN invariant 3
            elicitation=elicitation,
            browser_binding=browser.binding,
            code_verifier=secrets.token_urlsafe(64),  # RFC 7636 §4.1: 43-128 chars of high entropy
            redirect_uri=self._settings.callback_url(provider.name),
            token_endpoint=provider.token_url,
            expected_issuer=provider.issuer,
            created_at=now,
            expires_at=min(now + self._settings.state_ttl, elicitation.expires_at),
        )
        # State first, then the transition: a store failure between the two leaves at most an
        # unusable state behind, never an OPENED elicitation with no way to finish it.
        await store.put_oauth_state(state)
        opened = await store.transition_elicitation(
            elicitation.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED
        )
        if opened is None:  # single use: another visit won the race
            await store.take_oauth_state(state.state)
            return message(
                request,
                "Link already used",
                "This link was already used. Ask again from your MCP client.",
                409,
            )
        held = await store.get_connection(elicitation.user, provider.name)
        url = authorization_url(
            provider,
            state.redirect_uri,
            opened.scopes,
            state.state,
            state.code_verifier,
            # A held refresh token counts only while the grant is healthy.
            need_refresh_token=held is None
            or held.tokens.refresh_token is None
            or held.status is not ConnectionStatus.OK,
        )
        return RedirectResponse(url, status_code=303)

    async def callback(self, request: Request) -> Response:
        params = request.query_params
        if any(len(v) > MAX_PARAM for v in params.values()):
            return message(request, "Invalid request", "A parameter is too long.", 400)
        state_value = params.get("state", "")
        if not OPAQUE_ID.fullmatch(state_value):
            return message(request, "Invalid request", "The state parameter is missing or malformed.", 400)
        try:
            # Consumed before any other check: a state is good for exactly one callback.
            state = await self._runtime.store.take_oauth_state(state_value)
        except StoreUnavailable:
            return _unavailable(request)
        if state is None:
            return message(
                request, "Link expired", "This sign-in is unknown, expired or already finished.", 400
            )
        try:
            return await self._finish(request, state)
        except StoreUnavailable:
            await self._fail(state.elicitation)
            return _unavailable(request)
        except Exception:
            # Anything unexpected after the state was consumed: fail the flow closed, visibly.
            logger.exception("callback: unexpected error")
            await self._fail(state.elicitation)
            return message(
                request, "Connection failed", "Something went wrong. Ask again from your MCP client.", 502
            )

    async def _finish(self, request: Request, state: OAuthState) -> Response:
        params = request.query_params
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
        if provider is None or request.path_params.get("provider") != provider.name:
            # RFC 9700 §4.4.2: one redirect URI per provider; a response on another one is a mix-up.
            await self._fail(elicitation)
            return message(request, "Sign-in refused", "The response arrived for another service.", 400)
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
                outbound=self._runtime.outbound,
            )
            profile = await fetch_userinfo(self._runtime.http, provider, tokens.access_token)
        except (TokenExchangeError, ProviderApiError) as exc:
            await self._fail(elicitation)
            logger.warning("callback: provider %s: %s", provider.name, exc)
            return message(request, "Connection failed", f"{provider.display_name}: {exc}.", 502)
        return await self._complete(request, elicitation, provider, tokens, profile)

    async def _complete(
        self,
        request: Request,
        elicitation: PendingElicitation,
        provider: ProviderConfig,
        tokens: TokenSet,
        profile: dict[str, Any],
    ) -> Response:
        """Store the connection bound to the elicitation's user, then complete the elicitation."""
        account = field_at(profile, provider.account_field)
        if account is None or isinstance(account, (dict, list)):
            await self._fail(elicitation)
            return message(
                request, "Connection failed", f"{provider.display_name} did not name the account.", 502
            )
        key = ConnectionKey(elicitation.user, provider.name, str(account))
        store = self._runtime.store
        previous = await store.get_connection(key.user, key.provider, key.account)
        if (
            tokens.refresh_token is None
            and previous is not None
            and previous.tokens.refresh_token
            and previous.status is ConnectionStatus.OK
        ):
            # Google omits the refresh token on re-consent: the one we hold stays valid
            # (unless the provider already refused it).
            tokens = replace(tokens, refresh_token=previous.tokens.refresh_token)
        now = time.time()
        connection = Connection(
            key=key,
            tokens=tokens,
            account_label=str(field_at(profile, provider.label_field) or account)[:128],
            connected_at=previous.connected_at if previous else now,
            updated_at=now,
        )
        await store.put_connection(connection)  # the token set first, then the completion
        completed = await store.transition_elicitation(
            elicitation.id, ElicitationStatus.OPENED, ElicitationStatus.COMPLETE
        )
        if completed is not None:
            try:
                await self._runtime.completions.publish(completed)
            except StoreUnavailable:
                # The token is stored: the client's retry finds it even without the notification.
                logger.warning("callback: completion not published (store unavailable)")
        audit("connect", key, scopes=" ".join(tokens.scopes))
        return page(
            request, "connected.html", 200, provider=provider.display_name, account=connection.account_label
        )

    async def _fail(self, elicitation: PendingElicitation) -> None:
        # On a store failure it expires on its own; the page already says the flow failed.
        with contextlib.suppress(StoreUnavailable):
            await self._runtime.store.transition_elicitation(
                elicitation.id, ElicitationStatus.OPENED, ElicitationStatus.FAILED
            )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _unavailable(request: Request) -> Response:
    return message(
        request, "Temporarily unavailable", "The server cannot reach its storage. Try again shortly.", 503
    )
