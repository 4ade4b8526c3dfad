"""The HTTP under one pooled session to a remote MCP server: the user's token, to that server only.

The SDK's streamable HTTP client runs over an httpx2 client built here:
- `UserToken` (an httpx2 `Auth`) puts the user's current access token on every request and keeps
  the last Bearer challenge the server answered with (a 401 or a 403 `insufficient_scope`), which
  the gateway acts on after the call;
- `DownstreamTransport` sends only to the server's own origin (`require_downstream_origin`), over
  the process's shared pool with each answer bounded in bytes and by the call's deadline
  (service/providers/outbound_http.py), and opens no standing GET stream: a pooled session per
  user must not hold a connection open per user (the tool list is read again instead).
"""

from __future__ import annotations

from collections.abc import Generator

import httpx2

from service.providers.addresses import downstream_peer_checks
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import OutboundHttp
from service.providers.protected_resource import Challenge, bearer_challenge
from service.urls import origin


class DownstreamOriginRefused(httpx2.TransportError):
    """A request to another origin than the remote MCP server's: never sent."""


def require_downstream_origin(url: str, downstream: str) -> None:
    """The user's token goes to the server it was issued for, nowhere else: the MCP spec
    (2025-11-25 basic/authorization, "Token Handling"; security best practices, "Token
    Passthrough") and RFC 8707 §2 bind it to that resource. A redirect or a URL the server names
    cannot carry it to another host."""
    # mutant: gateway.downstream_origin
    if origin(url) != origin(downstream):
        raise DownstreamOriginRefused("refusing to send a request to another origin than the MCP server")


class UserToken(httpx2.Auth):
    """`Authorization: Bearer <the user's current access token>` on each request (RFC 6750 §2.1),
    and the challenge of the last 401 or 403 answered (RFC 6750 §3)."""

    def __init__(self, access_token: str) -> None:
        self.access_token = access_token
        self.challenge: Challenge | None = None

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.access_token}"
        response = yield request
        if response.status_code in (401, 403):
            self.challenge = bearer_challenge(response.status_code, response.headers.get("www-authenticate"))

    def take_challenge(self) -> Challenge | None:
        challenge, self.challenge = self.challenge, None
        return challenge


class DownstreamTransport(httpx2.AsyncBaseTransport):
    """The shared pool, for one remote MCP server's origin only, without a standing GET stream."""

    def __init__(self, pool: httpx2.AsyncBaseTransport, downstream_url: str) -> None:
        self._pool = pool
        self._url = downstream_url

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        require_downstream_origin(str(request.url), self._url)
        if request.method == "GET":
            # MCP 2025-11-25 basic/transports: a server without a GET stream answers 405; the SDK
            # then lives without one. Answered here, so no connection is held per user.
            return httpx2.Response(405, request=request)
        return await self._pool.handle_async_request(request)

    async def aclose(self) -> None:
        await self._pool.aclose()


def downstream_http(provider: ProviderConfig, outbound: OutboundHttp, token: UserToken) -> httpx2.AsyncClient:
    """The httpx2 client of one pooled session to `provider`: every request ends by the call's
    deadline (`call_timeout_seconds`) and reads at most `max_result_bytes`, and every connection
    it opens reaches a public address unless `allow_private_network` (`require_public_peer`)."""
    pool = outbound.lent_transport(provider.max_result_bytes, downstream_peer_checks(provider))
    return httpx2.AsyncClient(
        transport=DownstreamTransport(pool, provider.url),
        auth=token,
        timeout=httpx2.Timeout(provider.call_timeout_seconds),
        follow_redirects=False,
    )
