"""The browser session: who is logged in, since when, and which browser this is.

Starlette's SessionMiddleware (an itsdangerous-signed cookie) carries it. We add the absolute
lifetime (the cookie's own max-age slides on every response), rotation at login, the browser
binding used by OAuth states, and a per-session CSRF token. The checks themselves are
`require_session_within_lifetime`, `rotate_session_on_login` and `require_csrf_token` in
service/flow/security_checks.py; this module only reads and writes the session.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request

from service.errors import CsrfTokenMismatch, SessionExpired
from service.flow.security_checks import (
    mint_opaque_id,
    require_csrf_token,
    require_session_within_lifetime,
    rotate_session_on_login,
)
from service.settings import Settings
from token_store import UserRef

# What the ID token says about the user besides `sub`, kept with it to show on our pages.
PROFILE_CLAIMS = ("name", "email")
MAX_PROFILE_CLAIM = 128  # the session is a cookie


@dataclass(frozen=True)
class BrowserUser:
    user: UserRef
    binding: str  # hash of this browser session's random id; ties OAuth states to this browser
    name: str | None = None
    email: str | None = None
    auth_time: float | None = None  # when the user authenticated at the issuer (ID token)


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


def browser_user(request: Request, settings: Settings, clock: float | None = None) -> BrowserUser | None:
    """The logged-in user of this browser, or None (no session, malformed, or past its lifetime)."""
    session = request.session
    user, login_at, browser_id = session.get("user"), session.get("login_at"), session.get("bid")
    if not (isinstance(user, dict) and isinstance(login_at, (int, float)) and isinstance(browser_id, str)):
        return None
    now = time.time() if clock is None else clock
    try:
        require_session_within_lifetime(login_at, now, settings.session_max_age)
    except SessionExpired:
        session.clear()
        return None
    iss, sub = user.get("iss"), user.get("sub")
    if not (isinstance(iss, str) and isinstance(sub, str)):
        return None
    name, email, auth_time = user.get("name"), user.get("email"), user.get("auth_time")
    return BrowserUser(
        UserRef(iss=iss, sub=sub),
        binding_of(browser_id),
        name=name if isinstance(name, str) else None,
        email=email if isinstance(email, str) else None,
        auth_time=auth_time if isinstance(auth_time, (int, float)) else None,
    )


def start_session(request: Request, user: UserRef, claims: Mapping[str, object] | None = None) -> None:
    """Log `user` in: a fresh session (no state carried over from before login), with the name,
    e-mail and authentication time of the ID token's `claims` when it has them."""
    rotate_session_on_login(request.session, user, time.time())
    claims = claims or {}
    shown: dict[str, str | int] = {
        key: value[:MAX_PROFILE_CLAIM]
        for key in PROFILE_CLAIMS
        if isinstance(value := claims.get(key), str) and value.strip()
    }
    auth_time = claims.get("auth_time")
    if isinstance(auth_time, int) and not isinstance(auth_time, bool):
        shown["auth_time"] = auth_time
    request.session["user"].update(shown)


def binding_of(browser_id: str) -> str:
    return hashlib.sha256(browser_id.encode()).hexdigest()


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = mint_opaque_id()
        request.session["csrf"] = token
    return token


def check_csrf(
    request: Request, submitted: object, refusal: type[CsrfTokenMismatch] = CsrfTokenMismatch
) -> None:
    """`require_csrf_token` against this session's token."""
    require_csrf_token(request.session.get("csrf"), submitted, refusal)
