"""HTML pages of the mock servers: jinja2 templates with autoescaping on."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import jinja2
from starlette.responses import HTMLResponse

_TEMPLATE_DIR = Path(__file__).parent / "templates"

# Pages are plain forms: no scripts, no frames, nothing loaded from elsewhere; styles and the icon
# come from this server (connect_routes/static, served by `static_routes()` in app.py).
# No form-action: Chrome applies it to the redirect that follows a submission.
_PAGE_HEADERS = MappingProxyType(
    {
        "Cache-Control": "no-store",
        "Content-Security-Policy": (
            "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'"
        ),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
)


class Pages:
    """Renders the templates under ``mock_providers/templates``."""

    def __init__(self) -> None:
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_TEMPLATE_DIR),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )

    def render(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self._env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=status_code, headers=_PAGE_HEADERS)

    def message(self, title: str, message: str, status_code: int = 200) -> HTMLResponse:
        return self.render("message.html", status_code, title=title, message=message)
