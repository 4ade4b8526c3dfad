"""The domain's errors: one vocabulary, two renderings.

Code that refuses or fails raises one of these; it never builds a wire answer itself. Exactly one
mapper turns them into MCP errors (`service/mcp_errors.py`) and exactly one into HTML pages
(`connect_routes/error_pages.py`), so a refusal reads the same wherever it is raised.
"""

from __future__ import annotations

from typing import ClassVar

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, InputRequiredResult

from service.lifecycle import NeedsReauthorization
from token_store import StoreUnavailable, TooManyPending

__all__ = [
    "AccountNotNamed",
    "BrowserRefusal",
    "ConnectionNeeded",
    "DomainError",
    "FlowFailed",
    "InvalidAccountChoice",
    "InvalidRequestState",
    "InvalidToolArgument",
    "IssuerMismatch",
    "LinkAlreadyUsed",
    "LinkUnknown",
    "LoginFailed",
    "LoginIssuerMismatch",
    "LoginUnavailable",
    "MalformedLink",
    "MalformedParameter",
    "MissingCode",
    "MixUp",
    "NeedsReauthorization",
    "NotAnApiKeyService",
    "NotAuthenticated",
    "NotSignedIn",
    "NotYourLink",
    "ProviderDenied",
    "ProviderFailure",
    "SessionExpired",
    "SignInFirst",
    "SignInUnknown",
    "StaleConnectForm",
    "StaleForm",
    "StoreUnavailable",
    "TooManyPending",
    "TooManyPendingConnections",
    "UnknownProvider",
    "UnknownService",
    "WrongBrowser",
]


class DomainError(Exception):
    """Base of the errors this package raises on purpose."""


# ---- the MCP surface ------------------------------------------------------------------------------


class ConnectionNeeded(DomainError):
    """Raised by `broker.require`; `outcome` is what the tool answers instead of its result
    (built for the request's protocol revision by the broker)."""

    def __init__(self, outcome: CallToolResult | InputRequiredResult | MCPError) -> None:
        super().__init__("connection needed")
        self.outcome = outcome


class InvalidToolArgument(DomainError):
    """A tool argument (or the requestState standing in for one) the server refuses."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownProvider(InvalidToolArgument):
    pass


class InvalidRequestState(InvalidToolArgument):
    pass


class InvalidAccountChoice(InvalidToolArgument):
    """A form answer to "which account?" that is not one of the options the server offered."""


class TooManyPendingConnections(DomainError):
    """The per-user limit on live elicitations (`max_pending_per_user`) is reached."""

    def __init__(self, provider: str) -> None:
        super().__init__(provider)
        self.provider = provider  # display name


class NotAuthenticated(DomainError):
    """No verified MCP access token names the caller."""


class ProviderFailure(DomainError):
    """A provider's API answered something unusable. Carries only non-secret detail: the
    provider's display name, the step, and a message naming the HTTP status or the provider's
    error code. (`ProviderApiError` and `TokenExchangeError`, raised by the provider modules,
    are mapped alike: see `PROVIDER_ERRORS` in service/mcp_errors.py.)"""

    def __init__(self, provider: str, step: str, message: str) -> None:
        super().__init__(message)
        self.provider = provider
        self.step = step  # "token", "userinfo", "api"


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


class MalformedLink(BrowserRefusal):
    title, text, status_code = "Invalid link", "This connect link is malformed.", 400


class MalformedParameter(BrowserRefusal):
    title, text, status_code = "Invalid request", "The state parameter is missing or malformed.", 400


class NotSignedIn(BrowserRefusal):
    title, text, status_code = "Not signed in", "Open the link from your MCP client again.", 401


class SignInFirst(NotSignedIn):
    text = "Sign in first."


class SessionExpired(NotSignedIn):
    """The browser session is past its absolute lifetime; it counts as signed out."""


class StaleForm(BrowserRefusal):
    title, text, status_code = "Not allowed", "The form was stale. Reload the page and try again.", 403


class StaleConnectForm(StaleForm):
    text = "The form was stale. Open the link again."


class CrossSiteRequest(StaleForm):
    text = "The form was sent from another site. Open this page here and try again."


class AccountSwitchUnconfirmed(BrowserRefusal):
    """A sign-in would replace the browser's signed-in user with another without the user's own
    confirmation (signing out here first)."""

    title, text, status_code = (
        "Signed in as another account",
        "This browser is signed in here as another account. Sign out first to switch.",
        409,
    )


class BlankClientName(DomainError):
    """A client name with no visible letter (blank, invisible or format characters only)."""


class LinkUnknown(BrowserRefusal):
    title, text, status_code = (
        "Link expired",
        "This link is unknown or has expired. Ask again from your MCP client.",
        404,
    )


class NotYourLink(BrowserRefusal):
    title, text, status_code = (
        "Not your link",
        "This link was created for another account. Sign in as the account that asked, "
        "or ask again from your own MCP client.",
        403,
    )


class UnknownService(BrowserRefusal):
    title, text, status_code = "Unknown service", "This server no longer offers that service.", 404


class LinkAlreadyUsed(BrowserRefusal):
    title, text, status_code = (
        "Link already used",
        "This link was already used. Ask again from your MCP client.",
        409,
    )


class NotAnApiKeyService(BrowserRefusal):
    title, text, status_code = "Invalid request", "This service does not use API keys.", 400


class SignInUnknown(BrowserRefusal):
    title, text, status_code = "Link expired", "This sign-in is unknown, expired or already finished.", 400


class WrongBrowser(BrowserRefusal):
    title, text, status_code = (
        "Not allowed",
        "Finish the sign-in in the browser where you started it.",
        403,
    )


class MixUp(BrowserRefusal):
    title, text, status_code = "Sign-in refused", "The response arrived for another service.", 400


class IssuerMismatch(BrowserRefusal):
    title, text, status_code = (
        "Sign-in refused",
        "The response did not come from the expected service.",
        400,
    )


class MissingCode(BrowserRefusal):
    title, text, status_code = "Invalid request", "The response carries no authorization code.", 400


class AccountNotNamed(BrowserRefusal):
    title, status_code = "Connection failed", 502

    def __init__(self, provider: str) -> None:
        super().__init__(f"{provider} did not name the account.")


class AccountIdTooLong(BrowserRefusal):
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
    title, text, status_code = "Sign-in failed", "The sign-in did not complete. Start again.", 400


class LoginIssuerMismatch(LoginFailed):
    text = "The identity provider answered for another issuer."


class LoginUnavailable(BrowserRefusal):
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
