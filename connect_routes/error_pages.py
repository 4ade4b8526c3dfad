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

from connect_routes.pages import message, page
from service.errors import BrowserRefusal, ProviderDenied, ProviderFailure, StoreUnavailable

logger = logging.getLogger(__name__)

STORE_DOWN_TITLE = "Temporarily unavailable"
STORE_DOWN_TEXT = "The server cannot reach its storage. Try again shortly."


async def error_page(request: Request, exc: Exception) -> Response:
    """The page for a refusal or failure of a browser route."""
    if isinstance(exc, BrowserRefusal):
        logger.info("browser route refused: %s", type(exc).__name__)
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


ERROR_PAGES: Mapping[type[Exception], Callable[[Request, Exception], Awaitable[Response]]] = {
    BrowserRefusal: error_page,
    ProviderFailure: error_page,
    ProviderDenied: error_page,
    StoreUnavailable: error_page,
}
