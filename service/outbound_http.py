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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2

# Below the idle timeout of common peers (uvicorn 5 s, nginx 75 s, many load balancers 60 s): we
# drop an idle connection before the peer does, instead of writing into one it just closed.
KEEPALIVE_EXPIRY_SECONDS = 4.0
MAX_CONNECTIONS = 100
# Requests waiting on one origin at a time, per pool: a provider that hangs (or is slow on purpose)
# holds at most these connections, and the other providers and the sign-in keep the rest.
MAX_IN_FLIGHT_PER_ORIGIN = 20
# Safe to send twice (RFC 9110 §9.2.2). A token-endpoint POST is never resent: a code or a
# rotating refresh token is single-use, and a second try could burn it.
RETRIED_METHODS = frozenset({"GET", "HEAD"})
# The peer closed a kept-alive connection just as we reused it.
CONNECTION_RESET = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def origin_of(url: httpx.URL | httpx2.URL) -> str:
    """scheme://host:port: what a slot is counted by (two services on one host are two peers)."""
    return f"{url.scheme}://{url.host}:{url.port or ''}"


class OriginSlots:
    """At most `limit` requests in flight to each origin (scheme, host, port). httpx limits a
    pool as a whole, so one peer that never answers would otherwise take every connection the
    process shares. A request waits for a slot as long as the pool timeout allows, then fails
    with `timeout_error`. The slot is held until the response's headers arrive (a body that
    hangs is the read timeout's job)."""

    def __init__(self, limit: int, timeout_error: type[Exception]) -> None:
        self._limit = limit
        self._timeout_error = timeout_error
        self._slots: dict[str, anyio.Semaphore] = {}  # one per configured origin: a small, fixed set

    @asynccontextmanager
    async def held(self, origin: str, extensions: dict[str, Any]) -> AsyncIterator[None]:
        slot = self._slots.setdefault(origin, anyio.Semaphore(self._limit))
        wait = (extensions.get("timeout") or {}).get("pool")
        with anyio.move_on_after(wait) as waiting:
            await slot.acquire()
        if waiting.cancelled_caught:
            raise self._timeout_error(f"no free connection to {origin} within {wait} s")
        try:
            yield
        finally:
            slot.release()


class RetryIdempotentOnReset(httpx.AsyncBaseTransport):
    """Resend a GET or HEAD once when the connection was reset; anything else fails as it is."""

    def __init__(self, pool: httpx.AsyncBaseTransport, slots: OriginSlots | None = None) -> None:
        self._pool = pool
        self._slots = slots or OriginSlots(MAX_IN_FLIGHT_PER_ORIGIN, httpx.PoolTimeout)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async with self._slots.held(origin_of(request.url), request.extensions):
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

    def __init__(self, pool: httpx2.AsyncBaseTransport, slots: OriginSlots) -> None:
        self._pool = pool
        self._slots = slots

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        async with self._slots.held(origin_of(request.url), request.extensions):
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
        self._authlib_slots = OriginSlots(MAX_IN_FLIGHT_PER_ORIGIN, httpx2.PoolTimeout)

    def authlib_options(self) -> dict[str, Any]:
        """httpx2 options for an authlib client: the shared pool, timeout, no redirects."""
        return {
            "transport": LentPool(self.authlib_pool, self._authlib_slots),
            "timeout": self.timeout_seconds,
            "follow_redirects": False,
        }

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.authlib_pool.aclose()
