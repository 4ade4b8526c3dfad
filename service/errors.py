"""The domain's errors: one vocabulary, two renderings.

Code that refuses or fails raises one of these; it never builds a wire answer itself. Exactly one
mapper turns them into MCP errors (`service/mcp/errors.py`) and exactly one into HTML pages
(`connect_routes/error_pages.py`), so a refusal reads the same wherever it is raised. Each class is
named after what failed, in the words of the clause its docstring cites.

This module imports nothing of ours and nothing of the MCP SDK, so any module may raise these
without pulling in another (the flow core stays free of the SDK: pyproject.toml's import-linter
contracts). The one MCP-shaped exception, `ConnectionNeeded` (it carries the answer a tool gives
instead of its result), lives with that answer in `service/mcp/errors.py`.
Two vocabularies live elsewhere, by design: the token store's (`StoreUnavailable`,
`TooManyPending`, `DecryptError` in `token_store`, which must not depend on `service`), and the
start-up refusals (`SettingsError`, `ToolPackageError`, `ProviderError`, `TracingConfigError`,
`SdkHookMissing`), raised beside the configuration each checks, before any request is served and
never mapped to an answer: the process stops with their one line.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AccountIdTooLong",
    "AccountNotNamed",
    "AccountSwitchUnconfirmed",
    "AdminRequestRefused",
    "AuthorizationResponseIssuerMismatch",
    "AuthorizationServerMoved",
    "BlankClientName",
    "BrowserRefusal",
    "CallbackEndedBefore",
    "ConnectCsrfTokenMismatch",
    "ConnectionsPageNotSignedIn",
    "CrossSiteRequest",
    "CsrfTokenMismatch",
    "DomainError",
    "DownstreamDiscoveryError",
    "ElicitationAlreadyUsed",
    "ElicitationUserMismatch",
    "FlowFailed",
    "InvalidAccountChoice",
    "InvalidApiKey",
    "InvalidRequest",
    "InvalidRequestState",
    "InvalidState",
    "InvalidToolArgument",
    "LoginFailed",
    "LoginIssuerMismatch",
    "LoginUnavailable",
    "MalformedElicitationId",
    "MetadataError",
    "MetadataIssuerMismatch",
    "MissingCode",
    "MixUp",
    "NeedsReauthorization",
    "NewAccountWanted",
    "NoAccountChosen",
    "NotAnApiKeyProvider",
    "NotAuthenticated",
    "NotSignedIn",
    "ProviderApiError",
    "ProviderDenied",
    "ProviderFailure",
    "ProviderNoLongerConfigured",
    "SessionCapReached",
    "SessionExpired",
    "TokenExchangeError",
    "TooManyPendingElicitations",
    "UnknownElicitation",
    "UnknownProvider",
    "UnknownTransition",
    "WrongBrowser",
]


class DomainError(Exception):
    """Base of the errors this package raises on purpose."""


# ---- the MCP surface ------------------------------------------------------------------------------


class InvalidToolArgument(DomainError):
    """A tool argument (or the requestState standing in for one) the server refuses: JSON-RPC 2.0
    §5.1 -32602 "Invalid params"."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownProvider(InvalidToolArgument):
    """A provider name that no configured provider has (a tool's, or an operator's command's)."""


class InvalidRequestState(InvalidToolArgument):
    """A requestState that is not this server's, not for this tool, or already used
    (2026-07-28/patterns-mrtr.mdx "Security Considerations")."""


class InvalidAccountChoice(InvalidToolArgument):
    """A form answer to "which account?" that is not one of the options the server offered
    (2025-11-25/client-elicitation.mdx "Form Mode Security": validate received data)."""


class TooManyPendingElicitations(DomainError):
    """The per-user limit on live elicitations (`max_pending_per_user`) is reached."""

    def __init__(self, provider: str) -> None:
        super().__init__(provider)
        self.provider = provider  # display name


class NotAuthenticated(DomainError):
    """No verified MCP access token names the caller (RFC 6750 §3.1: no authentication)."""


class SessionCapReached(Exception):
    """No room for another MCP session: raised inside the SDK's admission, answered 429 by
    `SessionLimits` with this message (RFC 6585 §4); `limit` names the cap."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class NewAccountWanted(Exception):
    """The user chose "connect another account" in the form elicitation: start the URL-mode flow
    for a new one."""


class NoAccountChosen(Exception):
    """The user declined or cancelled the form elicitation asking which account
    (2025-11-25/client-elicitation.mdx "Response Actions": decline, cancel)."""


# ---- provider calls -------------------------------------------------------------------------------


class ProviderFailure(DomainError):
    """A provider's API answered something unusable. Carries only non-secret detail: the
    provider's display name, the step, and a message naming the HTTP status or the provider's
    error code; optionally what the model can do about it: the provider's HTTP `status`, the
    seconds after which to try again (`retry_after`), and whether the user must connect again
    (`reconnect`). (`ProviderApiError` and `TokenExchangeError`, raised by the provider modules,
    are mapped alike: see `PROVIDER_ERRORS` in service/mcp/errors.py.)"""

    def __init__(
        self,
        provider: str,
        step: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        reconnect: bool = False,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.step = step  # "token", "userinfo", "api"
        self.status = status
        self.retry_after = retry_after
        self.reconnect = reconnect


class TokenExchangeError(Exception):
    """A token-endpoint call failed (RFC 6749 §5.2); the message is safe to show (no code,
    verifier or secret). `error` is the OAuth error code when the provider sent one (e.g.
    invalid_grant)."""

    def __init__(self, message: str, error: str | None = None) -> None:
        super().__init__(message)
        self.error = error


class ProviderApiError(Exception):
    """The provider's API failed; the message is safe to show (no token, no response body beyond
    the provider's own short error message, sanitized). `provider` is the provider's configured
    name; `status` its HTTP status, if it answered; `retry_after` the seconds it asked us to wait
    (RFC 9110 §10.2.3, RFC 6585 §4); `reconnect`: the grant is gone and only a new connection
    will do (RFC 6750 §3.1 invalid_token, RFC 6749 §5.2 invalid_grant)."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        retry_after: float | None = None,
        reconnect: bool = False,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retry_after = retry_after
        self.reconnect = reconnect


class NeedsReauthorization(Exception):
    """The grant is gone: disconnected, no refresh token, or the provider refused it (RFC 6749
    §5.2 invalid_grant); the user connects again."""


class MetadataError(ValueError):
    """No usable authorization-server metadata document (RFC 8414 §3.2); the message is safe to
    log (no response body)."""


class MetadataIssuerMismatch(MetadataError):
    """The metadata document names another issuer (RFC 8414 §3.3: "MUST NOT be used"): never
    tried elsewhere, never used."""


class DownstreamDiscoveryError(MetadataError):
    """A remote MCP server (`kind = "mcp"`) could not be made a provider: its challenge, its
    protected-resource or authorization-server metadata, an address it names, or this server's
    registration as its client was refused (docs/gateway.md). The message names the step."""


# ---- the browser surface --------------------------------------------------------------------------


class BrowserRefusal(DomainError):
    """A refusal of a browser route: the page's title, text and status belong to the class;
    `text` may be replaced where a page words it for its own context."""

    title: ClassVar[str]
    text: str
    status_code: ClassVar[int]

    def __init__(self, text: str | None = None) -> None:
        if text is not None:
            self.text = text
        super().__init__(self.text)


class MalformedElicitationId(BrowserRefusal):
    """An `elicitationId` not of the shape we mint (RFC 6819 §5.1.4.2.2)."""

    title, text, status_code = "Invalid link", "This connect link is malformed.", 400


class InvalidRequest(BrowserRefusal):
    """A missing, malformed or oversized parameter (RFC 6749 §4.1.2.1 invalid_request)."""

    title, text, status_code = "Invalid request", "The state parameter is missing or malformed.", 400


class NotSignedIn(BrowserRefusal):
    """No signed-in browser user where one is required (2025-11-25/client-elicitation.mdx
    "Phishing": verify the user who opens the URL)."""

    title, text, status_code = "Not signed in", "Open the link from your MCP client again.", 401


class ConnectionsPageNotSignedIn(NotSignedIn):
    """`NotSignedIn` on the connections page, which no MCP client link leads to."""

    text = "Sign in first."


class SessionExpired(NotSignedIn):
    """The browser session is past its absolute lifetime; it counts as signed out (OWASP Session
    Management Cheat Sheet, "Absolute Timeout")."""


class CsrfTokenMismatch(BrowserRefusal):
    """A state-changing POST without this session's synchronizer token (OWASP CSRF Prevention
    Cheat Sheet, "Synchronizer Token Pattern"; RFC 9700 §4.7)."""

    title, text, status_code = "Not allowed", "The form was stale. Reload the page and try again.", 403


class ConnectCsrfTokenMismatch(CsrfTokenMismatch):
    """`CsrfTokenMismatch` on a POST of the connect pages, whose form comes from a link."""

    text = "The form was stale. Open the link again."


class CrossSiteRequest(CsrfTokenMismatch):
    """A state-changing POST whose `Origin` names another origin (OWASP CSRF Prevention Cheat
    Sheet, "Verifying Origin With Standard Headers"); refused like a missing CSRF token."""

    text = "The form was sent from another site. Open this page here and try again."


class AccountSwitchUnconfirmed(BrowserRefusal):
    """A sign-in would replace the browser's signed-in user with another without the user's own
    confirmation (login CSRF: RFC 6749 §10.12)."""

    title, text, status_code = (
        "Signed in as another account",
        "This browser is signed in here as another account. Sign out first to switch.",
        409,
    )


class BlankClientName(DomainError):
    """A client name with no visible letter: blank, invisible or format characters only
    (UTS #39 §3.1; RFC 7591 §5)."""


class UnknownElicitation(BrowserRefusal):
    """An `elicitationId` that names no live elicitation: unknown, or past its TTL."""

    title, text, status_code = (
        "Link expired",
        "This link is unknown or has expired. Ask again from your MCP client.",
        404,
    )


class ElicitationUserMismatch(BrowserRefusal):
    """The browser's user is not the user the elicitation was created for
    (2025-11-25/client-elicitation.mdx "Phishing": "MUST verify that the user who opens the URL is
    the same user who initiated the elicitation request")."""

    title, text, status_code = (
        "Not your link",
        "This link was created for another account. Sign in as the account that asked, "
        "or ask again from your own MCP client.",
        403,
    )


class ProviderNoLongerConfigured(BrowserRefusal):
    """The elicitation names a provider this server's configuration no longer has."""

    title, text, status_code = "Unknown service", "This server no longer offers that service.", 404


class ElicitationAlreadyUsed(BrowserRefusal):
    """An elicitation that is no longer `pending`: a connect link is good for one flow
    (2026-07-28/security-best-practices.mdx "State Handle Hijacking")."""

    title, text, status_code = (
        "Link already used",
        "This link was already used. Ask again from your MCP client.",
        409,
    )


class NotAnApiKeyProvider(BrowserRefusal):
    """An API key submitted for a provider that connects with OAuth."""

    title, text, status_code = "Invalid request", "This service does not use API keys.", 400


class InvalidState(BrowserRefusal):
    """An OAuth `state` that is unknown, expired or already consumed (RFC 6749 §10.12; RFC 6819
    §5.3.5: one callback per state)."""

    title, text, status_code = "Link expired", "This sign-in is unknown, expired or already finished.", 400


class CallbackEndedBefore(BrowserRefusal):
    """The same callback again (a reload, the router's retry) after the first one ended without a
    connection: its outcome again, never a second attempt (RFC 6749 §10.5: a code is used once)."""

    title, text, status_code = "Not connected", "This sign-in already ended without a connection.", 400


class WrongBrowser(BrowserRefusal):
    """The callback arrived in another browser than the one that started the flow (RFC 9700 §4.7:
    the state is bound to the user agent)."""

    title, text, status_code = (
        "Not allowed",
        "Finish the sign-in in the browser where you started it.",
        403,
    )


class MixUp(BrowserRefusal):
    """The authorization response arrived on another provider's redirect URI (RFC 9700 §4.4
    mix-up: "a distinct redirect URI for each issuer")."""

    title, text, status_code = "Sign-in refused", "The response arrived for another service.", 400


class AuthorizationResponseIssuerMismatch(BrowserRefusal):
    """The authorization response's `iss` is not the provider's issuer (RFC 9207 §2.4)."""

    title, text, status_code = (
        "Sign-in refused",
        "The response did not come from the expected service.",
        400,
    )


class AuthorizationServerMoved(BrowserRefusal):
    """The service moved to another authorization server while the user was signing in at the
    one it had (a remote MCP server, docs/gateway.md): the code is not redeemed."""

    title, text, status_code = (
        "Sign-in refused",
        "This service moved to another sign-in server while you were signing in. Ask again from "
        "your MCP client.",
        409,
    )


class MissingCode(BrowserRefusal):
    """An authorization response with neither `code` nor `error` (RFC 6749 §4.1.2)."""

    title, text, status_code = "Invalid request", "The response carries no authorization code.", 400


class AccountNotNamed(BrowserRefusal):
    """The provider's user endpoint named no account id (RFC 9110 §2.3: parse defensively)."""

    title, status_code = "Connection failed", 502

    def __init__(self, provider: str) -> None:
        super().__init__(f"{provider} did not name the account.")


class AccountIdTooLong(BrowserRefusal):
    """The provider's account id is longer than a connection's key holds."""

    title, status_code = "Connection failed", 502

    def __init__(self, provider: str, limit: int) -> None:
        super().__init__(f"{provider} named the account with an id longer than {limit} characters.")


class FlowFailed(BrowserRefusal):
    """Anything unexpected after the OAuth state was consumed: the flow failed closed."""

    title, text, status_code = (
        "Connection failed",
        "Something went wrong. Ask again from your MCP client.",
        502,
    )


class LoginFailed(BrowserRefusal):
    """The browser sign-in at the MCP authorization server was refused: an error response, or a
    state or code its client rejected (RFC 6749 §4.1.2.1, §5.2)."""

    title, text, status_code = "Sign-in failed", "The sign-in did not complete. Start again.", 400


class LoginIssuerMismatch(LoginFailed):
    """The sign-in named a user of another issuer than the MCP access tokens'
    (2025-11-25/client-elicitation.mdx "Phishing": compare the authorization server's subject)."""

    text = "The identity provider answered for another issuer."


class LoginUnavailable(BrowserRefusal):
    """The MCP authorization server did not answer the sign-in."""

    title, text, status_code = (
        "Sign-in unavailable",
        "The sign-in service did not answer. Try again.",
        503,
    )


class ProviderDenied(DomainError):
    """The provider sent the browser back with an OAuth `error` (RFC 6749 §4.1.2.1); shown
    on its own page, with the provider's text truncated and escaped."""

    def __init__(self, provider: str, error: str, description: str) -> None:
        super().__init__(error)
        self.provider = provider
        self.error = error[:64]
        self.description = description[:256]


# ---- the connect flow and the admin API ------------------------------------------------------------


class UnknownTransition(RuntimeError):
    """A status change the status machine does not have (`token_store.Transition`): a programming
    error, never a user's doing."""


class InvalidApiKey(DomainError):
    """The submitted key was refused; the API-key page is shown again with `text`."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class AdminRequestRefused(Exception):
    """An admin API request refused with an OAuth error code (RFC 6750 §3.1: `invalid_token`,
    `insufficient_scope`, `invalid_request`) or one of the API's own; rendered by service/ops/admin_api.py."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status, self.error, self.description = status, error, description
