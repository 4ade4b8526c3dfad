"""Outbound HTTP for the whole process: one TLS context, one connection pool, one set of options.

Building a TLS context loads the CA bundle (tens of milliseconds); a client built per request pays
that on every token exchange. `Runtime` builds one `OutboundHttp` at start-up and closes it at
shutdown. Plain requests (userinfo, discovery, JWKS, provider APIs) use its pooled `client`.
authlib builds an OAuth client per call on its own HTTP library (httpx2) and closes it after;
`authlib_options` lends it a long-lived httpx2 connection pool (`transport=`), so a call builds no
TLS context and opens no new connection to a token endpoint it talked to seconds ago.

Both pools answer through `bounded`: a provider's answer is read streamed, at most
`max_response_bytes` of it, and the whole call (slot, connect, headers, body) ends by one
deadline, `timeout_seconds` after it started, however slowly the provider drips its bytes.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

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
# Userinfo and API answers: a profile or a page of results is a few kB, a large list a few hundred.
MAX_RESPONSE_BYTES = 1024 * 1024
# Token and revocation answers (authlib's pool): a token response is well under a kilobyte.
MAX_TOKEN_RESPONSE_BYTES = 64 * 1024
# A request's own byte limit, in place of its pool's (httpx passes `extensions` to the transport):
# a tool's API call reads up to its provider's `api_max_answer_bytes` or `api_max_stream_bytes`.
RESPONSE_BYTE_LIMIT = "mcpuc.response_byte_limit"

T = TypeVar("T")


class ResponseTooLarge(httpx.TransportError):
    """A provider's answer went past the byte limit (no more of it is read), or came compressed,
    so that its size could not be bounded."""


class AuthlibResponseTooLarge(httpx2.TransportError):
    """`ResponseTooLarge` for authlib's HTTP library (its callers catch httpx2's errors)."""


@dataclass(frozen=True)
class _Errors:
    """The exception types of one HTTP library (httpx or httpx2), raised by `bounded`."""

    too_large: type[Exception]
    timeout: type[Exception]


_HTTPX_ERRORS = _Errors(ResponseTooLarge, httpx.ReadTimeout)
_HTTPX2_ERRORS = _Errors(AuthlibResponseTooLarge, httpx2.ReadTimeout)


def call_deadline(extensions: dict[str, Any]) -> float | None:
    """When a call must be over: its timeout (the longest of connect, read, write and pool, which
    `http_timeout` sets alike) after it started, on anyio's clock; None without a timeout."""
    timeouts = [t for t in (extensions.get("timeout") or {}).values() if t is not None]
    return anyio.current_time() + max(timeouts) if timeouts else None


async def enforce_call_deadline(deadline: float | None, step: Awaitable[T], errors: _Errors) -> T:
    """One step of a call (sending it, or reading a piece of its body), given only the time left
    until the call's deadline: httpx's timeouts bound each read, so a provider dripping a byte a
    second would hold the call open indefinitely. RFC 9112 §9.5: "A client ... MAY close the
    transport connection at any time"."""
    if deadline is None:
        return await step
    # mutant: outbound.call_deadline
    with anyio.move_on_at(deadline):
        return await step
    raise errors.timeout("the provider did not finish answering within the timeout")


def enforce_response_byte_limit(received: int, limit: int, errors: _Errors) -> None:
    """A provider's answer is read up to `limit` bytes, never whole into memory first. RFC 9110
    §2.3: "A recipient SHOULD parse a received protocol element defensively, with only marginal
    expectations that the element will ... fit within a reasonably sized buffer"."""
    # mutant: outbound.response_byte_limit
    if received > limit:
        raise errors.too_large(f"the provider's answer is larger than {limit} bytes")


class _BoundedBody(httpx.AsyncByteStream, httpx2.AsyncByteStream):
    """A response body read within its call's deadline and byte limit."""

    def __init__(self, body: Any, deadline: float | None, limit: int, errors: _Errors) -> None:
        self._body, self._deadline, self._limit, self._errors = body, deadline, limit, errors

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self._body)
        received = 0
        while True:
            try:
                chunk = await enforce_call_deadline(self._deadline, anext(chunks), self._errors)
            except StopAsyncIteration:
                return
            received += len(chunk)
            enforce_response_byte_limit(received, self._limit, self._errors)
            yield chunk

    async def aclose(self) -> None:
        await self._body.aclose()


class _Exchange(Protocol):
    """What `bounded` needs of a request (httpx's or httpx2's)."""

    headers: Any
    extensions: dict[str, Any]


_R = TypeVar("_R", httpx.Response, httpx2.Response)


async def bounded(request: _Exchange, send: Awaitable[_R], limit: int, errors: _Errors) -> _R:
    """`send` (the pool's answer to `request`) within the call's deadline, its body streamed
    within the deadline and `limit` (or the request's own, `RESPONSE_BYTE_LIMIT`). Sent with
    `Accept-Encoding: identity` and refused when encoded anyway: the limit counts the bytes the
    caller gets, so a small compressed body cannot unpack into a large one. Done here by hand
    because neither httpx nor httpx2 has a whole-call timeout or a body size limit; at the
    transport, it covers every caller once."""
    deadline = call_deadline(request.extensions)
    limit = request.extensions.get(RESPONSE_BYTE_LIMIT, limit)
    response = await enforce_call_deadline(deadline, send, errors)
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        await response.aclose()
        raise errors.too_large("the provider's answer is content-encoded, which was not asked for")
    response.stream = _BoundedBody(response.stream, deadline, limit, errors)
    return response


def origin_of(url: httpx.URL | httpx2.URL) -> str:
    """scheme://host:port: what a slot is counted by (two services on one host are two peers)."""
    return f"{url.scheme}://{url.host}:{url.port or ''}"


class OriginSlots:
    """At most `limit` requests in flight to each origin (scheme, host, port). httpx limits a
    pool as a whole, so one peer that never answers would otherwise take every connection the
    process shares. A request waits for a slot as long as the pool timeout allows, then fails
    with `timeout_error`. The slot is held until the response's headers arrive (a body that
    hangs is the call deadline's job)."""

    def __init__(self, limit: int, timeout_error: type[Exception]) -> None:
        self._limit = limit
        self._timeout_error = timeout_error
        self._slots: dict[str, anyio.Semaphore] = {}  # one per configured origin: a small, fixed set

    @asynccontextmanager
    async def held(self, origin: str, extensions: dict[str, Any]) -> AsyncIterator[None]:
        slot = self._slots.setdefault(origin, anyio.Semaphore(self._limit))
        try:  # a free slot, the usual case, without arming a timer for the wait
            slot.acquire_nowait()
        except anyio.WouldBlock:
            wait = (extensions.get("timeout") or {}).get("pool")
            with anyio.move_on_after(wait) as waiting:
                await slot.acquire()
            if waiting.cancelled_caught:
                raise self._timeout_error(f"no free connection to {origin} within {wait} s") from None
        try:
            yield
        finally:
            slot.release()


class RetryIdempotentOnReset(httpx.AsyncBaseTransport):
    """Resend a GET or HEAD once when the connection was reset; anything else fails as it is."""

    def __init__(
        self,
        pool: httpx.AsyncBaseTransport,
        slots: OriginSlots | None = None,
        limit: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self._pool = pool
        self._slots = slots or OriginSlots(MAX_IN_FLIGHT_PER_ORIGIN, httpx.PoolTimeout)
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        return await bounded(request, self._send(request), self._limit, _HTTPX_ERRORS)

    async def _send(self, request: httpx.Request) -> httpx.Response:
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

    def __init__(
        self,
        pool: httpx2.AsyncBaseTransport,
        slots: OriginSlots,
        limit: int,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        self._pool = pool
        self._slots = slots
        self._limit = limit
        self._extensions = dict(extensions or {})

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        if self._extensions:
            request.extensions = {**request.extensions, **self._extensions}
        return await bounded(request, self._send(request), self._limit, _HTTPX2_ERRORS)

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
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
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_token_response_bytes: int = MAX_TOKEN_RESPONSE_BYTES,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self._max_token_response_bytes = max_token_response_bytes
        # certifi's CAs (or SSL_CERT_FILE), as httpx would choose on its own.
        self.tls = tls or httpx.create_ssl_context()
        pool = pool or httpx.AsyncHTTPTransport(
            verify=self.tls,
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS),
        )
        # No redirects: a provider or issuer must not bounce our requests, and tokens, elsewhere.
        self.client = httpx.AsyncClient(
            transport=RetryIdempotentOnReset(pool, limit=max_response_bytes),
            timeout=timeout_seconds,
            follow_redirects=False,
        )
        # authlib's clients are httpx2 clients: their own pool, same TLS context and limits. Not
        # wrapped in the retry: authlib only POSTs to token and revocation endpoints.
        self.authlib_pool = authlib_pool or httpx2.AsyncHTTPTransport(
            verify=self.tls,
            limits=httpx2.Limits(max_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS),
        )
        self._authlib_slots = OriginSlots(MAX_IN_FLIGHT_PER_ORIGIN, httpx2.PoolTimeout)

    def authlib_options(self, extensions: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """httpx2 options for an authlib client: the shared pool, timeout, no redirects; each
        request with `extensions` (a remote MCP server's peer checks)."""
        return {
            "transport": LentPool(
                self.authlib_pool, self._authlib_slots, self._max_token_response_bytes, extensions
            ),
            "timeout": self.timeout_seconds,
            "follow_redirects": False,
        }

    def lent_transport(
        self, max_response_bytes: int, extensions: Mapping[str, Any] | None = None
    ) -> httpx2.AsyncBaseTransport:
        """The httpx2 pool, as lent to authlib, for another short-lived client of the SDK's HTTP
        library (a remote MCP server's session: service/mcp/gateway/), its answers bounded by
        `max_response_bytes` and each call's deadline, each request with `extensions`."""
        return LentPool(self.authlib_pool, self._authlib_slots, max_response_bytes, extensions)

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.authlib_pool.aclose()
