"""HTML pages, rendered with Jinja2 (autoescaped: provider error text and names are untrusted)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates

from service.flow.connect import API_KEY_MAX_LENGTH, API_KEY_MIN_LENGTH
from service.flow.names import lookalike_note
from service.urls import (
    CONNECT_API_KEY_PATH,
    CONNECT_CANCEL_PATH,
    CONNECT_PATH,
    CONNECTIONS_DEFAULT_PATH,
    CONNECTIONS_DISCONNECT_PATH,
    CONNECTIONS_PATH,
    ELICITATION_ID_PARAM,
    LOGOUT_PATH,
)

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def timestamp(value: float | None) -> str:
    if value is None:
        return "—"
    return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


TEMPLATES.env.filters["timestamp"] = timestamp
# `{{ name|lookalike }}`: why a shown name could pass for another (its code points), or None.
TEMPLATES.env.filters["lookalike"] = lookalike_note
# The forms post to the routes' own paths (service/urls.py) and bound what the flow bounds.
TEMPLATES.env.globals.update(
    connect_path=CONNECT_PATH,
    connect_api_key_path=CONNECT_API_KEY_PATH,
    connect_cancel_path=CONNECT_CANCEL_PATH,
    elicitation_id_param=ELICITATION_ID_PARAM,
    connections_path=CONNECTIONS_PATH,
    connections_disconnect_path=CONNECTIONS_DISCONNECT_PATH,
    connections_default_path=CONNECTIONS_DEFAULT_PATH,
    logout_path=LOGOUT_PATH,
    api_key_min_length=API_KEY_MIN_LENGTH,
    api_key_max_length=API_KEY_MAX_LENGTH,
)


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)


def message(request: Request, title: str, text: str, status_code: int, **context: Any) -> HTMLResponse:
    """`message.html`; `context` may add `signed_in_as` and `csrf` (a sign-out form, continuing to
    `next` when given) and `back`/`back_text` (a link onwards)."""
    return page(request, "message.html", status_code, title=title, text=text, **context)
