"""What a tool holds while it calls a provider's API for the caller.

    @server.tool()
    @uses(broker.session, "github", scopes=("read:user",))
    async def github_profile(ctx: Context, api: ProviderSession) -> dict:
        return await api.get_json("/user")

`uses` finds (or elicits) the caller's connection before the tool body runs and passes it in as
`api` (hidden from the tool's input schema). Requests carry the user's token only to the
provider's own API, refresh once on a 401, and leave an audit line per use.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

from service.errors import NeedsReauthorization, ProviderApiError
from service.flow.lifecycle import TokenLifecycle
from service.mcp.account_choice import with_notice
from service.mcp.errors import connected
from service.observability.audit import audit
from service.providers.api import auth_headers, did_not_answer, read_json
from service.providers.catalogue import ProviderConfig
from service.urls import origin
from token_store import Connection

Reconnect = Callable[[], Awaitable[Connection]]


class ProviderSession:
    def __init__(
        self,
        connection: Connection,
        provider: ProviderConfig,
        lifecycle: TokenLifecycle,
        http: httpx.AsyncClient,
        *,
        tool: str,
        reconnect: Reconnect,
    ) -> None:
        self._connection = connection
        self.provider = provider
        self._lifecycle = lifecycle
        self._http = http
        self._tool = tool
        self._reconnect = reconnect
        # Set by the broker when it picked one of several accounts without asking: the tool's
        # result says which (service/mcp/account_choice.py).
        self.notice: str | None = None

    @property
    def account(self) -> str:
        return self._connection.key.account

    @property
    def account_label(self) -> str:
        return self._connection.account_label

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """`url` is a path under the provider's API base, or one of its own URLs."""
        target = self._own_url(url)
        response = await self._send(method, target, **kwargs)
        if response.status_code == 401:
            try:  # the token was refused: refresh once (single-flight), then retry once
                self._connection = await self._lifecycle.fresh(self._connection, self.provider, force=True)
            except NeedsReauthorization:
                self._connection = await self._reconnect()  # elicits: raises ConnectionNeeded
            response = await self._send(method, target, **kwargs)
        return response

    async def get_json(self, url: str, **kwargs: Any) -> Any:
        return read_json(self.provider, await self.request("GET", url, **kwargs))

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        tokens = self._connection.tokens
        headers = {**(kwargs.pop("headers", None) or {}), **auth_headers(self.provider, tokens.access_token)}
        audit("token.use", self._connection.key, tool=self._tool)
        try:
            return await self._http.request(method, url, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise did_not_answer(self.provider, exc) from None

    def _own_url(self, url: str) -> str:
        # docs/threat-model.md, "6. Tokens encrypted at rest, ...": a token goes only to the
        # provider that issued it.
        if url.startswith("/"):
            base = self.provider.api_base_url or origin(self.provider.userinfo_url)
            return base.rstrip("/") + url
        allowed = {origin(self.provider.api_base_url), origin(self.provider.userinfo_url)} - {""}
        # mutant: provider_session.own_url
        if origin(url) not in allowed:
            raise ProviderApiError(f"refusing to send a {self.provider.display_name} token to another host")
        return url


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
            result = await fn(*args, api=api, **kwargs)
            return with_notice(result, api.notice)

        wrapper.__signature__ = signature.replace(parameters=visible)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {
            p.name: p.annotation for p in visible if p.annotation is not inspect.Parameter.empty
        } | {"return": signature.return_annotation}
        return connected(wrapper)

    return decorate
