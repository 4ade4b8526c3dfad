"""Each function of service/flow/security_checks.py on its own: what it lets through, what it refuses,
and with which refusal."""

from __future__ import annotations

import pytest

from service.errors import (
    AccountIdTooLong,
    AccountNotNamed,
    AccountSwitchUnconfirmed,
    AuthorizationResponseIssuerMismatch,
    AuthorizationServerMoved,
    BlankClientName,
    ConnectCsrfTokenMismatch,
    CrossSiteRequest,
    CsrfTokenMismatch,
    ElicitationAlreadyUsed,
    ElicitationUserMismatch,
    InvalidRequest,
    InvalidRequestState,
    InvalidState,
    InvalidToolArgument,
    LoginIssuerMismatch,
    MalformedElicitationId,
    MixUp,
    NotSignedIn,
    SessionExpired,
    WrongBrowser,
)
from service.flow.browser_session import BrowserSession
from service.flow.security_checks import (
    MAX_ACCOUNT_ID,
    OPAQUE_ID,
    callback_request_digest,
    check_rfc9207_issuer,
    elicitation_of_same_user,
    mint_opaque_id,
    require_account_argument,
    require_account_id_of_provider,
    require_csrf_token,
    require_first_open,
    require_flow_at_current_issuer,
    require_login_issuer,
    require_no_silent_account_switch,
    require_opaque_id,
    require_pending,
    require_redirect_uri_of_provider,
    require_repeat_of_same_callback,
    require_request_state_for_provider,
    require_safe_next,
    require_same_browser,
    require_same_origin,
    require_same_user,
    require_session_within_lifetime,
    require_signed_in,
    require_single_use_request_state,
    require_single_use_state,
    require_visible_client_name,
    reusable_link_of_same_user_and_client,
    rotate_session_on_login,
    session_id_checked_by_sdk,
)
from service.providers.catalogue import ProviderConfig
from service.settings import Settings
from token_store import CallbackOutcome, ElicitationStatus, OAuthState, PendingElicitation, UserRef, slot_tag

ALICE = UserRef("https://as.example", "alice")
MALLORY = UserRef("https://as.example", "mallory")


def elicitation(status: ElicitationStatus = ElicitationStatus.PENDING) -> PendingElicitation:
    return PendingElicitation(
        id=mint_opaque_id(),
        user=ALICE,
        client_id="c",
        mcp_session_id=None,
        provider="mockhub",
        scopes=("read:user",),
        created_at=0.0,
        expires_at=600.0,
        status=status,
    )


def test_minted_ids_have_the_checked_shape_and_256_bits() -> None:
    ids = {mint_opaque_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(OPAQUE_ID.fullmatch(i) and len(i) == 43 for i in ids)


def test_an_id_tells_nobody_without_the_servers_key_whose_it_is() -> None:
    """An id, state or nonce minted for Alice: anyone who sees it and knows the candidates (each
    user's `slot_tag` is a public hash of `(iss, sub)`) learns nothing. On every store but Redis
    Cluster it is the random bits alone; on Cluster it names her slot masked under a key derived
    from the session secret, so her ids look unrelated and only that key finds her slot."""
    elsewhere = Settings(session_secret="s" * 40, store_url="redis://127.0.0.1:6379/0")
    assert elsewhere.slot_tags() is None  # only on Cluster
    plain = [mint_opaque_id(ALICE, elsewhere.slot_tags()) for _ in range(16)]
    assert all(len(i) == 43 and not i.startswith(slot_tag(ALICE)) for i in plain)

    cluster = elsewhere.replace(store_url="redis+cluster://127.0.0.1:7000")
    slots = cluster.slot_tags()
    assert slots is not None
    ids = [mint_opaque_id(ALICE, slots) for _ in range(16)]
    assert all(OPAQUE_ID.fullmatch(i) for i in ids)
    assert [slots.slot_of(i) for i in ids] == [slot_tag(ALICE)] * 16  # the store finds her slot
    carried = [i[1:5] for i in ids]
    assert sum(tag in (slot_tag(ALICE), slot_tag(MALLORY)) for tag in carried) <= 1  # chance: 2/16384
    assert len(set(carried)) > 1  # two of her ids do not look alike
    rotated = cluster.replace(session_secret="t" * 40).slot_tags()
    assert rotated is not None and sum(rotated.slot_of(i) == slot_tag(ALICE) for i in ids) <= 1
    assert mint_opaque_id(None, slots) != mint_opaque_id(None, slots)  # no owner: random bits
    assert len(mint_opaque_id(None, slots)) == 43


def test_require_opaque_id() -> None:
    good = mint_opaque_id()
    assert require_opaque_id(good, MalformedElicitationId) == good
    for bad in ("", "short", "x" * 129, "a" * 15, "a b" * 8, "é" * 20, "a" * 20 + "\n", None, 42):
        with pytest.raises(MalformedElicitationId):
            require_opaque_id(bad, MalformedElicitationId)
    with pytest.raises(InvalidRequest):
        require_opaque_id("../" * 10, InvalidRequest)


def test_require_signed_in() -> None:
    assert require_signed_in("browser") == "browser"
    with pytest.raises(NotSignedIn):
        require_signed_in(None)
    with pytest.raises(WrongBrowser):
        require_signed_in(None, WrongBrowser)


def test_require_session_within_lifetime() -> None:
    require_session_within_lifetime(login_at=1000, now=1000 + 3600, max_age=3600)
    with pytest.raises(SessionExpired):
        require_session_within_lifetime(login_at=1000, now=1000 + 3601, max_age=3600)


def test_rotate_session_on_login_keeps_nothing_from_before() -> None:
    session: dict[str, object] = {
        "user": {"iss": "x", "sub": "mallory"},
        "bid": "planted",
        "csrf": "planted",
        "next": "/x",
    }
    rotate_session_on_login(BrowserSession(session), ALICE, now=1234.5)
    assert session["user"] == {"iss": ALICE.iss, "sub": ALICE.sub}
    assert session["login_at"] == 1234
    assert set(session) == {"user", "login_at", "bid", "csrf"}
    assert session["bid"] != "planted" and session["csrf"] != "planted"
    assert OPAQUE_ID.fullmatch(str(session["bid"])) and OPAQUE_ID.fullmatch(str(session["csrf"]))


def test_require_csrf_token() -> None:
    require_csrf_token("token-value", "token-value")
    for expected, submitted in (
        ("token-value", "other-value"),
        ("token-value", ""),
        ("token-value", None),
        (None, "token-value"),
        (None, None),
        ("token-value", "tökén"),  # non-ASCII: a refusal, not a TypeError
        ("token-value", "\udcff"),  # a lone surrogate
    ):
        with pytest.raises(CsrfTokenMismatch):
            require_csrf_token(expected, submitted)
    with pytest.raises(ConnectCsrfTokenMismatch):
        require_csrf_token("a", "b", ConnectCsrfTokenMismatch)


def test_require_same_origin() -> None:
    require_same_origin(None, "https://mcp.example")  # some browsers send none
    require_same_origin("null", "https://mcp.example")  # withheld, as no-referrer pages do
    require_same_origin("https://mcp.example", "https://mcp.example/")
    require_same_origin("http://127.0.0.1:8000", "http://127.0.0.1:8000")
    for foreign in (
        "https://evil.example",
        "",
        "http://mcp.example",
        "https://mcp.example:8443",
        "https://mcp.example.evil.example",
        "https://sub.mcp.example",
    ):
        with pytest.raises(CrossSiteRequest):
            require_same_origin(foreign, "https://mcp.example")


def test_require_no_silent_account_switch() -> None:
    require_no_silent_account_switch(None, None)  # signed out: a sign-in may start
    require_no_silent_account_switch(None, MALLORY)  # signed out: anyone may sign in
    require_no_silent_account_switch(ALICE, UserRef(ALICE.iss, ALICE.sub))  # Alice again
    for signing_in in (None, MALLORY, UserRef("https://other-issuer.example", "alice")):
        with pytest.raises(AccountSwitchUnconfirmed):
            require_no_silent_account_switch(ALICE, signing_in)


def test_require_visible_client_name() -> None:
    for name in ("Claude", "Claude Desktop", "MCP Inspector", "\u0421laude", "クロード"):
        assert require_visible_client_name(name) == name
    for blank in (
        "",
        " ",
        "\u3164",
        "\u2800",
        "\u115f\u1160",
        "\uffa0",
        "Claude\u200b",
        "\u200d",
        "a\u2028b",
    ):
        with pytest.raises(BlankClientName):
            require_visible_client_name(blank)
    for spaced in ("Claude\u00a0Desktop", "Claude\u3000Desktop", "Claude\tDesktop", "\u202eedualC"):
        with pytest.raises(BlankClientName):
            require_visible_client_name(spaced)


def test_require_same_user() -> None:
    require_same_user(ALICE, UserRef(ALICE.iss, ALICE.sub))
    with pytest.raises(ElicitationUserMismatch):
        require_same_user(MALLORY, ALICE)
    with pytest.raises(ElicitationUserMismatch):
        require_same_user(UserRef("https://other-issuer.example", "alice"), ALICE)
    with pytest.raises(WrongBrowser):
        require_same_user(MALLORY, ALICE, WrongBrowser)


def test_require_pending() -> None:
    require_pending(elicitation())
    for status in (ElicitationStatus.OPENED, ElicitationStatus.COMPLETE, ElicitationStatus.FAILED):
        with pytest.raises(ElicitationAlreadyUsed):
            require_pending(elicitation(status))


def test_reusable_link_of_same_user_and_client() -> None:
    mine = elicitation()
    scopes = ("read:user",)

    def reused(
        *live: PendingElicitation, user: UserRef = ALICE, client: str = "c", until: float = 500.0
    ) -> object:
        return reusable_link_of_same_user_and_client(live, user, client, "mockhub", scopes, until)

    assert reused(mine) is mine
    assert reused(mine, until=600.0) is mine  # good until exactly then
    assert reused(mine, until=600.5) is None  # too close to expiry
    assert reused(mine, user=UserRef("https://as.example", "bob")) is None
    assert reused(mine, user=UserRef("https://other.example", "alice")) is None
    assert reused(mine, client="another-client") is None
    assert reusable_link_of_same_user_and_client([mine], ALICE, "c", "github", scopes, 0.0) is None
    assert reusable_link_of_same_user_and_client([mine], ALICE, "c", "mockhub", ("repo",), 0.0) is None
    for status in (ElicitationStatus.OPENED, ElicitationStatus.COMPLETE, ElicitationStatus.FAILED):
        assert reused(elicitation(status)) is None
    assert reused(elicitation(ElicitationStatus.OPENED), mine) is mine


def test_elicitation_of_same_user() -> None:
    mine = elicitation()
    assert elicitation_of_same_user(mine, ALICE) is mine
    assert elicitation_of_same_user(mine, UserRef("https://as.example", "bob")) is None
    assert elicitation_of_same_user(mine, UserRef("https://other.example", "alice")) is None
    assert elicitation_of_same_user(None, ALICE) is None


def test_require_first_open() -> None:
    opened = elicitation(ElicitationStatus.OPENED)
    assert require_first_open(opened) is opened
    with pytest.raises(ElicitationAlreadyUsed):
        require_first_open(None)


class OneStateStore:
    def __init__(self, state: OAuthState) -> None:
        self._states = {state.state: state}
        self.nonces = {"nonce-value"}

    async def take_oauth_state(self, state: str) -> OAuthState | None:
        return self._states.pop(state, None)

    async def take_nonce(self, nonce: str) -> bool:
        if nonce in self.nonces:
            self.nonces.remove(nonce)
            return True
        return False


def oauth_state() -> OAuthState:
    return OAuthState(
        state=mint_opaque_id(),
        elicitation=elicitation(ElicitationStatus.OPENED),
        browser_binding="b" * 64,
        code_verifier="v" * 86,
        redirect_uri="http://127.0.0.1/callback/mockhub",
        token_endpoint="http://127.0.0.1/token",
        expected_issuer="http://127.0.0.1/mockhub",
        created_at=0.0,
        expires_at=600.0,
    )


async def test_require_single_use_state() -> None:
    state = oauth_state()
    store = OneStateStore(state)
    assert await require_single_use_state(store, state.state) == state
    with pytest.raises(InvalidState):
        await require_single_use_state(store, state.state)


def test_require_same_browser() -> None:
    require_same_browser("b" * 64, "b" * 64)
    with pytest.raises(WrongBrowser):
        require_same_browser("c" * 64, "b" * 64)
    with pytest.raises(WrongBrowser):
        require_same_browser(None, "b" * 64)


def test_callback_request_digest_names_the_browser_path_and_every_parameter() -> None:
    query = {"state": "s" * 43, "code": "c" * 43, "iss": "https://hub.example"}
    digest = callback_request_digest("b" * 64, "mockhub", query)
    assert digest == callback_request_digest("b" * 64, "mockhub", dict(reversed(query.items())))
    assert digest != callback_request_digest("x" * 64, "mockhub", query)  # another browser
    assert digest != callback_request_digest("b" * 64, "mockslack", query)  # another redirect URI
    assert digest != callback_request_digest("b" * 64, "mockhub", {**query, "code": "d" * 43})
    assert "c" * 43 not in (digest or "")
    assert callback_request_digest(None, "mockhub", query) is None  # signed out: nothing to show again


def test_require_repeat_of_same_callback() -> None:
    recorded = CallbackOutcome(
        request="r" * 64, outcome="completed", provider="mockhub", account_label="octocat", expires_at=1.0
    )
    assert require_repeat_of_same_callback(recorded, "r" * 64) is recorded
    for request in ("q" * 64, None):
        with pytest.raises(InvalidState):
            require_repeat_of_same_callback(recorded, request)
    with pytest.raises(InvalidState):
        require_repeat_of_same_callback(None, "r" * 64)


def test_require_redirect_uri_of_provider() -> None:
    mockhub = ProviderConfig(
        name="mockhub",
        display_name="MockHub",
        authorize_url="https://hub.example/authorize",
        token_url="https://hub.example/token",
        userinfo_url="https://hub.example/user",
        client_id="c",
        client_secret="s",
    )
    assert require_redirect_uri_of_provider("mockhub", mockhub) is mockhub
    for path in ("otherhub", "MockHub", "", None):
        with pytest.raises(MixUp):
            require_redirect_uri_of_provider(path, mockhub)
    with pytest.raises(MixUp):
        require_redirect_uri_of_provider("mockhub", None)  # no longer configured


def test_check_rfc9207_issuer() -> None:
    check_rfc9207_issuer("https://hub.example", "https://hub.example")
    check_rfc9207_issuer(None, None)  # a provider that does not advertise RFC 9207
    check_rfc9207_issuer("anything", None)
    for received in (None, "", "https://evil.example", "https://hub.example/"):
        with pytest.raises(AuthorizationResponseIssuerMismatch):
            check_rfc9207_issuer(received, "https://hub.example")


def test_a_flow_begun_at_an_authorization_server_the_provider_left_is_not_finished() -> None:
    """docs/gateway.md: a remote MCP server moved to another authorization server while the user
    signed in at the old one: the code is not redeemed with the new server's client."""
    require_flow_at_current_issuer("https://as.example", "https://as.example")
    require_flow_at_current_issuer(None, None)  # a provider without an issuer
    for recorded, current in (("https://old.example", "https://as.example"), (None, "https://as.example")):
        with pytest.raises(AuthorizationServerMoved):
            require_flow_at_current_issuer(recorded, current)


def test_check_rfc9207_issuer_when_not_advertised() -> None:
    """The 2026-07-28 table: an authorization server that does not advertise `iss` may leave it
    out, but one it sends is compared all the same, as a string."""
    check_rfc9207_issuer(None, "https://hub.example", required=False)
    check_rfc9207_issuer("https://hub.example", "https://hub.example", required=False)
    for received in ("", "https://evil.example", "https://hub.example/", "HTTPS://hub.example"):
        with pytest.raises(AuthorizationResponseIssuerMismatch):
            check_rfc9207_issuer(received, "https://hub.example", required=False)


def test_require_safe_next() -> None:
    link = "/connect?elicitationId=" + mint_opaque_id()
    assert require_safe_next(link) == link
    assert require_safe_next("/connections") == "/connections"
    for bad in (
        "//evil.example",
        "https://evil.example",
        "/\\evil.example",
        "/connections@evil.example",
        "/connect?elicitationId=short",  # not the shape we mint
        "/connect?elicitationId=" + "a" * 20 + "&next=//evil",
        "javascript:alert(1)",
        None,
        42,
    ):
        assert require_safe_next(bad) == "/connections"


def test_require_login_issuer() -> None:
    assert require_login_issuer("https://as.example", "alice", "https://as.example") == ALICE
    refused: tuple[tuple[object, object], ...] = (
        ("https://evil.example", "alice"),
        ("https://as.example", ""),
        ("https://as.example", 7),
    )
    for iss, sub in refused:
        with pytest.raises(LoginIssuerMismatch):
            require_login_issuer(iss, sub, "https://as.example")


def test_require_account_argument() -> None:
    require_account_argument(None)
    require_account_argument("octocat")
    for bad, message in (("", "1 to 256"), ("a" * 257, "1 to 256"), ("\udcff", "not valid text")):
        with pytest.raises(InvalidToolArgument, match=message):
            require_account_argument(bad)


def test_require_account_id_of_provider() -> None:
    assert require_account_id_of_provider(42, "Hub") == "42"
    assert require_account_id_of_provider("a" * MAX_ACCOUNT_ID, "Hub") == "a" * MAX_ACCOUNT_ID
    # One character more could be stored but never named again by a tool or the disconnect form.
    with pytest.raises(AccountIdTooLong):
        require_account_id_of_provider("a" * (MAX_ACCOUNT_ID + 1), "Hub")
    for unnamed in (None, "", {"id": 1}, [1], "\ud800"):
        with pytest.raises(AccountNotNamed):
            require_account_id_of_provider(unnamed, "Hub")


def test_session_id_checked_by_sdk() -> None:
    assert session_id_checked_by_sdk("mcp-1.abc", stateless=False) == "mcp-1.abc"
    assert session_id_checked_by_sdk(None, stateless=False) is None
    assert session_id_checked_by_sdk("mcp-1.abc", stateless=True) is None  # 2026-07-28: no sessions


def test_require_request_state_for_provider() -> None:
    require_request_state_for_provider("mockhub", "mockhub")
    with pytest.raises(InvalidRequestState, match="not valid for this tool"):
        require_request_state_for_provider("otherhub", "mockhub")


async def test_require_single_use_request_state() -> None:
    store = OneStateStore(oauth_state())
    await require_single_use_request_state(store, "nonce-value")
    with pytest.raises(InvalidRequestState, match="already used"):
        await require_single_use_request_state(store, "nonce-value")
