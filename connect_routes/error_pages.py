"""The one mapping from the domain's errors (`service/errors.py`) to HTML pages.

Routes and the connect flow raise; this Starlette exception handler renders `message.html` (or
the provider's error page) with the refusal's title, text and status. Registered on the app in
service/app.py (`exception_handlers=ERROR_PAGES`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response

from connect_routes.browser_session import browser_user, csrf_token
from connect_routes.headers import HEADERS
from connect_routes.pages import message, page
from service.errors import BrowserRefusal, ElicitationUserMismatch, ProviderDenied, ProviderFailure
from service.flow.security_checks import require_safe_next
from service.settings import Settings
from service.urls import origin
from token_store import StoreUnavailable

logger = logging.getLogger(__name__)

STORE_DOWN_TITLE = "Temporarily unavailable"
STORE_DOWN_TEXT = "The server cannot reach its storage. Try again shortly."


async def error_page(request: Request, exc: Exception) -> Response:
    """The page for a refusal or failure of a browser route."""
    if isinstance(exc, BrowserRefusal):
        logger.info("browser route refused: %s", type(exc).__name__)
        if isinstance(exc, ElicitationUserMismatch):
            return _not_your_link(request, exc)
        return message(request, exc.title, exc.text, exc.status_code)
    if isinstance(exc, ProviderFailure):
        return message(request, "Connection failed", f"{exc.provider}: {exc}.", 502)
    if isinstance(exc, ProviderDenied):
        return page(
            request,
            "provider_error.html",
            400,
            provider=exc.provider,
            error=exc.error,
            description=exc.description,
        )
    if isinstance(exc, StoreUnavailable):
        return message(request, STORE_DOWN_TITLE, STORE_DOWN_TEXT, 503)
    raise exc  # not ours to render: Starlette's 500


def _not_your_link(request: Request, exc: ElicitationUserMismatch) -> Response:
    """Say who is signed in here, and offer to sign out and come back to the link as the account
    that asked (a fresh sign-in: see `Login.logout`). The same-user check itself stays the
    flow's; this page only helps the user past it honestly."""
    # The link itself (GET /connect); anything that is not one of our paths is dropped.
    next_path = (
        require_safe_next(f"{request.url.path}?{request.url.query}") if request.method == "GET" else None
    )
    return offer_sign_out(request, request.app.state.runtime.settings, exc, next_path)


def offer_sign_out(
    request: Request,
    settings: Settings,
    exc: BrowserRefusal,
    next_path: str | None,
    *,
    title: str | None = None,
    continue_as: bool = False,
) -> Response:
    """`exc`'s page, saying who is signed in here, with the CSRF-protected "sign out and continue"
    to `next_path` (a fresh sign-in) and, with `continue_as`, a link on to it as that user."""
    browser = browser_user(request, settings)
    if browser is None:
        return message(request, title or exc.title, exc.text, exc.status_code)
    context: dict[str, str] = {"signed_in_as": browser.user.sub, "csrf": csrf_token(request)}
    if next_path is not None:
        context["next"] = next_path
        if continue_as:
            context |= {"back": next_path, "back_text": f"Continue as {browser.user.sub}"}
    response = message(request, title or exc.title, exc.text, exc.status_code, **context)
    # The sign-out POST answers with redirects on to the authorization server's sign-in:
    # allow that origin for this form (browsers apply form-action to those redirects too).
    response.headers["Content-Security-Policy"] = HEADERS["Content-Security-Policy"].replace(
        "form-action 'self'", f"form-action 'self' {origin(settings.auth_issuer)}"
    )
    return response


ERROR_PAGES: Mapping[type[Exception], Callable[[Request, Exception], Awaitable[Response]]] = {
    BrowserRefusal: error_page,
    ProviderFailure: error_page,
    ProviderDenied: error_page,
    StoreUnavailable: error_page,
}
