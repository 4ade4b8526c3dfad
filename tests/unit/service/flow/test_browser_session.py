"""service/flow/browser_session.py: the session cookie's content read and written through one typed
view, in the format cookies already carry."""

from __future__ import annotations

from typing import Any

import pytest

from service.flow.browser_session import (
    MAX_PROFILE_CLAIM,
    BrowserSession,
    BrowserUser,
    DisconnectedNotice,
    binding_of,
)
from token_store import UserRef

ALICE = UserRef("https://as.example", "alice")


def test_a_cookie_in_the_existing_format_reads_as_its_user() -> None:
    # Exactly what a signed-in browser's cookie holds (tests/security/flows.py forges the same).
    data: dict[str, Any] = {
        "user": {"iss": ALICE.iss, "sub": ALICE.sub, "name": "Alice", "auth_time": 1700000000},
        "login_at": 1700000005,
        "bid": "browser-id-0123456789",
        "csrf": "csrf-token-0123456789",
        "_state_mcp_as_abc": {"data": {}},  # authlib's own key, left alone
    }
    session = BrowserSession(data)
    user = session.user
    assert user == BrowserUser(ALICE, 1700000005, "browser-id-0123456789", name="Alice", auth_time=1700000000)
    assert user.binding == binding_of("browser-id-0123456789")
    assert session.csrf == "csrf-token-0123456789"


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"user": {"iss": ALICE.iss, "sub": ALICE.sub}, "login_at": 1, "bid": 7},
        {"user": {"iss": ALICE.iss, "sub": ALICE.sub}, "login_at": "1", "bid": "b"},
        {"user": {"iss": ALICE.iss}, "login_at": 1, "bid": "b"},
        {"user": [ALICE.iss, ALICE.sub], "login_at": 1, "bid": "b"},
    ],
)
def test_a_malformed_session_has_no_user(data: dict[str, Any]) -> None:
    assert BrowserSession(data).user is None


def test_sign_in_writes_the_cookie_format() -> None:
    data: dict[str, Any] = {"next": "/connections"}
    BrowserSession(data).sign_in(ALICE, 1234.5, browser_id="b" * 43, csrf="c" * 43)
    assert data == {
        "next": "/connections",  # signing in does not clear: rotate_session_on_login does
        "user": {"iss": ALICE.iss, "sub": ALICE.sub},
        "login_at": 1234,
        "bid": "b" * 43,
        "csrf": "c" * 43,
    }


def test_the_profile_shown_is_bounded_and_typed() -> None:
    data: dict[str, Any] = {}
    session = BrowserSession(data)
    session.sign_in(ALICE, 1.0, browser_id="b", csrf="c")
    session.show_profile({"name": "n" * 500, "email": " ", "auth_time": True, "sub": "mallory"})
    assert data["user"] == {"iss": ALICE.iss, "sub": ALICE.sub, "name": "n" * MAX_PROFILE_CLAIM}


def test_values_kept_between_two_requests_are_taken_once() -> None:
    data: dict[str, Any] = {}
    session = BrowserSession(data)
    session.keep_login_purpose("connect MockHub")
    notice = DisconnectedNotice(disconnected="MockHub", disconnected_account="octocat", revoked=True)
    session.flash_disconnected(notice)
    assert data == {"login_purpose": "connect MockHub", "flash_disconnected": dict(notice)}
    assert session.take_login_purpose() == "connect MockHub"
    assert session.take_disconnected() == notice
    assert session.take_login_purpose() is None and session.take_disconnected() is None
    assert not session


def test_a_malformed_notice_is_dropped() -> None:
    session = BrowserSession({"flash_disconnected": {"disconnected": "<b>", "revoked": "yes"}})
    assert session.take_disconnected() is None
