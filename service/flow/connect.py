"""The connect flow, start to finish: the one owner of an elicitation's status.

A tool call creates a `pending` elicitation (`create`); the browser opens it at `/connect`
(`check_link`, then `open` or `open_with_api_key`); the provider sends the browser back to
`/callback/<provider>` (`finish`), which stores the connection and completes the elicitation
(`complete`), or fails it (`fail`); a 2026-07-28 client may decline it (`decline`).

Every status change goes through `_transition`, which refuses any change the status machine does
not have (`token_store.Transition`, the one statement of it, which every backend follows too);
`TRANSITIONS` says who makes each, and docs/flow.md, "Elicitation status machine", shows the same
table (a unit test compares them).
The checks themselves live in service/flow/security_checks.py; the routes only parse and render.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx

from service.errors import (
    CallbackEndedBefore,
    DomainError,
    FlowFailed,
    InvalidApiKey,
    InvalidRequest,
    InvalidState,
    MissingCode,
    NotAnApiKeyProvider,
    ProviderApiError,
    ProviderDenied,
    ProviderFailure,
    ProviderNoLongerConfigured,
    TokenExchangeError,
    TooManyPendingElicitations,
    UnknownElicitation,
    UnknownTransition,
    WrongBrowser,
)
from service.flow.security_checks import (
    callback_request_digest,
    check_rfc9207_issuer,
    mint_opaque_id,
    require_account_id_of_provider,
    require_first_open,
    require_flow_at_current_issuer,
    require_opaque_id,
    require_pending,
    require_redirect_uri_of_provider,
    require_repeat_of_same_callback,
    require_same_browser,
    require_same_user,
    require_signed_in,
    require_single_use_state,
    reusable_link_of_same_user_and_client,
)
from service.observability.audit import audit
from service.observability.flow_events import FlowEvents, FlowOutcome, failure_text, outcome_of
from service.observability.logs import Pseudonyms
from service.observability.metrics import Metrics
from service.observability.tracing import Tracing
from service.observability.webhooks import CREATED as CONNECTION_CREATED
from service.observability.webhooks import RECOVERED as CONNECTION_RECOVERED
from service.observability.webhooks import ConnectionEvents
from service.providers.api import fetch_userinfo, field_at
from service.providers.catalogue import ProviderConfig
from service.providers.mcp_downstream import DOWNSTREAM_ACCOUNT
from service.providers.oauth import authorization_url, exchange_code, keep_refresh_token
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings
from token_store import (
    CallbackOutcome,
    Connection,
    ConnectionKey,
    ConnectionStatus,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    Store,
    StoreUnavailable,
    TokenSet,
    TooManyPending,
    Transition,
    UserRef,
    require_transition,
)

logger = logging.getLogger(__name__)

PENDING, OPENED = ElicitationStatus.PENDING, ElicitationStatus.OPENED
FAILED = ElicitationStatus.FAILED

# Who makes each change of the status machine (`Transition`: the changes themselves). Creation
# (→ pending) is `create`; expiry is not a status (an expired record reads as absent).
TRANSITIONS: dict[Transition, str] = {
    Transition.OPEN: "POST /connect (state stored) or POST /connect/api-key (key accepted): open",
    Transition.DECLINE: (
        "a 2026-07-28 retry whose connect response is decline or cancel, "
        "or POST /connect/cancel (Cancel on the confirmation page): decline"
    ),
    Transition.COMPLETE: "GET /callback/<provider> or POST /connect/api-key, connection stored: complete",
    Transition.FAIL: "GET /callback/<provider>, a refused check or a failed step: fail",
}

# How long a callback's outcome is kept for the same request again: the router's retry comes
# within seconds, a reload of the page within minutes; short, as the record names the account.
CALLBACK_OUTCOME_SECONDS = 300.0

# What an API key looks like: printable, no spaces, of these lengths (the API-key page's
# minlength/maxlength and the form's size bound are these too).
API_KEY_MIN_LENGTH, API_KEY_MAX_LENGTH = 8, 4096
API_KEY = re.compile(rf"[\x21-\x7e]{{{API_KEY_MIN_LENGTH},{API_KEY_MAX_LENGTH}}}")


@dataclass(frozen=True)
class Link:
    """A connect link that passed its checks: the live elicitation, its provider, and the
    connection the user already holds there (None when none; a hint for the authorization URL)."""

    elicitation: PendingElicitation
    provider: ProviderConfig
    held: Connection | None


@dataclass(frozen=True)
class CallbackParams:
    """The raw callback: the provider named by `/callback/<provider>`, the query parameters as
    received (`state`, then `code` or `error`: RFC 6749 §4.1.2; `iss`: RFC 9207), and this
    browser's signed-in user and session binding (None when signed out)."""

    path_provider: str | None
    query: Mapping[str, str]
    session_user: UserRef | None
    session_binding: str | None


@dataclass(frozen=True)
class Finished:
    """A callback that connected an account: what its page shows (the provider's display name and
    the account's label)."""

    provider: str
    account_label: str


class ConnectFlow:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        outbound: OutboundHttp,
        *,
        clock: Callable[[], float],
        publish: Callable[[PendingElicitation], Awaitable[None]] | None = None,
        events: FlowEvents | None = None,
        connection_events: ConnectionEvents | None = None,
    ) -> None:
        self._connection_events = connection_events
        self._settings = settings
        self._store = store
        self._outbound = outbound
        self._clock = clock
        self._publish = publish
        self._events = events or FlowEvents(Metrics(), Pseudonyms(settings.session_secret), Tracing(), clock)

    # ---- the status machine ---------------------------------------------------------------------

    async def _transition(
        self, elicitation_id: str, old: ElicitationStatus, new: ElicitationStatus
    ) -> PendingElicitation | None:
        """A status change alone: an atomic compare-and-set (`Store.transition_elicitation`),
        so each one happens at most once, whichever replica performs it. `open` and `complete`
        change the status together with the record they store (`Store.open_elicitation` makes
        `Transition.OPEN`, `Store.complete_elicitation` `Transition.COMPLETE`)."""
        try:
            require_transition(old, new)
        except ValueError as exc:
            raise UnknownTransition(str(exc)) from None
        return await self._store.transition_elicitation(elicitation_id, old, new)

    async def create(
        self,
        user: UserRef,
        client_id: str,
        mcp_session_id: str | None,
        provider: ProviderConfig,
        scopes: tuple[str, ...],
        revision: str = "2025-11-25",
        client_name: str | None = None,
    ) -> PendingElicitation:
        """→ pending: a new elicitation, counted against `max_pending_per_user` in the same step."""
        now = self._clock()
        elicitation = PendingElicitation(
            id=mint_opaque_id(user, self._settings.slot_tags()),
            user=user,
            client_id=client_id,
            mcp_session_id=mcp_session_id,
            provider=provider.name,
            scopes=scopes,
            created_at=now,
            expires_at=now + self._settings.elicitation_ttl,
            client_name=client_name,
        )
        try:
            await self._store.create_elicitation(elicitation, self._settings.max_pending_per_user)
        except TooManyPending:
            raise TooManyPendingElicitations(provider.display_name) from None
        self._events.created(elicitation, revision)
        return elicitation

    async def decline(self, elicitation_id: str) -> None:
        """pending → failed: the link stops working and stops counting against the limit."""
        declined = await self._transition(elicitation_id, PENDING, FAILED)
        if declined is not None:
            await self._finished_without_connection(declined, FlowOutcome.DENIED, "client", "declined")

    async def fail(self, elicitation: PendingElicitation, reason: BaseException | None = None) -> None:
        """opened → failed, and the session that asked is told why. On a store failure the record
        expires on its own; the page already says the flow failed."""
        outcome, step, detail = outcome_of(reason) if reason is not None else (FlowOutcome.REFUSED, "", "")
        with contextlib.suppress(StoreUnavailable):
            failed = await self._transition(elicitation.id, OPENED, FAILED)
            if failed is not None:
                await self._finished_without_connection(failed, outcome, step, detail)

    async def withdraw(self, user: UserRef) -> int:
        """pending/opened → failed for each of the user's live flows (an operator removed the
        user), and each session that asked is told; returns how many ended."""
        ended = 0
        for elicitation in await self._store.live_elicitations(user):
            failed = await self._transition(elicitation.id, elicitation.status, FAILED)
            if failed is not None:
                ended += 1
                await self._finished_without_connection(failed, FlowOutcome.REFUSED, "operator", "withdrawn")
        return ended

    async def _finished_without_connection(
        self, failed: PendingElicitation, outcome: FlowOutcome, step: str, detail: str
    ) -> None:
        self._events.failed(failed, outcome, step, detail)
        if self._publish is not None:
            # The session learns the reason from the published record (the stored one keeps
            # only the status): its retry answers with what happened instead of a new link.
            await self._publish(replace(failed, failure=outcome.value))

    @contextlib.asynccontextmanager
    async def failing_closed(self, elicitation: PendingElicitation) -> AsyncIterator[None]:
        """Any error inside fails the flow (opened → failed) before it propagates; an unexpected
        one becomes `FlowFailed` (docs/threat-model.md, "8. Failure is closed")."""
        try:
            with self._events.step(elicitation, "callback"):
                yield
        except Exception as exc:
            await self.fail(elicitation, exc)
            if isinstance(exc, (DomainError, StoreUnavailable)):
                raise
            logger.exception("connect flow: unexpected error")
            raise FlowFailed() from exc

    # ---- reading a flow ---------------------------------------------------------------------------

    async def elicitation(self, elicitation_id: str) -> PendingElicitation | None:
        """The elicitation as stored, unchecked (None when unknown or expired)."""
        return await self._store.get_elicitation(elicitation_id)

    async def unchecked_link(self, elicitation_id: str) -> tuple[PendingElicitation, ProviderConfig] | None:
        """What a link names before any check: its elicitation and provider, for a signed-out
        visitor's sign-in page. None when unknown, expired, of an unknown provider, or when the
        store is down (the sign-in still works; the page after it reports the store)."""
        try:
            elicitation = await self.elicitation(elicitation_id)
        except StoreUnavailable:
            return None
        provider = self._settings.providers.get(elicitation.provider) if elicitation else None
        if elicitation is None or provider is None:
            return None
        return elicitation, provider

    async def link_to_show_again(
        self,
        user: UserRef,
        client_id: str,
        provider: str,
        scopes: tuple[str, ...],
        usable_until: float,
    ) -> PendingElicitation | None:
        """The user's unopened link that the same client may be shown again
        (`reusable_link_of_same_user_and_client`), or None."""
        live = await self._store.live_elicitations(user)
        return reusable_link_of_same_user_and_client(live, user, client_id, provider, scopes, usable_until)

    # ---- /connect ---------------------------------------------------------------------------------

    async def check_link(self, user: UserRef, elicitation_id: str) -> Link:
        """The live elicitation behind a link and its provider, for its own user, still unused
        (one store round trip, which also reads the connection the user holds there)."""
        found = await self._store.get_elicitation_with_connection(elicitation_id)
        if found is None:
            raise UnknownElicitation()
        elicitation, held = found
        require_same_user(user, elicitation.user)
        provider = self._settings.providers.get(elicitation.provider)
        if provider is None:
            raise ProviderNoLongerConfigured()
        require_pending(elicitation)
        return Link(elicitation, provider, held)

    async def open(self, link: Link, browser_binding: str) -> str:
        """pending → opened for an OAuth provider: store a one-time state bound to this browser
        and open the elicitation in one atomic step, then the URL of the provider's authorization
        endpoint (PKCE S256)."""
        elicitation, provider, held = link.elicitation, link.provider, link.held
        now = self._clock()
        state = OAuthState(
            state=mint_opaque_id(elicitation.user, self._settings.slot_tags()),
            elicitation=elicitation,
            browser_binding=browser_binding,
            code_verifier=secrets.token_urlsafe(64),  # RFC 7636 §4.1: 43-128 chars of high entropy
            redirect_uri=self._settings.callback_url(provider.name),
            token_endpoint=provider.token_url,
            expected_issuer=provider.issuer,
            created_at=now,
            expires_at=min(now + self._settings.state_ttl, elicitation.expires_at),
        )
        # State and transition in one step: never an OPENED elicitation without its state, and
        # a visit that lost the race (single use) leaves no state behind.
        # mutant: connect.link_opens_once unwrap or elicitation
        opened = require_first_open(await self._store.open_elicitation(state))
        return authorization_url(
            provider,
            state.redirect_uri,
            opened.scopes,
            state.state,
            state.code_verifier,
            # A held refresh token counts only while the grant is healthy.
            need_refresh_token=held is None
            or held.tokens.refresh_token is None
            or held.status is not ConnectionStatus.OK,
        )

    async def open_with_api_key(self, link: Link, submitted: str) -> Connection:
        """pending → opened → complete for an API-key provider: the key is checked at the
        provider first, then stored sealed like a token set."""
        elicitation, provider = link.elicitation, link.provider
        if provider.kind != "api_key":
            raise NotAnApiKeyProvider()
        key = submitted.strip()
        if not API_KEY.fullmatch(key):
            raise InvalidApiKey("That does not look like a key.")
        profile: dict[str, Any] = {provider.account_field: "default"}
        if provider.userinfo_url:
            try:
                profile = await fetch_userinfo(self._client(), provider, key)
            except ProviderApiError as exc:
                raise InvalidApiKey(f"{exc}.") from None
        opened = require_first_open(await self._transition(elicitation.id, PENDING, OPENED))
        async with self.failing_closed(opened):
            return await self.complete(opened, provider, TokenSet(access_token=key), profile)

    # ---- /callback --------------------------------------------------------------------------------

    async def finish(self, received: CallbackParams) -> Finished:
        """The callback: its state consumed first, then every check before the code is redeemed,
        then the exchange, the account, and `complete`. Any failure after the state was found
        fails the flow closed. How it ended is kept a short while under the state's hash: the
        same request again from the same browser (a reload, the router's retry after a replica
        failed) gets that outcome, never a second exchange; any other gets "Link expired"."""
        query = received.query
        state_value = require_opaque_id(query.get("state", ""), InvalidRequest)
        request = callback_request_digest(received.session_binding, received.path_provider, query)
        try:
            state = await require_single_use_state(self._store, state_value)
        except InvalidState:
            return await self._answered_before(state_value, request)
        try:
            provider, connection = await self._redeem(state, received)
        except (DomainError, StoreUnavailable) as exc:
            await self._remember(state, request, outcome_of(exc)[0])
            raise
        await self._remember(state, request, FlowOutcome.COMPLETED, connection.account_label)
        return Finished(provider.display_name, connection.account_label)

    async def _redeem(self, state: OAuthState, received: CallbackParams) -> tuple[ProviderConfig, Connection]:
        """Every check of the callback on a taken state, then the code exchange and `complete`."""
        query = received.query
        elicitation = state.elicitation
        async with self.failing_closed(elicitation):
            session_user = require_signed_in(received.session_user, WrongBrowser)
            require_same_browser(received.session_binding, state.browser_binding)
            require_same_user(session_user, elicitation.user, WrongBrowser)
            provider = require_redirect_uri_of_provider(
                received.path_provider, self._settings.providers.get(elicitation.provider)
            )
            require_flow_at_current_issuer(state.expected_issuer, provider.issuer)
            check_rfc9207_issuer(
                query.get("iss"), state.expected_issuer, required=provider.issuer_in_response == "required"
            )
            error = query.get("error")
            if error is not None:
                raise ProviderDenied(provider.display_name, error, query.get("error_description", ""))
            code = query.get("code", "")
            if not code:
                raise MissingCode()
            step = "token"
            try:
                with self._events.provider_call(provider.name, step):
                    tokens = await exchange_code(
                        provider,
                        token_endpoint=state.token_endpoint,
                        redirect_uri=state.redirect_uri,
                        scopes=elicitation.scopes,
                        code=code,
                        code_verifier=state.code_verifier,
                        timeout_seconds=self._settings.http_timeout,
                        outbound=self._outbound,
                    )
                step = "userinfo"
                with self._events.provider_call(provider.name, step):
                    profile = await self._profile(provider, tokens.access_token)
            except (TokenExchangeError, ProviderApiError) as exc:
                logger.warning("callback: provider %s: %s", provider.name, exc)
                raise ProviderFailure(provider.display_name, step, str(exc)) from None
            return provider, await self.complete(elicitation, provider, tokens, profile)

    async def _remember(
        self, state: OAuthState, request: str | None, outcome: FlowOutcome, account_label: str = ""
    ) -> None:
        """Keep how this callback ended for `CALLBACK_OUTCOME_SECONDS`, for the same request again.
        Best effort: without it a repeat gets "Link expired", as it would anyway."""
        if request is None:
            return
        recorded = CallbackOutcome(
            request=request,
            outcome=outcome.value,
            provider=state.elicitation.provider,
            account_label=account_label,
            expires_at=self._clock() + CALLBACK_OUTCOME_SECONDS,
        )
        try:
            await self._store.put_callback_outcome(state.state, recorded)
        except StoreUnavailable:
            logger.warning("callback: its outcome was not kept (store unavailable)")

    async def _answered_before(self, state_value: str, request: str | None) -> Finished:
        """A callback whose state is gone: the first one's outcome when this is the same request
        again (`require_repeat_of_same_callback`), else "Link expired"."""
        recorded = require_repeat_of_same_callback(
            await self._store.get_callback_outcome(state_value), request
        )
        logger.info("callback: the same request again; its first outcome (%s) shown", recorded.outcome)
        provider = self._settings.providers.get(recorded.provider)
        shown = provider.display_name if provider is not None else recorded.provider
        if recorded.outcome != FlowOutcome.COMPLETED:
            raise CallbackEndedBefore(failure_text(recorded.outcome, shown))
        return Finished(shown, recorded.account_label)

    async def complete(
        self,
        elicitation: PendingElicitation,
        provider: ProviderConfig,
        tokens: TokenSet,
        profile: dict[str, Any],
    ) -> Connection:
        """opened → complete: name the account from the profile, keep a refresh token the
        provider did not resend, store the connection under the elicitation's user, complete the
        elicitation, publish the completion, audit.

        The stored connection is read only when the token response has no refresh token. A
        reconnect keeps its first `connected_at`: the store keeps it (`Store.complete_elicitation`),
        so the connection returned here carries `connected_at` = now either way."""
        account = require_account_id_of_provider(
            field_at(profile, provider.account_field), provider.display_name
        )
        key = ConnectionKey(elicitation.user, provider.name, account)
        store = self._store
        events = (
            self._connection_events if self._connection_events and self._connection_events.enabled else None
        )
        previous = None
        if not tokens.refresh_token or events is not None:
            # Read only when needed: a response with a refresh token replaces the stored one anyway
            # (and the webhook says whether this connection is new or recovered).
            previous = await store.get_connection(key.user, key.provider, key.account)
        if not tokens.refresh_token and previous is not None and previous.status is ConnectionStatus.OK:
            # A refresh token the provider did not resend stays valid (RFC 6749 §6; Google
            # omits it on re-consent), unless the provider already refused it.
            tokens = keep_refresh_token(tokens, previous.tokens.refresh_token)
        now = self._clock()
        connection = Connection(
            key=key,
            tokens=tokens,
            account_label=str(field_at(profile, provider.label_field) or account)[:128],
            connected_at=now,  # for a new connection; the store keeps a replaced one's own
            updated_at=now,
        )
        # The token set and the completion in one step (the token set is kept whatever the
        # elicitation's status: the user did authorize).
        completed = await store.complete_elicitation(connection, elicitation.id)
        if events is not None and (previous is None or previous.status is not ConnectionStatus.OK):
            event = CONNECTION_CREATED if previous is None else CONNECTION_RECOVERED
            await events.emit(event, key, account_label=connection.account_label, status=ConnectionStatus.OK)
        if completed is not None:
            self._events.completed(completed)
        if completed is not None and self._publish is not None:
            try:
                await self._publish(completed)
            except StoreUnavailable:
                # The token is stored: the client's retry finds it even without the notification.
                logger.warning("callback: completion not published (store unavailable)")
        audit("connect", key, scopes=" ".join(tokens.scopes))
        return connection

    async def _profile(self, provider: ProviderConfig, access_token: str) -> dict[str, Any]:
        """Who the grant is for, from the provider's userinfo; a provider without one (a remote
        MCP server names no account) has one account per user, named after the provider."""
        if not provider.userinfo_url:
            return {provider.account_field: DOWNSTREAM_ACCOUNT, provider.label_field: provider.display_name}
        return await fetch_userinfo(self._client(), provider, access_token)

    def _client(self) -> httpx.AsyncClient:
        return self._outbound.client
