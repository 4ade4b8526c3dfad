"""The shared stylesheet and the favicon, served from our own origin so the CSP can stay
`style-src 'self'` (no inline styles). The mock providers' app can serve the same files with
`static_routes()`."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

STATIC_DIR = Path(__file__).parent / "static"
STYLESHEET_PATH = "/static/mcpuc.css"
FAVICON_PATH = "/favicon.ico"

# Public files with no user data: a browser may keep them for an hour (pages stay no-store).
_CACHE = {"Cache-Control": "public, max-age=3600"}


async def stylesheet(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "mcpuc.css", media_type="text/css", headers=_CACHE)


async def favicon(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "favicon.ico", media_type="image/vnd.microsoft.icon", headers=_CACHE)


def static_routes() -> list[Route]:
    return [
        Route(STYLESHEET_PATH, stylesheet, methods=["GET"]),
        Route(FAVICON_PATH, favicon, methods=["GET"]),
    ]
