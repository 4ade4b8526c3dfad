"""Every check of the browser routes, in process (httpx.ASGITransport against `create_app`).

Nothing here reaches a provider: each refusal happens before any provider call, and the
provider's authorization URL is only built, never fetched. Time comes from the runtime's clock.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import itsdangerous
import pytest

from connect_routes.browser_session import cookie_name
from connect_routes.pages import timestamp
from mock_providers.demo import build_demo
from service.app import create_app
from service.errors import ElicitationAlreadyUsed
from service.flow.browser_session import binding_of
from service.runtime import Runtime
from service.settings import Settings
from tests.support.tasks import running_in_own_task
from token_store import (
    Connection,
    ConnectionKey,
    ElicitationStatus,
    PendingElicitation,
    StoreUnavailable,
    TokenSet,
    UserRef,
)

BROWSER_ID = "browser-id-of-this-test-0123456789"
CSRF = "csrf-token-of-this-test-0123456789"


@dataclass
class Clock:
    now: float

    def __call__(self) -> float:
        return self.now


@dataclass
class Server:
    settings: Settings
    runtime: Runtime
    http: httpx.AsyncClient
    clock: Clock

    def sign_in(self, sub: str = "alice", *, login_at: float | None = None, bid: str = BROWSER_ID) -> None:
        session = {
            "user": {"iss": self.settings.auth_issuer, "sub": sub},
            "login_at": int(time.time()) if login_at is None else login_at,
            "bid": bid,
            "csrf": CSRF,
        }
        data = base64.b64encode(json.dumps(session).encode())
        value = itsdangerous.TimestampSigner(self.settings.session_secret).sign(data).decode()
        self.http.cookies.set(cookie_name(self.settings), value)

    def sign_out(self) -> None:
        self.http.cookies.clear()

    async def ask(
        self, sub: str = "alice", provider: str = "mockhub", client_name: str | None = None
    ) -> PendingElicitation:
        """A pending elicitation, as a tool call would create it."""
        flow = self.runtime.flow
        config = self.settings.providers[provider]
        user = UserRef(self.settings.auth_issuer, sub)
        return await flow.create(user, "client", None, config, config.scopes, client_name=client_name)

    def session(self) -> dict[str, Any]:
        """The signed session cookie's content, as the server last set it."""
        raw = self.http.cookies.get(cookie_name(self.settings))
        assert raw is not None
        data = itsdangerous.TimestampSigner(self.settings.session_secret).unsign(raw.encode())
        session: dict[str, Any] = json.loads(base64.b64decode(data))
        return session

    async def status(self, elicitation: PendingElicitation) -> ElicitationStatus | None:
        record = await self.runtime.store.get_elicitation(elicitation.id)
        return None if record is None else record.status

    async def open(self, elicitation: PendingElicitation) -> str:
        """POST /connect; the state from the provider redirect."""
        response = await self.http.post("/connect", data={"elicitationId": elicitation.id, "csrf": CSRF})
        assert response.status_code == 303, response.text
        return parse_qs(urlsplit(response.headers["location"]).query)["state"][0]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    settings = build_demo("127.0.0.1", 9300, 9301, tmp_path).settings
    clock = Clock(time.time())
    runtime = Runtime(settings, clock=clock)
    app = create_app(settings, runtime)
    # The runtime's task group must be entered and left in one task; a fixture's setup and
    # teardown run in two, so the runtime runs in a task of its own.
    async with running_in_own_task(runtime.running()):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=settings.public_url) as http:
            yield Server(settings, runtime, http, clock)


def assert_page(response: httpx.Response, status: int, title: str, text: str) -> None:
    assert response.status_code == status, response.text
    assert f"<h1>{title}</h1>" in response.text or title in response.text
    assert text in response.text
    assert response.headers["x-frame-options"] == "DENY"  # error pages carry the headers too


# ---- /connect ---------------------------------------------------------------------------------


async def test_malformed_ids_get_400(server: Server) -> None:
    server.sign_in()
    for bad in ("", "short", "x" * 129, "a b" * 8, "../../etc/passwd!!", "é" * 20):
        response = await server.http.get("/connect", params={"elicitationId": bad})
        assert_page(response, 400, "Invalid link", "This connect link is malformed.")
        response = await server.http.post("/connect", data={"elicitationId": bad, "csrf": CSRF})
        assert_page(response, 400, "Invalid link", "This connect link is malformed.")
        response = await server.http.get("/callback/mockhub", params={"state": bad, "code": "c"})
        assert_page(response, 400, "Invalid request", "The state parameter is missing or malformed.")


async def test_unknown_link_is_404(server: Server) -> None:
    server.sign_in()
    response = await server.http.get("/connect", params={"elicitationId": "u" * 43})
    assert_page(response, 404, "Link expired", "This link is unknown or has expired.")


async def test_signed_out_get_goes_to_login_and_post_is_401(server: Server) -> None:
    elicitation = await server.ask()
    response = await server.http.get("/connect", params={"elicitationId": elicitation.id})
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login?next=%2Fconnect%3FelicitationId%3D")
    response = await server.http.post("/connect", data={"elicitationId": elicitation.id, "csrf": CSRF})
    assert_page(response, 401, "Not signed in", "Open the link from your MCP client again.")
    assert await server.status(elicitation) is ElicitationStatus.PENDING


async def test_session_past_its_lifetime_counts_as_signed_out(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in(login_at=time.time() - server.settings.session_max_age - 5)
    response = await server.http.post("/connect", data={"elicitationId": elicitation.id, "csrf": CSRF})
    assert_page(response, 401, "Not signed in", "Open the link from your MCP client again.")
    assert await server.status(elicitation) is ElicitationStatus.PENDING


async def test_another_users_link_is_403_and_stays_pending(server: Server) -> None:
    elicitation = await server.ask("alice")
    server.sign_in("mallory")
    response = await server.http.get("/connect", params={"elicitationId": elicitation.id})
    assert_page(response, 403, "Not your link", "This link was created for another account.")
    response = await server.http.post("/connect", data={"elicitationId": elicitation.id, "csrf": CSRF})
    assert_page(response, 403, "Not your link", "This link was created for another account.")
    assert await server.status(elicitation) is ElicitationStatus.PENDING


async def test_post_without_the_csrf_token_is_403_and_stays_pending(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in()
    for form in ({"elicitationId": elicitation.id}, {"elicitationId": elicitation.id, "csrf": "wrong"}):
        response = await server.http.post("/connect", data=form)
        assert_page(response, 403, "Not allowed", "The form was stale. Open the link again.")
        response = await server.http.post("/connect/api-key", data={**form, "api_key": "k" * 20})
        assert_page(response, 403, "Not allowed", "The form was stale. Open the link again.")
    assert await server.status(elicitation) is ElicitationStatus.PENDING


async def test_a_used_link_answers_409_on_get_and_post(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in()
    response = await server.http.get("/connect", params={"elicitationId": elicitation.id})
    assert response.status_code == 200
    assert "alice" in response.text
    await server.open(elicitation)
    assert await server.status(elicitation) is ElicitationStatus.OPENED
    response = await server.http.get("/connect", params={"elicitationId": elicitation.id})
    assert_page(response, 409, "Link already used", "This link was already used.")
    response = await server.http.post("/connect", data={"elicitationId": elicitation.id, "csrf": CSRF})
    assert_page(response, 409, "Link already used", "This link was already used.")


async def test_a_service_no_longer_offered_is_404(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in()
    server.settings.providers.pop("mockhub")  # type: ignore[attr-defined]
    response = await server.http.get("/connect", params={"elicitationId": elicitation.id})
    assert_page(response, 404, "Unknown service", "This server no longer offers that service.")


async def test_api_key_route_refuses_an_oauth_service(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in()
    form = {"elicitationId": elicitation.id, "csrf": CSRF, "api_key": "k" * 20}
    response = await server.http.post("/connect/api-key", data=form)
    assert_page(response, 400, "Invalid request", "This service does not use API keys.")
    assert await server.status(elicitation) is ElicitationStatus.PENDING


async def test_store_unavailable_is_503(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    async def down(*args: Any) -> None:
        raise StoreUnavailable("down")

    monkeypatch.setattr(server.runtime.store, "get_elicitation_with_connection", down)
    server.sign_in()
    response = await server.http.get("/connect", params={"elicitationId": "u" * 43})
    assert_page(response, 503, "Temporarily unavailable", "Try again shortly.")


async def test_the_state_expires_with_the_runtime_clock(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in()
    state_value = await server.open(elicitation)
    state = await server.runtime.store.take_oauth_state(state_value)
    assert state is not None
    assert state.created_at == server.clock.now
    assert state.expires_at == min(server.clock.now + server.settings.state_ttl, elicitation.expires_at)


# ---- /callback --------------------------------------------------------------------------------


async def test_callback_parameter_too_long_and_unknown_state(server: Server) -> None:
    server.sign_in()
    response = await server.http.get("/callback/mockhub", params={"state": "s" * 43, "code": "c" * 3000})
    assert_page(response, 400, "Invalid request", "A parameter is too long.")
    response = await server.http.get("/callback/mockhub", params={"state": "s" * 43, "code": "c"})
    assert_page(response, 400, "Link expired", "This sign-in is unknown, expired or already finished.")


async def _callback(server: Server, provider: str = "mockhub", **params: str) -> httpx.Response:
    return await server.http.get(f"/callback/{provider}", params=params)


async def test_callback_state_is_single_use(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in()
    state = await server.open(elicitation)
    iss = server.settings.providers["mockhub"].issuer or ""
    first = await _callback(server, state=state, iss=iss, error="access_denied")
    assert first.status_code == 400
    again = await _callback(server, state=state, iss=iss, code="c")
    assert_page(again, 400, "Link expired", "This sign-in is unknown, expired or already finished.")


@pytest.mark.parametrize(
    ("case", "status", "title", "text"),
    [
        ("signed out", 403, "Not allowed", "Finish the sign-in in the browser where you started it."),
        ("other browser", 403, "Not allowed", "Finish the sign-in in the browser where you started it."),
        ("other user", 403, "Not allowed", "Finish the sign-in in the browser where you started it."),
        ("other provider path", 400, "Sign-in refused", "The response arrived for another service."),
        ("no iss", 400, "Sign-in refused", "The response did not come from the expected service."),
        ("wrong iss", 400, "Sign-in refused", "The response did not come from the expected service."),
        ("no code", 400, "Invalid request", "The response carries no authorization code."),
        ("provider error", 400, "MockHub", "access_denied"),
    ],
)
async def test_each_callback_refusal_fails_the_flow_before_any_exchange(
    server: Server, case: str, status: int, title: str, text: str
) -> None:
    elicitation = await server.ask()
    server.sign_in()
    state = await server.open(elicitation)
    iss = server.settings.providers["mockhub"].issuer or ""
    params = {"state": state, "iss": iss, "code": "c"}
    provider = "mockhub"
    if case == "signed out":
        server.sign_out()
    elif case == "other browser":
        server.sign_in(bid="another-browser-id-0123456789")
    elif case == "other user":
        server.sign_in("mallory")
    elif case == "other provider path":
        provider = "otherhub"
    elif case == "no iss":
        del params["iss"]
    elif case == "wrong iss":
        params["iss"] = "http://evil.example"
    elif case == "no code":
        params["code"] = ""
    elif case == "provider error":
        params = {"state": state, "iss": iss, "error": "access_denied", "error_description": "<b>no</b>"}
    # A code exchange would need the provider at port 9301, which is not running: a refusal
    # that came too late would show as a 502, not as the page asserted here.
    response = await _callback(server, provider, **params)
    assert_page(response, status, title, text)
    assert "&lt;b&gt;" in response.text or case != "provider error"
    assert await server.status(elicitation) is ElicitationStatus.FAILED
    assert await server.runtime.store.list_connections(elicitation.user) == []


async def test_binding_is_of_the_browser_id(server: Server) -> None:
    elicitation = await server.ask()
    server.sign_in()
    state_value = await server.open(elicitation)
    state = await server.runtime.store.take_oauth_state(state_value)
    assert state is not None
    assert state.browser_binding == binding_of(BROWSER_ID)
    assert replace(state.elicitation, status=ElicitationStatus.PENDING) == elicitation


# ---- /connections and /logout -------------------------------------------------------------------


async def test_disconnect_needs_a_session_and_the_csrf_token(server: Server) -> None:
    form = {"provider": "mockhub", "account": "1", "csrf": CSRF}
    response = await server.http.post("/connections/disconnect", data=form)
    assert_page(response, 401, "Not signed in", "Sign in first.")
    server.sign_in()
    response = await server.http.post("/connections/disconnect", data={**form, "csrf": "wrong"})
    assert_page(response, 403, "Not allowed", "The form was stale. Reload the page and try again.")
    response = await server.http.post("/connections/disconnect", data={"csrf": CSRF})
    assert_page(response, 400, "Invalid request", "The form is incomplete.")
    response = await server.http.post("/connections/disconnect", data=form)
    assert response.status_code == 303


async def test_logout_needs_the_csrf_token(server: Server) -> None:
    server.sign_in()
    response = await server.http.post("/logout", data={"csrf": "wrong"})
    assert_page(response, 403, "Not allowed", "The form was stale. Reload the page and try again.")
    response = await server.http.post("/logout", data={"csrf": CSRF})
    assert_page(response, 200, "Signed out", "You are signed out of this server.")


async def test_login_keeps_only_safe_next_paths(server: Server) -> None:
    # The AS is not running: the login answers 503, but the return path is stored first.
    for value, kept in (("https://evil.example", "/connections"), ("/connections", "/connections")):
        response = await server.http.get("/login", params={"next": value})
        assert_page(response, 503, "Sign-in unavailable", "The sign-in service did not answer.")
        assert server.session()["next"] == kept


# ---- what the pages tell a newcomer ------------------------------------------------------------------


async def test_confirmation_names_the_client_that_asked_and_when(server: Server) -> None:
    named = await server.ask(client_name="<b>Claude</b> Desktop")
    unnamed = await server.ask()
    server.sign_in()
    response = await server.http.get("/connect", params={"elicitationId": named.id})
    assert response.status_code == 200
    assert "Asked by</dt><dd>&lt;b&gt;Claude&lt;/b&gt; Desktop</dd>" in response.text  # escaped
    assert timestamp(named.created_at) in response.text
    # Without a name from `initialize`, the client id of its access token.
    response = await server.http.get("/connect", params={"elicitationId": unnamed.id})
    assert "Asked by</dt><dd>client</dd>" in response.text


async def test_a_signed_out_link_tells_the_sign_in_what_it_is_for(server: Server) -> None:
    elicitation = await server.ask(client_name="Claude")
    response = await server.http.get("/connect", params={"elicitationId": elicitation.id})
    assert response.status_code == 303
    assert "MockHub" not in response.headers["location"]  # in the session, never in our URLs
    assert server.session()["login_purpose"] == "connect MockHub for the MCP client Claude"


async def test_cancel_declines_the_link_after_the_checks_of_post_connect(server: Server) -> None:
    elicitation = await server.ask("alice")
    form = {"elicitationId": elicitation.id, "csrf": CSRF}
    response = await server.http.post("/connect/cancel", data=form)
    assert_page(response, 401, "Not signed in", "Open the link from your MCP client again.")
    server.sign_in("alice")
    for stale in ({"elicitationId": elicitation.id}, {**form, "csrf": "wrong"}):
        response = await server.http.post("/connect/cancel", data=stale)
        assert_page(response, 403, "Not allowed", "The form was stale. Open the link again.")
    server.sign_in("mallory")
    response = await server.http.post("/connect/cancel", data=form)
    assert_page(response, 403, "Not your link", "This link was created for another account.")
    assert await server.status(elicitation) is ElicitationStatus.PENDING

    server.sign_in("alice")
    page = await server.http.get("/connect", params={"elicitationId": elicitation.id})
    assert 'formaction="/connect/cancel"' in page.text
    response = await server.http.post("/connect/cancel", data=form)
    assert_page(response, 200, "Connection cancelled", "Nothing was connected.")
    assert await server.status(elicitation) is ElicitationStatus.FAILED
    for again in (
        server.http.get("/connect", params={"elicitationId": elicitation.id}),
        server.http.post("/connect", data=form),
        server.http.post("/connect/cancel", data=form),
    ):
        assert_page(await again, 409, "Link already used", "This link was already used.")


async def test_not_your_link_offers_to_sign_out_and_continue_as_the_right_account(server: Server) -> None:
    elicitation = await server.ask("alice")
    link = f"/connect?elicitationId={elicitation.id}"
    server.sign_in("mallory")
    response = await server.http.get(link)
    assert_page(response, 403, "Not your link", "This link was created for another account.")
    assert "You are signed in here as <strong>mallory</strong>" in response.text
    assert f'name="next" value="{link}"' in response.text
    assert f'name="csrf" value="{CSRF}"' in response.text
    # The sign-out's redirects go on to the authorization server: its origin is allowed there.
    assert f"form-action 'self' {server.settings.auth_issuer}" in response.headers["content-security-policy"]

    response = await server.http.post("/logout", data={"csrf": CSRF, "next": link})
    assert response.status_code == 303
    query = parse_qs(urlsplit(response.headers["location"]).query)
    assert urlsplit(response.headers["location"]).path == "/login"
    assert query == {"next": [link], "prompt": ["login"]}  # a fresh sign-in, then the link
    assert "expires=Thu, 01 Jan 1970" in response.headers["set-cookie"]  # the session is gone

    server.sign_in("mallory")
    response = await server.http.post("/logout", data={"csrf": CSRF, "next": "https://evil.example/"})
    assert parse_qs(urlsplit(response.headers["location"]).query)["next"] == ["/connections"]
    response = await server.http.post("/logout", data={"csrf": "wrong", "next": link})
    assert_page(response, 403, "Not allowed", "The form was stale.")


async def test_after_a_disconnect_the_page_says_what_happened_once(server: Server) -> None:
    alice = UserRef(server.settings.auth_issuer, "alice")
    now = server.clock.now
    await server.runtime.store.put_connection(
        Connection(ConnectionKey(alice, "mockhub", "1671103"), TokenSet("t"), "octocat", now, now)
    )
    server.sign_in("alice")
    form = {"provider": "mockhub", "account": "1671103", "csrf": CSRF}
    response = await server.http.post("/connections/disconnect", data=form)
    assert response.status_code == 303
    assert response.headers["location"] == "/connections"  # no account in the URL
    response = await server.http.get("/connections")
    assert "Disconnected MockHub account <strong>octocat</strong>." in response.text
    # MockHub is not running here: the revocation was not confirmed, and the page says so.
    assert "did not confirm the revocation" in response.text
    response = await server.http.get("/connections")
    assert "Disconnected" not in response.text  # shown once


async def test_the_signed_out_page_links_back(server: Server) -> None:
    server.sign_in()
    response = await server.http.post("/logout", data={"csrf": CSRF})
    assert_page(response, 200, "Signed out", "You are signed out of this server.")
    assert '<a href="/connections">' in response.text


async def test_the_default_account_is_shown_set_and_cleared_for_the_users_own_accounts(
    server: Server,
) -> None:
    """docs/providers.md, "Several accounts at one provider": the remembered default is visible
    and changeable on /connections, and only among the signed-in user's own accounts."""
    alice = UserRef(server.settings.auth_issuer, "alice")
    bob = UserRef(server.settings.auth_issuer, "bob")
    now = server.clock()
    for user, account, label in ((alice, "1", "alice-hub"), (alice, "2", "alice-work"), (bob, "3", "bob")):
        await server.runtime.store.put_connection(
            Connection(ConnectionKey(user, "mockhub", account), TokenSet("t"), label, now, now)
        )
    store = server.runtime.store
    server.sign_in("alice")
    page = await server.http.get("/connections")
    assert page.text.count("Make default") == 2 and ">default<" not in page.text
    form = {"provider": "mockhub", "account": "2", "csrf": CSRF}
    assert (await server.http.post("/connections/default", data={**form, "csrf": "x"})).status_code == 403
    assert (await server.http.post("/connections/default", data=form)).status_code == 303
    assert await store.get_default_account(alice, "mockhub") == "2"
    page = await server.http.get("/connections")
    assert ">default<" in page.text and "Ask each time" in page.text
    # Bob's account cannot become Alice's default, whatever the form says.
    refused = await server.http.post("/connections/default", data={**form, "account": "3"})
    assert_page(refused, 400, "Invalid request", "That account is not connected.")
    assert await store.get_default_account(alice, "mockhub") == "2"
    assert await store.get_default_account(bob, "mockhub") is None
    cleared = await server.http.post("/connections/default", data={**form, "account": ""})
    assert cleared.status_code == 303 and await store.get_default_account(alice, "mockhub") is None


async def test_a_link_opens_once_even_when_two_visits_passed_the_check(server: Server) -> None:
    """The race of two POST /connect on one link, made deterministic: both passed `check_link`
    while it was pending; only the first `open` goes on to the provider, and the second stores
    no state (require_first_open)."""
    elicitation = await server.ask()
    link = await server.runtime.flow.check_link(elicitation.user, elicitation.id)
    first = await server.runtime.flow.open(link, "browser-one")
    assert "state=" in first
    with pytest.raises(ElicitationAlreadyUsed):
        await server.runtime.flow.open(link, "browser-two")
    assert await server.status(elicitation) is ElicitationStatus.OPENED


def test_the_routes_call_no_store_method() -> None:
    """The routes parse HTTP and render: every store call of the flow is `ConnectFlow`'s, every
    one of the connections page is `Connections`'."""
    root = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
    calls = [
        f"{path.relative_to(root)}: {match.group()}"
        for path in sorted(root.glob("connect_routes/*.py"))
        for match in re.finditer(r"\bstore(\(\))?\.\w+\(", path.read_text())
    ]
    assert calls == []
