"""Outbound HTTP for the whole process: one TLS context, one connection pool, one set of options.

Building a TLS context loads the CA bundle (tens of milliseconds); a client built per request pays
that on every token exchange. `Runtime` builds one `OutboundHttp` at start-up and closes it at
shutdown. Plain requests (userinfo, discovery, JWKS, provider APIs) use its pooled `client`.
authlib builds an OAuth client per call on its own HTTP library (httpx2) and closes it after;
`authlib_options` lends it a long-lived httpx2 connection pool (`transport=`), so a call builds no
TLS context and opens no new connection to a token endpoint it talked to seconds ago.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import httpx2

# Below the idle timeout of common peers (uvicorn 5 s, nginx 75 s, many load balancers 60 s): we
# drop an idle connection before the peer does, instead of writing into one it just closed.
KEEPALIVE_EXPIRY_SECONDS = 4.0
MAX_CONNECTIONS = 100
# Safe to send twice (RFC 9110 §9.2.2). A token-endpoint POST is never resent: a code or a
# rotating refresh token is single-use, and a second try could burn it.
RETRIED_METHODS = frozenset({"GET", "HEAD"})
# The peer closed a kept-alive connection just as we reused it.
CONNECTION_RESET = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class RetryIdempotentOnReset(httpx.AsyncBaseTransport):
    """Resend a GET or HEAD once when the connection was reset; anything else fails as it is."""

    def __init__(self, pool: httpx.AsyncBaseTransport) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self._pool.handle_async_request(request)
        except CONNECTION_RESET:
            if request.method not in RETRIED_METHODS:
                raise
            return await self._pool.handle_async_request(request)

    async def aclose(self) -> None:
        await self._pool.aclose()


class LentPool(httpx2.AsyncBaseTransport):
    """The process's httpx2 pool as lent to one short-lived authlib client: the client closes its
    transport when it is done, which must not close the pool (`OutboundHttp.aclose` does)."""

    def __init__(self, pool: httpx2.AsyncBaseTransport) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self._pool.handle_async_request(request)

    async def aclose(self) -> None:
        return None


class OutboundHttp:
    """The process's outbound HTTP: `client` for plain requests, `authlib_options` for authlib."""

    def __init__(
        self,
        timeout_seconds: float,
        *,
        tls: ssl.SSLContext | None = None,
        pool: httpx.AsyncBaseTransport | None = None,
        authlib_pool: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        # certifi's CAs (or SSL_CERT_FILE), as httpx would choose on its own.
        self.tls = tls or httpx.create_ssl_context()
        pool = pool or httpx.AsyncHTTPTransport(
            verify=self.tls,
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS),
        )
        # No redirects: a provider or issuer must not bounce our requests, and tokens, elsewhere.
        self.client = httpx.AsyncClient(
            transport=RetryIdempotentOnReset(pool), timeout=timeout_seconds, follow_redirects=False
        )
        # authlib's clients are httpx2 clients: their own pool, same TLS context and limits. Not
        # wrapped in the retry: authlib only POSTs to token and revocation endpoints.
        self.authlib_pool = authlib_pool or httpx2.AsyncHTTPTransport(
            verify=self.tls,
            limits=httpx2.Limits(max_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS),
        )

    def authlib_options(self) -> dict[str, Any]:
        """httpx2 options for an authlib client: the shared pool, timeout, no redirects."""
        return {
            "transport": LentPool(self.authlib_pool),
            "timeout": self.timeout_seconds,
            "follow_redirects": False,
        }

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.authlib_pool.aclose()
