"""Every security check of the connect flow, the browser session, the login and the broker: one
function each, named after what it enforces, with the clause it answers.

They take plain values (no Starlette request), so each one is unit-tested on its own
(tests/unit/service/flow/test_security_checks.py), and each raises a `service.errors` refusal when it fails.
docs/threat-model.md names them in its mitigation column; scripts/mutation_check.py removes each
one in turn and requires a test to fail.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Collection, Mapping
from typing import Protocol, TypeVar

from service.errors import (
    AccountIdTooLong,
    AccountNotNamed,
    AccountSwitchUnconfirmed,
    AuthorizationResponseIssuerMismatch,
    AuthorizationServerMoved,
    BlankClientName,
    BrowserRefusal,
    CrossSiteRequest,
    CsrfTokenMismatch,
    ElicitationAlreadyUsed,
    ElicitationUserMismatch,
    InvalidAccountChoice,
    InvalidRequestState,
    InvalidState,
    InvalidToolArgument,
    LoginIssuerMismatch,
    MixUp,
    NotSignedIn,
    SessionExpired,
    WrongBrowser,
)
from service.flow.browser_session import BrowserSession
from service.flow.names import is_blank
from service.providers.catalogue import ProviderConfig
from service.urls import CONNECTIONS_PATH, connect_link, origin
from token_store import CallbackOutcome, ElicitationStatus, OAuthState, PendingElicitation, SlotTags, UserRef

# ---- opaque ids: minted here, checked here -------------------------------------------------------

# Elicitation ids, OAuth states and requestState nonces are `token_urlsafe(32)` (43 characters,
# 256 bits). The accepted shape leaves room for other lengths we may mint, never for characters
# that could mean something to a URL, a store key or a log line.
# mutant: connect.opaque_ids
OPAQUE_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")  # used with fullmatch


def mint_opaque_id(owner: UserRef | None = None, slot_tags: SlotTags | None = None) -> str:
    """A fresh id: 256 bits from `secrets` (RFC 6819 §5.1.4.2.2: not guessable). On Redis Cluster
    (`slot_tags`, from `Settings.slot_tags`), one minted for `owner` is also led by the owner's
    slot tag, masked under a server key (`SlotTags.mint`), which places the record it names in
    the owner's hash slot (docs/redis.md, "Cluster") and tells nobody else whose it is;
    everywhere else an id is the random bits alone, saying nothing of its user
    (2026-07-28/security-best-practices.mdx "State Handle Hijacking": "secure, non-deterministic
    handles")."""
    if owner is not None and slot_tags is not None:
        return slot_tags.mint(owner)
    return secrets.token_urlsafe(32)


def require_opaque_id(value: object, refusal: type[BrowserRefusal]) -> str:
    """An id or state must have the shape we mint before it reaches the store or a log.

    RFC 6819 §5.1.4.2.2 "The authorization server should generate ... with enough entropy";
    docs/threat-model.md, "3. Ids and states": malformed input gets a 400, never a 500.
    """
    if not isinstance(value, str) or not OPAQUE_ID.fullmatch(value):
        raise refusal()
    return value


# ---- the browser session --------------------------------------------------------------------------


T = TypeVar("T")


def require_signed_in(browser: T | None, refusal: type[BrowserRefusal] = NotSignedIn) -> T:
    """A state-changing browser route needs a signed-in user (2025-11-25/client-elicitation.mdx
    "Phishing": "verify the identity of the user who opens the URL")."""
    if browser is None:
        raise refusal()
    return browser


def require_session_within_lifetime(login_at: float, now: float, max_age: float) -> None:
    """The session ends `max_age` seconds after the login, however often the cookie is renewed
    (OWASP Session Management Cheat Sheet, "Absolute Timeout"); Starlette's cookie max-age slides."""
    # mutant: session.absolute_lifetime
    if now - login_at > max_age:
        raise SessionExpired()


def rotate_session_on_login(session: BrowserSession, user: UserRef, now: float) -> None:
    """Log `user` in with a fresh session: nothing from before the login survives, and the
    browser id and CSRF token are new (OWASP Session Management Cheat Sheet, "Renew the Session
    ID After Any Privilege Level Change"; session fixation)."""
    # mutant: session.rotated_on_login
    session.clear()
    session.sign_in(user, now, browser_id=mint_opaque_id(), csrf=mint_opaque_id())


def require_csrf_token(
    expected: object, submitted: object, refusal: type[CsrfTokenMismatch] = CsrfTokenMismatch
) -> None:
    """Synchronizer token on every state-changing POST (OWASP CSRF Prevention Cheat Sheet,
    "Synchronizer Token Pattern"; RFC 9700 §4.7), compared in constant time."""
    # Compare bytes: compare_digest refuses non-ASCII str, which must be a 403, not a 500.
    if not (
        isinstance(expected, str)
        # mutant: csrf.token_compared
        and isinstance(submitted, str)
        # mutant: csrf.token_compared
        and hmac.compare_digest(expected.encode(), submitted.encode(errors="surrogatepass"))
    ):
        raise refusal()


def require_same_origin(origin_header: str | None, public_url: str) -> None:
    """A state-changing POST that names its origin must come from our own pages: an `Origin`
    naming another origin is refused (OWASP CSRF Prevention Cheat Sheet, "Verifying Origin With
    Standard Headers"; RFC 6454 §7.3). Defence in depth behind `require_csrf_token`.

    An absent `Origin` is allowed, since some browsers omit it, and so is `null`: our pages send
    `Referrer-Policy: no-referrer`, under which browsers serialize the origin of every form POST,
    our own included, as `null` (Fetch Standard, "append a request `Origin` header")."""
    # mutant: origin.same_origin
    if origin_header not in (None, WITHHELD_ORIGIN) and origin_header != origin(public_url):
        raise CrossSiteRequest()


WITHHELD_ORIGIN = "null"


def require_no_silent_account_switch(signed_in: UserRef | None, signing_in: UserRef | None) -> None:
    """A sign-in never replaces this browser's signed-in user with another: switching takes the
    user's own POST on one of our pages (sign out, CSRF-protected) first. A login started from
    another site must not swap Alice's session for Mallory's (login CSRF: RFC 6749 §10.12; OWASP
    CSRF Prevention Cheat Sheet, "Login CSRF"). `signing_in` is None before the authorization
    server has said who signs in, so any signed-in user stops a new sign-in there."""
    # mutant: login.no_silent_account_switch
    if signed_in is not None and signing_in != signed_in:
        raise AccountSwitchUnconfirmed()


def require_visible_client_name(name: str) -> str:
    """A client name shown to the user has a visible letter and no character that draws nothing
    (zero-width, format, Hangul filler...), so it cannot pass for an empty or another name
    (UTS #39 §3.1: default-ignorable characters are not allowed in identifiers; RFC 7591 §5: client
    metadata is the registrant's own word, shown to users who rely on it)."""
    # mutant: names.visible_client_name
    if not name.strip() or any(is_blank(c) for c in name):
        raise BlankClientName()
    return name


# ---- /connect and /callback ------------------------------------------------------------------------


def require_same_user(
    browser_user: UserRef, owner: UserRef, refusal: type[BrowserRefusal] = ElicitationUserMismatch
) -> None:
    """The browser's user is the user the elicitation was created for.

    2025-11-25/client-elicitation.mdx "Phishing": "the server MUST verify that the user who opens
    the URL is the same user who initiated the elicitation request".
    """
    # mutant: connect.same_user
    if browser_user != owner:
        raise refusal()


def reusable_link_of_same_user_and_client(
    live: Collection[PendingElicitation],
    user: UserRef,
    client_id: str,
    provider: str,
    scopes: tuple[str, ...],
    usable_until: float,
) -> PendingElicitation | None:
    """The user's unopened link for the same provider and scopes, asked for by the same client and
    good until at least `usable_until`, to be shown again instead of a new one; None when there is
    none. Another user's or another client's link is never handed out.

    2025-11-25/client-elicitation.mdx "Security Considerations": "Servers MUST bind elicitation
    requests to the client and user identity".
    """
    for elicitation in live:
        if (
            elicitation.user == user
            # mutant: connect.link_shown_again_to_same_client
            and elicitation.client_id == client_id
            and elicitation.provider == provider
            and elicitation.scopes == scopes
            # mutant: connect.link_shown_again_unopened
            and elicitation.status is ElicitationStatus.PENDING
            and elicitation.expires_at >= usable_until
        ):
            return elicitation
    return None


def require_pending(elicitation: PendingElicitation) -> None:
    """A connect link is good for one flow: only a `pending` elicitation may be opened
    (2026-07-28/security-best-practices.mdx "State Handle Hijacking": single-use handles)."""
    # mutant: connect.link_pending
    if elicitation.status is not ElicitationStatus.PENDING:
        raise ElicitationAlreadyUsed()


def require_first_open(opened: PendingElicitation | None) -> PendingElicitation:
    """The `pending → opened` compare-and-set must have been ours: of racing visits of one link,
    exactly one goes on (2026-07-28/security-best-practices.mdx "State Handle Hijacking")."""
    if opened is None:
        raise ElicitationAlreadyUsed()
    return opened


class _StateStore(Protocol):
    async def take_oauth_state(self, state: str) -> OAuthState | None: ...


async def require_single_use_state(store: _StateStore, state: str) -> OAuthState:
    """The OAuth state is consumed before any other check, so it is good for exactly one callback
    (RFC 6749 §10.12: "binding ... to the user-agent's authenticated state"; RFC 6819 §5.3.5)."""
    # mutant: callback.single_use_state after "if taken is not None: await store.put_oauth_state(taken)"
    taken = await store.take_oauth_state(state)
    if taken is None:
        raise InvalidState()
    return taken


def callback_request_digest(
    session_binding: str | None, path_provider: str | None, query: Mapping[str, str]
) -> str | None:
    """What identifies one callback request: this browser's binding, the provider path and every
    parameter as the flow reads them (the code included), hashed. None for a signed-out browser,
    whose callback leaves no outcome to show again."""
    if session_binding is None:
        return None
    request = json.dumps([session_binding, path_provider, sorted(query.items())], separators=(",", ":"))
    return hashlib.sha256(request.encode()).hexdigest()


def require_repeat_of_same_callback(recorded: CallbackOutcome | None, request: str | None) -> CallbackOutcome:
    """A callback whose state was already taken is answered with the first one's outcome only
    when it is the same request again (same browser, same provider path, same code): a reload, or
    the router's retry after a replica failed. Anything else stays a used state, with nothing of
    the first outcome shown (RFC 6749 §10.5: a code is used once; §10.12: the state binds the
    response to the browser; RFC 9700 §4.7: a response from another browser is refused)."""
    # mutant: callback.repeat_of_same_request
    if recorded is None or request is None or not hmac.compare_digest(recorded.request, request):
        raise InvalidState()
    return recorded


def require_same_browser(session_binding: str | None, state_binding: str) -> None:
    """The callback arrives in the browser that passed `POST /connect` (RFC 9700 §4.7: the state
    is bound to the user agent; RFC 6819 §4.4.1.8 CSRF against the redirect URI)."""
    # mutant: callback.same_browser
    if session_binding is None or not hmac.compare_digest(session_binding, state_binding):
        raise WrongBrowser()


def require_redirect_uri_of_provider(
    path_provider: object, configured: ProviderConfig | None
) -> ProviderConfig:
    """The response arrives on the redirect URI of the provider the flow was started at.

    RFC 9700 §4.4.2: "clients MUST use a distinct redirect URI for each issuer"; a response on
    another provider's URI is a mix-up, refused before the code is redeemed.
    """
    # mutant: callback.redirect_uri_of_provider drop 1
    if configured is None or path_provider != configured.name:
        raise MixUp()
    return configured


def check_rfc9207_issuer(received: str | None, expected: str | None, *, required: bool = True) -> None:
    """RFC 9207 §2.4: "clients MUST compare the received issuer identifier with the issuer
    identifier of the authorization server" (a missing `iss` from an issuer that sends one is
    refused too); done before `error` or `code` is looked at. With `required` False (an
    authorization server that does not advertise `iss`), a missing `iss` passes and one that is
    sent must still match (the 2026-07-28 MCP authorization table, RFC 9207 §2.4 local policy).
    Compared as strings, no normalisation."""
    # mutant: callback.rfc9207_issuer
    if expected is not None and received != expected and (required or received is not None):
        raise AuthorizationResponseIssuerMismatch()


def require_flow_at_current_issuer(recorded: str | None, current: str | None) -> None:
    """A flow begun at one authorization server ends there or not at all: after the provider moved
    to another (a remote MCP server, docs/gateway.md), the code is never redeemed with the new
    server's client at the old server's token endpoint (2026-07-28 basic/authorization, "Client
    Registration", SEP-2352: credentials are not portable across authorization servers)."""
    # mutant: callback.flow_at_current_issuer
    if recorded != current:
        raise AuthorizationServerMoved()


# ---- login ----------------------------------------------------------------------------------------


def require_safe_next(value: object) -> str:
    """The return path after login is one of ours, relative, and names an id of the shape we mint;
    anything else becomes `/connections` (RFC 9700 §4.11 open redirectors;
    2025-11-25/basic-authorization.mdx "Open Redirection")."""
    # mutant: login.safe_next drop 1
    if isinstance(value, str) and _SAFE_NEXT.fullmatch(value):
        return value
    return CONNECTIONS_PATH


# A connect link (whose id has the shape we mint), or the connections page.
_SAFE_NEXT = re.compile(rf"{re.escape(connect_link(''))}{OPAQUE_ID.pattern}|{re.escape(CONNECTIONS_PATH)}")


def require_login_issuer(iss: object, sub: object, expected_issuer: str) -> UserRef:
    """The browser's user is named by the issuer of the MCP access tokens, so both name users
    alike (2025-11-25/client-elicitation.mdx "Phishing": compare the authorization server's
    subject)."""
    # mutant: login.issuer drop 0
    if iss != expected_issuer or not isinstance(sub, str) or not sub:
        raise LoginIssuerMismatch()
    return UserRef(iss=expected_issuer, sub=sub)


# ---- accounts -------------------------------------------------------------------------------------

# The longest account id stored, and so the longest a tool argument or the connections page's
# disconnect form may name: a connection must stay reachable by every way of naming it.
MAX_ACCOUNT_ID = 256


def require_account_id_of_provider(account: object, provider: str) -> str:
    """The account id a provider's user endpoint names becomes part of the connection's key: a
    string (or number) of 1 to MAX_ACCOUNT_ID characters of valid text, else the flow fails before
    anything is stored (docs/threat-model.md, "9. ... bounded inputs"; RFC 9110 §2.3: parse
    defensively)."""
    if account is None or isinstance(account, (dict, list)) or account == "":
        raise AccountNotNamed(provider)
    named = str(account)
    try:
        named.encode()
    except UnicodeEncodeError:
        raise AccountNotNamed(provider) from None
    # mutant: provider_oauth.bounded_account_id
    if len(named) > MAX_ACCOUNT_ID:
        raise AccountIdTooLong(provider, MAX_ACCOUNT_ID)
    return named


# ---- the broker (MCP leg) -------------------------------------------------------------------------


def require_account_argument(account: str | None) -> None:
    """A tool argument that becomes part of a store key: short, and valid UTF-8
    (docs/threat-model.md, "9. ... bounded inputs")."""
    if account is None:
        return
    try:
        account.encode()
    except UnicodeEncodeError:
        raise InvalidToolArgument("account is not valid text") from None
    if not account or len(account) > MAX_ACCOUNT_ID:
        raise InvalidToolArgument(f"account must be 1 to {MAX_ACCOUNT_ID} characters")


def session_id_checked_by_sdk(header: str | None, stateless: bool) -> str | None:
    """The request's `Mcp-Session-Id`, only where the SDK checked that the session is this
    caller's: a 2025-11-25 session answers 404 to any other principal. A 2026-07-28 request has no
    session, so the header is the client's own text and names none
    (2026-07-28/transports-streamable-http.mdx "Earlier Streamable HTTP Revisions": "An
    `Mcp-Session-Id` header on a request: ignore it")."""
    # mutant: broker.stateless_session_id
    if stateless:
        return None
    return header


def elicitation_of_same_user(
    elicitation: PendingElicitation | None, user: UserRef
) -> PendingElicitation | None:
    """The flow a 2026-07-28 retry names counts only when it is the caller's own: another user's
    elicitation reads as absent, so its outcome never answers this caller's retry.

    2026-07-28/security-best-practices.mdx "State Handle Hijacking": a state handle is bound to
    the user it was issued to (the SDK's sealing binds the requestState; this binds what it names).
    """
    # mutant: broker.elicitation_of_same_user " or elicitation.user != user" -> ""
    if elicitation is None or elicitation.user != user:
        return None
    return elicitation


def require_request_state_for_provider(state_provider: str, provider: str) -> None:
    """A requestState resumes only the `require` of the provider it was made for
    (2026-07-28/patterns-mrtr.mdx "Security Considerations": bind the state to its request)."""
    # mutant: broker.request_state_for_provider
    if state_provider != provider:
        raise InvalidRequestState("requestState is not valid for this tool")


class _NonceStore(Protocol):
    async def take_nonce(self, nonce: str) -> bool: ...


async def require_single_use_request_state(store: _NonceStore, nonce: str) -> None:
    """2026-07-28/patterns-mrtr.mdx: state that must be consumed at most once is enforced
    server-side; the nonce is taken atomically."""
    # mutant: broker.single_use_request_state
    if not await store.take_nonce(nonce):
        raise InvalidRequestState("requestState was already used; call the tool again without it")


def require_offered_account(answer: object, offered: Collection[str]) -> str:
    """A form answer to "which account?" is one of the options this server offered, and those
    are the caller's own accounts only, so an answer naming any other account (another user's
    included) is refused before anything is looked up with it.

    2025-11-25/client-elicitation.mdx "Form Mode Security": "Servers SHOULD validate received
    data matches the requested schema"; the client's own validation is not relied on.
    """
    # mutant: broker.offered_account
    if not isinstance(answer, str) or answer not in offered:
        raise InvalidAccountChoice("the account answer is not one of the choices offered")
    return answer
