"""`mcpuc.providers`: the mock providers' knobs, named for what a test wants to happen.

Each method sets a public knob or reads a public counter of MockHub (docs/mock-providers.md); the
one thing MockHub has no knob for, a slow API, is an ASGI wrapper here (`SlowApi`).
"""

from __future__ import annotations

from typing import Any

import anyio

from mock_providers.faults import EndpointMode

# MockHub paths that are OAuth endpoints, not its API: `slow_api` leaves them alone.
OAUTH_PATHS = ("/mockhub/authorize", "/mockhub/token", "/mockhub/revoke", "/.well-known/")


class SlowApi:
    """Pure ASGI wrapper that delays MockHub API requests by `delay` seconds."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.delay = 0.0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if self.delay and path.startswith("/mockhub/") and not path.startswith(OAUTH_PATHS):
            await anyio.sleep(self.delay)
        await self.app(scope, receive, send)


class ProviderKnobs:
    """MockHub as the tests steer it. `hub` is the MockHub instance itself, for any knob not
    wrapped here (docs/mock-providers.md lists them all)."""

    def __init__(self, hub: Any, slow: SlowApi) -> None:
        self.hub = hub
        self._slow = slow

    # -- token lifecycle -----------------------------------------------------------------------

    def expire_access_tokens(self) -> None:
        """Every access token issued so far is expired: the next API call gets a 401 and the server
        refreshes (refresh tokens stay valid)."""
        self.hub.expire_access_tokens()

    def expire_refresh_tokens(self) -> None:
        """Every refresh token issued so far is expired: refreshing answers invalid_grant."""
        self.hub.expire_refresh_tokens()

    def revoke(self, login: str) -> int:
        """As if the provider account `login` revoked the app; how many access tokens that revoked."""
        return int(self.hub.revoke_grant(login))

    def rotate_refresh_tokens(self, rotate: bool = True) -> None:
        """Whether each refresh returns a new refresh token and retires the old one (default)."""
        self.hub.rotate_refresh_tokens = rotate

    # -- failures ------------------------------------------------------------------------------

    def fail_token_endpoint(self, mode: EndpointMode, hang_seconds: float | None = None) -> None:
        """The token endpoint answers "500", "junk" (200 with HTML), "hang" (until the client gives
        up, at most `hang_seconds`), or "ok" again."""
        self.hub.token_endpoint_mode = mode
        if hang_seconds is not None:
            self.hub.hang_seconds = hang_seconds

    def fail_api(self, mode: EndpointMode) -> None:
        """The API (/mockhub/user) answers "500", "junk", "hang", or "ok" again."""
        self.hub.api_mode = mode

    def slow_api(self, seconds: float) -> None:
        """Every API request waits `seconds` before it is answered (0: no delay)."""
        self._slow.delay = seconds

    # -- counters ------------------------------------------------------------------------------

    @property
    def refreshes(self) -> int:
        """Token requests with grant_type=refresh_token so far."""
        return int(self.hub.refresh_requests)

    @property
    def revocations(self) -> int:
        """Tokens revoked so far (access and refresh tokens, by the app at /revoke or by `revoke`)."""
        return len(self.hub.revoked_tokens)

    @property
    def issued_tokens(self) -> set[str]:
        """Every access and refresh token MockHub issued (to scan for leaks)."""
        return set(self.hub.issued_access_tokens) | set(self.hub.issued_refresh_tokens)

    def reset_counters(self) -> None:
        self.hub.reset_counters()
