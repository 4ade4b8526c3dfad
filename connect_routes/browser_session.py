"""The browser session: who is logged in, since when, and which browser this is.

Starlette's SessionMiddleware (an itsdangerous-signed cookie) carries it. We add the absolute
lifetime (the cookie's own max-age slides on every response), rotation at login, the browser
binding used by OAuth states, and a per-session CSRF token. The checks themselves are
`require_session_within_lifetime`, `rotate_session_on_login` and `require_csrf_token` in
service/flow/security_checks.py; the session's content is `BrowserSession`
(service/flow/browser_session.py); this module connects both to Starlette's request.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request

from service.errors import CsrfTokenMismatch, SessionExpired
from service.flow.browser_session import BrowserSession, BrowserUser
from service.flow.security_checks import (
    mint_opaque_id,
    require_csrf_token,
    require_session_within_lifetime,
    rotate_session_on_login,
)
from service.settings import Settings
from token_store import UserRef


def cookie_name(settings: Settings) -> str:
    # `__Host-` pins the cookie to our origin, with Secure and Path=/ (RFC 6265bis §4.1.3.2).
    # mutant: session.host_prefix orelse
    return "__Host-mcpuc_session" if settings.secure_cookies else "mcpuc_session"


def session_middleware(settings: Settings) -> Middleware:
    return Middleware(
        SessionMiddleware,
        secret_key=settings.session_secret,
        session_cookie=cookie_name(settings),
        max_age=settings.session_max_age,
        path="/",
        # Lax, not Strict: the provider's redirect to /callback is a cross-site top-level
        # navigation, and a Strict cookie would not come with it.
        # mutant: session.samesite_lax '"lax"' -> '"none"'
        same_site="lax",
        # mutant: session.secure_flag false
        https_only=settings.secure_cookies,
    )


def session_of(request: Request) -> BrowserSession:
    """This request's session, typed (what SessionMiddleware read from the cookie)."""
    return BrowserSession(request.session)


def browser_user(request: Request, settings: Settings, clock: float | None = None) -> BrowserUser | None:
    """The logged-in user of this browser, or None (no session, malformed, or past its lifetime)."""
    session = session_of(request)
    browser = session.user
    if browser is None:
        return None
    now = time.time() if clock is None else clock
    try:
        require_session_within_lifetime(browser.login_at, now, settings.session_max_age)
    except SessionExpired:
        session.clear()
        return None
    return browser


def start_session(request: Request, user: UserRef, claims: Mapping[str, object] | None = None) -> None:
    """Log `user` in: a fresh session (no state carried over from before login), with the name,
    e-mail and authentication time of the ID token's `claims` when it has them."""
    session = session_of(request)
    rotate_session_on_login(session, user, time.time())
    session.show_profile(claims or {})


def csrf_token(request: Request) -> str:
    session = session_of(request)
    token = session.csrf
    if token is None:
        token = mint_opaque_id()
        session.csrf = token
    return token


def check_csrf(
    request: Request, submitted: object, refusal: type[CsrfTokenMismatch] = CsrfTokenMismatch
) -> None:
    """`require_csrf_token` against this session's token."""
    require_csrf_token(session_of(request).csrf, submitted, refusal)
