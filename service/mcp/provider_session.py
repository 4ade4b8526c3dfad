"""What a tool holds while it calls a provider's API for the caller.

    @server.tool()
    @uses(broker.session, "github", scopes=("read:user",))
    async def github_profile(ctx: Context, api: ProviderSession) -> dict:
        return await api.get_json("/user")

`uses` finds (or elicits) the caller's connection before the tool body runs and passes it in as
`api` (hidden from the tool's input schema). Requests carry the user's token only to the
provider's own API, refresh once on a 401, wait out rate limits that end before the call's
deadline, read answers up to the provider's size caps, and leave an audit line per use. Every
failure is a `ProviderApiError`, which the tool's boundary (`@connected`, or the FastMCP
middleware) answers as a tool error the model reads (service/mcp/errors.py). docs/tools.md,
"Calling the provider's API", is the tool author's view.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import httpx

from service.errors import NeedsReauthorization, ProviderApiError
from service.flow.lifecycle import TokenLifecycle
from service.mcp.account_choice import with_notice
from service.mcp.errors import PROVIDER_ERRORS, connected, provider_tool_error
from service.observability.audit import audit
from service.observability.metrics import Metrics
from service.providers.api import answer_error, auth_headers, did_not_answer, read_json, too_large
from service.providers.catalogue import ProviderConfig
from service.providers.outbound_http import RESPONSE_BYTE_LIMIT, ResponseTooLarge
from service.providers.pagination import (
    DEFAULT_ITEMS,
    items_of,
    next_page,
    refused_in_body,
    require_next_page_on_same_origin,
)
from service.providers.rate_limits import is_rate_limited, retry_after_seconds
from service.urls import origin
from token_store import Connection

# A call that keeps hitting the limit (a clock behind the provider's, a provider that moves its
# reset) gives up after this many waits, within the deadline or not.
MAX_RATE_LIMIT_WAITS = 3
DEFAULT_MAX_PAGES = 10
DEFAULT_MAX_ITEMS = 1000


class Waits(Protocol):
    """The clock rate-limit waits run on: wall-clock seconds (a provider's reset time and
    `Retry-After` dates are epoch seconds), and a sleep. Tests give one that only moves time."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemWaits:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


@dataclass(frozen=True)
class ProviderCalls:
    """What every `ProviderSession` of a process shares: the pooled outbound client, the metrics,
    how long one tool call may spend at a provider (`tool_call_budget_seconds`), and its clock."""

    http: httpx.AsyncClient
    metrics: Metrics
    budget_seconds: float = 25.0
    waits: Waits = field(default_factory=SystemWaits)


class ProviderSession:
    def __init__(
        self,
        connection: Connection,
        provider: ProviderConfig,
        lifecycle: TokenLifecycle,
        calls: ProviderCalls,
        *,
        tool: str,
    ) -> None:
        self._connection = connection
        self.provider = provider
        self._lifecycle = lifecycle
        self._calls = calls
        self._tool = tool
        # The call's deadline: rate-limit waits must end before it.
        self.deadline = calls.waits.now() + calls.budget_seconds
        # Set by the broker when it picked one of several accounts without asking: the tool's
        # result says which (service/mcp/account_choice.py).
        self.notice: str | None = None

    @property
    def account(self) -> str:
        return self._connection.key.account

    @property
    def account_label(self) -> str:
        return self._connection.account_label

    # ---- what a tool calls ----------------------------------------------------------------------

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """The provider's answer to `method url`, whatever its status, its body read (up to
        `api_max_answer_bytes`). `url` is a path under the provider's API base, or one of its own
        URLs; `kwargs` are httpx's (`params`, `headers`, `json`, `content`, `timeout`)."""
        return await self._answer(method, self._own_url(url), kwargs, self.provider.api_max_answer_bytes)

    async def request_json(self, method: str, url: str, **kwargs: Any) -> Any:
        """The JSON body of a 2xx answer (None when empty), else a `ProviderApiError` naming what
        the provider said: its status, when to retry, its own short message."""
        response = await self.request(method, url, **kwargs)
        return read_json(
            self.provider,
            response,
            limit=self.provider.api_max_answer_bytes,
            secrets=self._secrets(),
            now=self._calls.waits.now(),
        )

    async def get_json(self, url: str, **kwargs: Any) -> Any:
        return await self.request_json("GET", url, **kwargs)

    async def post_json(self, url: str, json: Any, **kwargs: Any) -> Any:
        return await self.request_json("POST", url, json=json, **kwargs)

    def pages(
        self,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        items: str | None = None,
        max_pages: int = DEFAULT_MAX_PAGES,
        max_items: int = DEFAULT_MAX_ITEMS,
        **kwargs: Any,
    ) -> Pages:
        """Every item of `GET url`, page after page by the provider's `pagination` convention,
        at most `max_pages` pages and `max_items` items. `items` names the field holding a page's
        list (None: the page is the list, or the convention's own field)."""
        if max_pages < 1 or max_items < 1:
            raise ValueError("max_pages and max_items must be at least 1")
        return Pages(self, url, dict(params or {}), items, max_pages, max_items, kwargs)

    @asynccontextmanager
    async def stream(
        self, method: str, url: str, *, max_bytes: int | None = None, **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        """A 2xx answer whose body the tool reads in pieces (`response.aiter_bytes()`), up to
        `max_bytes` (default: the provider's `api_max_stream_bytes`); any other answer is a
        `ProviderApiError`, as for `get_json`."""
        limit = max_bytes or self.provider.api_max_stream_bytes
        response = await self._answer(method, self._own_url(url), kwargs, limit, stream=True)
        try:
            if not 200 <= response.status_code < 300:
                await response.aread()
                raise answer_error(self.provider, response, self._secrets(), self._calls.waits.now())
            yield response
        except ResponseTooLarge:
            raise too_large(self.provider, limit, response.status_code) from None
        except httpx.HTTPError as exc:
            raise did_not_answer(self.provider, exc) from None
        finally:
            await response.aclose()

    # ---- how ------------------------------------------------------------------------------------

    async def _answer(
        self, method: str, target: str, options: dict[str, Any], limit: int, *, stream: bool = False
    ) -> httpx.Response:
        """Send until there is an answer to give: after one refresh on a 401, and after each rate
        limit the provider says ends before the deadline."""
        refreshed = False
        waited = 0
        while True:
            response = await self._send(method, target, options, limit, stream=stream)
            if response.status_code == 401:
                await response.aclose()
                if refreshed:
                    # A token just issued is refused too: the grant is dead (RFC 6750 §3.1).
                    await self._lifecycle.refused(self._connection)
                    raise self._grant_gone()
                refreshed = True
                await self._refresh()
                continue
            if not is_rate_limited(response):
                return response
            now = self._calls.waits.now()
            wait = retry_after_seconds(response, now)
            if wait is None or waited == MAX_RATE_LIMIT_WAITS or now + wait > self.deadline:
                self._calls.metrics.rate_limited.labels(provider=self.provider.name, outcome="refused").inc()
                return response
            self._calls.metrics.rate_limited.labels(provider=self.provider.name, outcome="waited").inc()
            await response.aclose()
            waited += 1
            await self._calls.waits.sleep(wait)

    async def _refresh(self) -> None:
        """The token was refused: refresh once (single-flight). A grant that cannot be refreshed
        ends the call with an error asking for a new connection; the lifecycle has marked it, so
        the next call asks the user to connect (the revision's connect answer)."""
        try:
            self._connection = await self._lifecycle.fresh(self._connection, self.provider, force=True)
        except NeedsReauthorization:
            raise self._grant_gone() from None

    def _grant_gone(self) -> ProviderApiError:
        return ProviderApiError(
            f"{self.provider.display_name} no longer accepts this user's connection (its access was "
            "revoked, or it expired and cannot be renewed)",
            provider=self.provider.name,
            status=401,
            reconnect=True,
        )

    async def _send(
        self, method: str, url: str, options: dict[str, Any], limit: int, *, stream: bool
    ) -> httpx.Response:
        tokens = self._connection.tokens
        headers = {**(options.get("headers") or {}), **auth_headers(self.provider, tokens.access_token)}
        extensions = {**(options.get("extensions") or {}), RESPONSE_BYTE_LIMIT: limit}
        rest = {k: v for k, v in options.items() if k not in ("headers", "extensions")}
        audit("token.use", self._connection.key, tool=self._tool)
        http = self._calls.http
        try:
            request = http.build_request(method, url, headers=headers, extensions=extensions, **rest)
            response = await http.send(request, stream=True)
        except ResponseTooLarge:  # refused before its body: an encoded answer (outbound_http.bounded)
            raise ProviderApiError(
                f"{self.provider.display_name} answered compressed, which this server did not ask for",
                provider=self.provider.name,
            ) from None
        except httpx.HTTPError as exc:
            raise did_not_answer(self.provider, exc) from None
        if stream:
            return response
        try:
            await response.aread()
        except ResponseTooLarge:
            raise too_large(self.provider, limit, response.status_code) from None
        except httpx.HTTPError as exc:
            raise did_not_answer(self.provider, exc) from None
        finally:
            await response.aclose()
        return response

    def _secrets(self) -> tuple[str, ...]:
        tokens = self._connection.tokens
        return tuple(s for s in (tokens.access_token, tokens.refresh_token) if s)

    def _own_url(self, url: str) -> str:
        # docs/threat-model.md, "6. Tokens encrypted at rest, ...": a token goes only to the
        # provider that issued it.
        if url.startswith("/"):
            base = self.provider.api_base_url or origin(self.provider.userinfo_url)
            return base.rstrip("/") + url
        allowed = {origin(self.provider.api_base_url), origin(self.provider.userinfo_url)} - {""}
        # mutant: provider_session.own_url
        if origin(url) not in allowed:
            raise ProviderApiError(
                f"refusing to send a {self.provider.display_name} token to another host",
                provider=self.provider.name,
            )
        return url


class Pages:
    """`ProviderSession.pages`: an async iterator of the items; `truncated` is true once a bound
    stopped it while the provider had more, `pages_read` counts the requests made."""

    def __init__(
        self,
        session: ProviderSession,
        url: str,
        params: dict[str, Any],
        items: str | None,
        max_pages: int,
        max_items: int,
        options: dict[str, Any],
    ) -> None:
        self.truncated = False
        self.pages_read = 0
        self._walk = self._items(session, url, params, items, max_pages, max_items, options)

    def __aiter__(self) -> Pages:
        return self

    async def __anext__(self) -> Any:
        return await anext(self._walk)

    async def _items(
        self,
        session: ProviderSession,
        url: str,
        params: dict[str, Any],
        field_name: str | None,
        max_pages: int,
        max_items: int,
        options: dict[str, Any],
    ) -> AsyncIterator[Any]:
        provider = session.provider
        style = provider.pagination
        field_name = field_name if field_name is not None else DEFAULT_ITEMS.get(style)
        target = session._own_url(url)
        limit = provider.api_max_answer_bytes
        given = 0
        while True:
            # A next-page URL is checked by `require_next_page_on_same_origin` below, against the
            # page that named it, which was checked the same way back to `_own_url`.
            # No `params` at all when there are none: httpx would replace the URL's own query.
            response = await session._answer(
                "GET", target, {**options, "params": params} if params else options, limit
            )
            self.pages_read += 1
            body = read_json(
                provider,
                response,
                limit=limit,
                secrets=session._secrets(),
                now=session._calls.waits.now(),
            )
            code = refused_in_body(style, body)
            if code is not None:
                raise ProviderApiError(
                    f"{provider.display_name} answered an error: {code}", provider=provider.name, status=200
                )
            found = items_of(body, field_name, provider.display_name)
            following = next_page(style, response, body)
            for item in found:
                if given == max_items:  # an item left unread
                    self.truncated = True
                    return
                given += 1
                yield item
            if following is None:
                return
            if self.pages_read == max_pages or given == max_items:
                self.truncated = True
                return
            if following.url is not None:
                # The provider's own URL for the next page carries its query: nothing added.
                target = require_next_page_on_same_origin(following.url, response.url, provider.display_name)
                params = {}
            else:
                params = {**params, **following.params}


SessionFactory = Callable[..., Awaitable[ProviderSession]]


def uses(
    session_for: SessionFactory, provider: str | None = None, scopes: Sequence[str] = ()
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Declare what a tool needs in one line. `session_for` is `broker.session`; with no
    `provider`, the tool's own `provider` argument names it. The tool must take `ctx: Context`
    and `api: ProviderSession`; `api` is hidden from its input schema."""

    def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        # Evaluated annotations: the SDK reads this signature to build the tool's schemas.
        signature = inspect.signature(fn, eval_str=True)
        visible = [p for name, p in signature.parameters.items() if name != "api"]

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs)
            bound.apply_defaults()
            name = provider or bound.arguments.get("provider")
            api = await session_for(
                bound.arguments["ctx"],
                str(name),
                scopes,
                account=bound.arguments.get("account"),
                tool=fn.__name__,
            )
            try:
                result = await fn(*args, api=api, **kwargs)
            except PROVIDER_ERRORS as exc:
                return provider_tool_error(exc, api.provider.name)
            return with_notice(result, api.notice)

        wrapper.__signature__ = signature.replace(parameters=visible)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {
            p.name: p.annotation for p in visible if p.annotation is not inspect.Parameter.empty
        } | {"return": signature.return_annotation}
        return connected(wrapper)

    return decorate
