"""The connect flow, start to finish: the one owner of an elicitation's status.

A tool call creates a `pending` elicitation (`create`); the browser opens it at `/connect`
(`check_link`, then `open` or `open_with_api_key`); the provider sends the browser back to
`/callback/<provider>` (`finish`), which stores the connection and completes the elicitation
(`complete`), or fails it (`fail`); a 2026-07-28 client may decline it (`decline`).

Every status change goes through `_transition`, which refuses any change not in `TRANSITIONS`;
docs/flow.md, "Elicitation status machine", shows the same table (a unit test compares them).
The checks themselves live in service/security_checks.py; the routes only parse and render.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx

from service.audit import audit
from service.errors import (
    AccountNotNamed,
    DomainError,
    FlowFailed,
    LinkUnknown,
    MissingCode,
    NotAnApiKeyService,
    ProviderDenied,
    ProviderFailure,
    StoreUnavailable,
    TooManyPending,
    TooManyPendingConnections,
    UnknownService,
    WrongBrowser,
)
from service.provider_api import ProviderApiError, fetch_userinfo, field_at
from service.provider_oauth import TokenExchangeError, authorization_url, exchange_code
from service.providers import ProviderConfig
from service.security_checks import (
    check_rfc9207_issuer,
    mint_opaque_id,
    require_first_open,
    require_pending,
    require_redirect_uri_of_provider,
    require_same_browser,
    require_same_user,
    require_signed_in,
)
from service.settings import Settings
from token_store import (
    Connection,
    ConnectionKey,
    ConnectionStatus,
    ElicitationStatus,
    OAuthState,
    PendingElicitation,
    Store,
    TokenSet,
    UserRef,
)

logger = logging.getLogger(__name__)

PENDING, OPENED = ElicitationStatus.PENDING, ElicitationStatus.OPENED
COMPLETE, FAILED = ElicitationStatus.COMPLETE, ElicitationStatus.FAILED

# The status machine: every allowed change, and who makes it. Creation (→ pending) is
# `create`; expiry is not a status (an expired record reads as absent).
TRANSITIONS: dict[tuple[ElicitationStatus, ElicitationStatus], str] = {
    (PENDING, OPENED): "POST /connect (state stored) or POST /connect/api-key (key accepted): open",
    (PENDING, FAILED): "a 2026-07-28 retry whose connect response is decline or cancel: decline",
    (OPENED, COMPLETE): "GET /callback/<provider> or POST /connect/api-key, connection stored: complete",
    (OPENED, FAILED): "GET /callback/<provider>, a refused check or a failed step: fail",
}

# The statuses of a flow still under way. Local until token_store.models defines them once.
LIVE_STATUSES = (PENDING, OPENED)

API_KEY = re.compile(r"[\x21-\x7e]{8,4096}")  # printable, no spaces: what keys look like


class UnknownTransition(RuntimeError):
    """A status change outside `TRANSITIONS`: a programming error, never a user's doing."""


class InvalidApiKey(DomainError):
    """The submitted key was refused; the API-key page is shown again with `text`."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def connect_url(public_url: str, elicitation_id: str) -> str:
    """The URL the user opens. It carries only the opaque id (docs/threat-model.md,
    "5. Connect URLs carry only an opaque id")."""
    return f"{public_url.rstrip('/')}/connect?elicitationId={elicitation_id}"


@dataclass(frozen=True)
class CallbackParams:
    """What `/callback/<provider>` received, parsed by the route."""

    path_provider: str | None
    session_user: UserRef | None  # the signed-in user of this browser, if any
    session_binding: str | None  # the browser binding of this session, if any
    iss: str | None
    error: str | None
    error_description: str
    code: str


class ConnectFlow:
    def __init__(
        self,
        settings: Settings,
        store: Callable[[], Store],
        *,
        clock: Callable[[], float],
        http: httpx.AsyncClient | None = None,
        publish: Callable[[PendingElicitation], Awaitable[None]] | None = None,
    ) -> None:
        self._settings = settings
        self._store = store  # a getter: the store is opened in the app lifespan
        self._clock = clock
        self._http = http
        self._publish = publish

    # ---- the status machine ---------------------------------------------------------------------

    async def _transition(
        self, elicitation_id: str, old: ElicitationStatus, new: ElicitationStatus
    ) -> PendingElicitation | None:
        """The only status change: an atomic compare-and-set (`Store.transition_elicitation`),
        so each one happens at most once, whichever replica performs it."""
        if (old, new) not in TRANSITIONS:
            raise UnknownTransition(f"{old.value} -> {new.value} is not a transition of the flow")
        return await self._store().transition_elicitation(elicitation_id, old, new)

    async def create(
        self,
        user: UserRef,
        client_id: str,
        mcp_session_id: str | None,
        provider: ProviderConfig,
        scopes: tuple[str, ...],
    ) -> PendingElicitation:
        """→ pending: a new elicitation, counted against `max_pending_per_user` in the same step."""
        now = self._clock()
        elicitation = PendingElicitation(
            id=mint_opaque_id(),
            user=user,
            client_id=client_id,
            mcp_session_id=mcp_session_id,
            provider=provider.name,
            scopes=scopes,
            created_at=now,
            expires_at=now + self._settings.elicitation_ttl,
        )
        try:
            await self._store().create_elicitation(elicitation, self._settings.max_pending_per_user)
        except TooManyPending:
            raise TooManyPendingConnections(provider.display_name) from None
        return elicitation

    async def decline(self, elicitation_id: str) -> None:
        """pending → failed: the link stops working and stops counting against the limit."""
        await self._transition(elicitation_id, PENDING, FAILED)

    async def fail(self, elicitation: PendingElicitation) -> None:
        """opened → failed. On a store failure the record expires on its own; the page already
        says the flow failed."""
        with contextlib.suppress(StoreUnavailable):
            await self._transition(elicitation.id, OPENED, FAILED)

    @contextlib.asynccontextmanager
    async def failing_closed(self, elicitation: PendingElicitation) -> AsyncIterator[None]:
        """Any error inside fails the flow (opened → failed) before it propagates; an unexpected
        one becomes `FlowFailed` (docs/threat-model.md, "8. Failure is closed")."""
        try:
            yield
        except Exception as exc:
            await self.fail(elicitation)
            if isinstance(exc, (DomainError, StoreUnavailable)):
                logger.warning("connect flow failed: %s", type(exc).__name__)
                raise
            logger.exception("connect flow: unexpected error")
            raise FlowFailed() from exc

    # ---- /connect ---------------------------------------------------------------------------------

    async def check_link(
        self, user: UserRef, elicitation_id: str
    ) -> tuple[PendingElicitation, ProviderConfig]:
        """The live elicitation behind a link and its provider, for its own user, still unused."""
        elicitation = await self._store().get_elicitation(elicitation_id)
        if elicitation is None:
            raise LinkUnknown()
        require_same_user(user, elicitation.user)
        provider = self._settings.providers.get(elicitation.provider)
        if provider is None:
            raise UnknownService()
        require_pending(elicitation)
        return elicitation, provider

    async def open(
        self, elicitation: PendingElicitation, provider: ProviderConfig, browser_binding: str
    ) -> str:
        """pending → opened for an OAuth provider: store a one-time state bound to this browser,
        then the URL of the provider's authorization endpoint (PKCE S256)."""
        store = self._store()
        now = self._clock()
        state = OAuthState(
            state=mint_opaque_id(),
            elicitation=elicitation,
            browser_binding=browser_binding,
            code_verifier=secrets.token_urlsafe(64),  # RFC 7636 §4.1: 43-128 chars of high entropy
            redirect_uri=self._settings.callback_url(provider.name),
            token_endpoint=provider.token_url,
            expected_issuer=provider.issuer,
            created_at=now,
            expires_at=min(now + self._settings.state_ttl, elicitation.expires_at),
        )
        # State first, then the transition: a store failure between the two leaves at most an
        # unusable state behind, never an OPENED elicitation with no way to finish it.
        await store.put_oauth_state(state)
        opened = await self._transition(elicitation.id, PENDING, OPENED)
        if opened is None:  # single use: another visit won the race
            await store.take_oauth_state(state.state)
        opened = require_first_open(opened)
        held = await store.get_connection(elicitation.user, provider.name)
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

    async def open_with_api_key(
        self, elicitation: PendingElicitation, provider: ProviderConfig, submitted: str
    ) -> Connection:
        """pending → opened → complete for an API-key provider: the key is checked at the
        provider first, then stored sealed like a token set."""
        if provider.kind != "api_key":
            raise NotAnApiKeyService()
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

    async def finish(self, state: OAuthState, received: CallbackParams) -> tuple[ProviderConfig, Connection]:
        """The callback after its state was consumed: every check before the code is redeemed,
        then the exchange, the account, and `complete`. Any failure fails the flow closed."""
        elicitation = state.elicitation
        async with self.failing_closed(elicitation):
            session_user = require_signed_in(received.session_user, WrongBrowser)
            require_same_browser(received.session_binding, state.browser_binding)
            require_same_user(session_user, elicitation.user, WrongBrowser)
            provider = require_redirect_uri_of_provider(
                received.path_provider, self._settings.providers.get(elicitation.provider)
            )
            check_rfc9207_issuer(received.iss, state.expected_issuer)
            if received.error is not None:
                raise ProviderDenied(provider.display_name, received.error, received.error_description)
            if not received.code:
                raise MissingCode()
            step = "token"
            try:
                tokens = await exchange_code(
                    provider,
                    token_endpoint=state.token_endpoint,
                    redirect_uri=state.redirect_uri,
                    scopes=elicitation.scopes,
                    code=received.code,
                    code_verifier=state.code_verifier,
                    timeout_seconds=self._settings.http_timeout,
                )
                step = "userinfo"
                profile = await fetch_userinfo(self._client(), provider, tokens.access_token)
            except (TokenExchangeError, ProviderApiError) as exc:
                logger.warning("callback: provider %s: %s", provider.name, exc)
                raise ProviderFailure(provider.display_name, step, str(exc)) from None
            return provider, await self.complete(elicitation, provider, tokens, profile)

    async def complete(
        self,
        elicitation: PendingElicitation,
        provider: ProviderConfig,
        tokens: TokenSet,
        profile: dict[str, Any],
    ) -> Connection:
        """opened → complete: name the account from the profile, keep a refresh token the
        provider did not resend, store the connection under the elicitation's user, complete the
        elicitation, publish the completion, audit."""
        account = field_at(profile, provider.account_field)
        if account is None or isinstance(account, (dict, list)):
            raise AccountNotNamed(provider.display_name)
        key = ConnectionKey(elicitation.user, provider.name, str(account))
        store = self._store()
        previous = await store.get_connection(key.user, key.provider, key.account)
        if (
            tokens.refresh_token is None
            and previous is not None
            and previous.tokens.refresh_token
            and previous.status is ConnectionStatus.OK
        ):
            # Google omits the refresh token on re-consent: the one we hold stays valid
            # (unless the provider already refused it).
            tokens = replace(tokens, refresh_token=previous.tokens.refresh_token)
        now = self._clock()
        connection = Connection(
            key=key,
            tokens=tokens,
            account_label=str(field_at(profile, provider.label_field) or account)[:128],
            connected_at=previous.connected_at if previous else now,
            updated_at=now,
        )
        await store.put_connection(connection)  # the token set first, then the completion
        completed = await self._transition(elicitation.id, OPENED, COMPLETE)
        if completed is not None and self._publish is not None:
            try:
                await self._publish(completed)
            except StoreUnavailable:
                # The token is stored: the client's retry finds it even without the notification.
                logger.warning("callback: completion not published (store unavailable)")
        audit("connect", key, scopes=" ".join(tokens.scopes))
        return connection

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise RuntimeError("this ConnectFlow was built without an HTTP client")
        return self._http
