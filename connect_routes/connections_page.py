"""The user's connections: list them, disconnect one, choose the default account at a provider
(POSTs, CSRF-protected).

After a disconnect the page says what happened through a one-time flash value in the signed
session cookie: the redirect's URL names no account (URLs end up in histories and logs)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from connect_routes.browser_session import browser_user, check_csrf, csrf_token, session_of
from connect_routes.login import Login
from connect_routes.pages import page
from service.errors import ConnectionsPageNotSignedIn, InvalidRequest
from service.flow.browser_session import BrowserUser, DisconnectedNotice
from service.flow.connections import Connections
from service.flow.disconnect import disconnect_one
from service.flow.security_checks import require_same_origin, require_signed_in
from service.runtime import Runtime
from service.urls import CONNECTIONS_DEFAULT_PATH, CONNECTIONS_DISCONNECT_PATH, CONNECTIONS_PATH
from token_store import ConnectionKey

MAX_FIELD = 256


class ConnectionsPage:
    def __init__(self, runtime: Runtime, login: Login) -> None:
        self._runtime = runtime
        self._login = login
        self._connections = Connections(runtime.store)

    def routes(self) -> list[Route]:
        return [
            Route(CONNECTIONS_PATH, self.show, methods=["GET"]),
            Route(CONNECTIONS_DISCONNECT_PATH, self.disconnect, methods=["POST"]),
            Route(CONNECTIONS_DEFAULT_PATH, self.set_default, methods=["POST"]),
        ]

    async def show(self, request: Request) -> Response:
        browser = browser_user(request, self._runtime.settings)
        if browser is None:
            return self._login.redirect_to_login(CONNECTIONS_PATH)
        connections = await self._connections.of_user(browser.user)
        providers = {c.key.provider for c in connections}
        defaults = await self._connections.default_accounts(browser.user, providers)
        several = {p for p in providers if sum(c.key.provider == p for c in connections) > 1}
        return page(
            request,
            "connections.html",
            user=browser.user.sub,
            connections=await self._runtime.lifecycle.describe(connections),
            defaults=defaults,
            several=several,
            csrf=csrf_token(request),
            notice=session_of(request).take_disconnected(),
        )

    async def _account_form(self, request: Request) -> tuple[BrowserUser, str, str]:
        """What both POSTs of this page check first: our own origin (when named), a signed-in
        browser, the session's CSRF token, and a bounded provider and account."""
        # mutant: origin.connections_posts
        require_same_origin(request.headers.get("origin"), self._runtime.settings.public_url)
        browser = require_signed_in(browser_user(request, self._runtime.settings), ConnectionsPageNotSignedIn)
        form = await request.form(max_files=0, max_fields=8, max_part_size=1024)
        # mutant: connections.csrf
        check_csrf(request, form.get("csrf"))
        provider, account = form.get("provider"), form.get("account")
        if (
            not (isinstance(provider, str) and isinstance(account, str))
            or max(len(provider), len(account)) > MAX_FIELD
        ):
            raise InvalidRequest("The form is incomplete.")
        return browser, provider, account

    async def disconnect(self, request: Request) -> Response:
        browser, provider, account = await self._account_form(request)
        # The key is built from the session user: a form cannot name another user's record.
        config = self._runtime.settings.providers.get(provider)
        done = await disconnect_one(
            self._runtime.store,
            config,
            ConnectionKey(browser.user, provider, account),
            self._runtime.outbound,
            self._runtime.connection_events,
        )
        if done is not None:
            session_of(request).flash_disconnected(
                DisconnectedNotice(
                    disconnected=config.display_name if config else provider,
                    disconnected_account=done.label,
                    revoked=done.revoked,
                )
            )
        return RedirectResponse(CONNECTIONS_PATH, status_code=303)

    async def set_default(self, request: Request) -> Response:
        """Make one of the user's own accounts the default at its provider, or forget the default
        (`account` empty: the next call with several accounts asks again)."""
        browser, provider, account = await self._account_form(request)
        chosen = await self._connections.own_account(browser.user, provider, account) if account else None
        await self._connections.remember_default(browser.user, provider, chosen)
        return RedirectResponse(CONNECTIONS_PATH, status_code=303)
