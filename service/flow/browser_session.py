"""The browser session's content, typed: who signed in, when, in which browser, the session's CSRF
token, and the short-lived values the login and connections pages keep between two requests.

Starlette's SessionMiddleware keeps the session as a dict in a signed cookie
(connect_routes/browser_session.py). `BrowserSession` is the one view of that dict: its keys are
spelled here and nowhere else, and what it reads back is checked for type, since a cookie signed by
an earlier version of this server (or one holding anything else) must read as no session rather
than fail. The keys and the JSON shape of their values are part of the cookie format: a change
here signs every user out.

No security check lives here; `service/flow/security_checks.py` holds them and takes this view.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypedDict

from token_store import UserRef

# The cookie's keys. Authlib keeps its own (`_state_<client>_<state>`) beside them during a login.
_USER = "user"  # {"iss", "sub"} and the profile claims shown on our pages
_LOGIN_AT = "login_at"  # when this browser signed in here (Unix seconds): the absolute lifetime
_BROWSER_ID = "bid"  # this session's random id: OAuth states are bound to its hash
_CSRF = "csrf"  # the synchronizer token of every state-changing form
_NEXT = "next"  # where the login returns to
_LOGIN_PURPOSE = "login_purpose"  # what the sign-in is for, shown by the authorization server
_FLASH = "flash_disconnected"  # the connections page's one-time "disconnected ..." notice

# What the ID token says about the user besides `sub`, kept with it to show on our pages.
PROFILE_CLAIMS = ("name", "email")
MAX_PROFILE_CLAIM = 128  # the session is a cookie


def binding_of(browser_id: str) -> str:
    """What an OAuth state stores of the browser that started it: the hash of the session's id."""
    return hashlib.sha256(browser_id.encode()).hexdigest()


@dataclass(frozen=True)
class BrowserUser:
    """The signed-in user of a browser session, as the session records it."""

    user: UserRef
    login_at: float
    browser_id: str
    name: str | None = None
    email: str | None = None
    auth_time: float | None = None  # when the user authenticated at the issuer (ID token)

    @property
    def binding(self) -> str:
        """Ties OAuth states to this browser session (`require_same_browser`)."""
        return binding_of(self.browser_id)


class DisconnectedNotice(TypedDict):
    """The connections page's notice after a disconnect (names no secret: the cookie is signed,
    not encrypted)."""

    disconnected: str  # the provider's display name
    disconnected_account: str  # the account's label
    revoked: bool


class BrowserSession:
    """A typed view of one request's session dict; every write goes straight to that dict, which
    the middleware signs into the response's cookie."""

    def __init__(self, data: MutableMapping[str, Any]) -> None:
        self._data = data

    def __bool__(self) -> bool:
        """Whether the browser sent a session at all (signed in or not)."""
        return bool(self._data)

    def clear(self) -> None:
        self._data.clear()

    # ---- the signed-in user ---------------------------------------------------------------------

    @property
    def user(self) -> BrowserUser | None:
        """The session's user, or None when there is none or the session is malformed. The
        lifetime is not checked here (`require_session_within_lifetime`)."""
        user, login_at, browser_id = (self._data.get(k) for k in (_USER, _LOGIN_AT, _BROWSER_ID))
        if not (isinstance(user, dict) and isinstance(login_at, int | float) and isinstance(browser_id, str)):
            return None
        iss, sub = user.get("iss"), user.get("sub")
        if not (isinstance(iss, str) and isinstance(sub, str)):
            return None
        name, email, auth_time = user.get("name"), user.get("email"), user.get("auth_time")
        return BrowserUser(
            UserRef(iss=iss, sub=sub),
            login_at,
            browser_id,
            name=name if isinstance(name, str) else None,
            email=email if isinstance(email, str) else None,
            auth_time=auth_time if isinstance(auth_time, int | float) else None,
        )

    def sign_in(self, user: UserRef, now: float, *, browser_id: str, csrf: str) -> None:
        """Record `user` as signed in since `now`, in a browser session named `browser_id`. What
        the session held before stays unless cleared first (`rotate_session_on_login` does)."""
        self._data.update(
            {
                _USER: {"iss": user.iss, "sub": user.sub},
                _LOGIN_AT: int(now),
                _BROWSER_ID: browser_id,
                _CSRF: csrf,
            }
        )

    def show_profile(self, claims: Mapping[str, object]) -> None:
        """Keep the ID token's name, e-mail and authentication time with the signed-in user, to
        show on our pages (bounded: the session is a cookie)."""
        user = self._data.get(_USER)
        if not isinstance(user, dict):
            return
        for key in PROFILE_CLAIMS:
            if isinstance(value := claims.get(key), str) and value.strip():
                user[key] = value[:MAX_PROFILE_CLAIM]
        auth_time = claims.get("auth_time")
        if isinstance(auth_time, int) and not isinstance(auth_time, bool):
            user["auth_time"] = auth_time

    # ---- the CSRF token -------------------------------------------------------------------------

    @property
    def csrf(self) -> str | None:
        token = self._data.get(_CSRF)
        return token if isinstance(token, str) else None

    @csrf.setter
    def csrf(self, token: str) -> None:
        self._data[_CSRF] = token

    # ---- between two requests -------------------------------------------------------------------

    @property
    def next_path(self) -> object:
        """Where the login returns to, as stored: the caller checks it (`require_safe_next`)."""
        return self._data.get(_NEXT)

    @next_path.setter
    def next_path(self, path: str) -> None:
        self._data[_NEXT] = path

    def keep_login_purpose(self, purpose: str) -> None:
        self._data[_LOGIN_PURPOSE] = purpose

    def take_login_purpose(self) -> str | None:
        purpose = self._data.pop(_LOGIN_PURPOSE, None)
        return purpose if isinstance(purpose, str) else None

    def flash_disconnected(self, notice: DisconnectedNotice) -> None:
        self._data[_FLASH] = dict(notice)

    def take_disconnected(self) -> DisconnectedNotice | None:
        notice = self._data.pop(_FLASH, None)
        if not (
            isinstance(notice, dict)
            and isinstance(notice.get("disconnected"), str)
            and isinstance(notice.get("disconnected_account"), str)
            and isinstance(notice.get("revoked"), bool)
        ):
            return None
        return DisconnectedNotice(
            disconnected=notice["disconnected"],
            disconnected_account=notice["disconnected_account"],
            revoked=notice["revoked"],
        )
