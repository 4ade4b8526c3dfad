"""The app's one pass over each HTTP request, before routing: one pure-ASGI callable, not a chain.

Each concern keeps its own module and function; this pass calls them in the order the threat
model relies on (docs/threat-model.md):

1. `require_single_valued_headers` (service/http/single_valued_headers.py): a repeated single-valued
   field gets 400 before anything reads a header, the request id included;
2. the request id (service/http/request_id.py), in the log context for the rest of the request;
3. the drain (service/http/drain.py): its 404 for a request naming a session while the sessions close,
   and the count of requests in flight that a stop waits for;
4. `require_bounded_request` (service/http/request_limits.py): head and body limits, before anything
   reads the body;
5. off the MCP endpoint only, the browser session (connect_routes/browser_session.py): MCP
   clients carry no cookie, so `/mcp` skips Starlette's cookie work;
6. around all of it, `client_gone_is_not_an_error` (service/http/client_gone.py): a client that
   disconnects before its body was read ends its request with an INFO line, not an ERROR.

The browser half of an embedding server (service/embedding/sdk.py `UrlConnect.browser_app`) runs
the same pass, without a drain: the host's server stops as it does.

Every response's start message is edited once: the request id, `Connection: close` while
draining, and the security headers (connect_routes/headers.py `add_security_headers`). The two
browser concerns come from the composition root (service/app.py), the one module of `service`
that brings in `connect_routes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.client_gone import client_gone_is_not_an_error
from service.http.drain import CONNECTION_CLOSE, Drain
from service.http.request_id import HEADER, request_id_of
from service.http.request_limits import require_bounded_request
from service.http.single_valued_headers import require_single_valued_headers
from service.observability.logs import request_context
from service.urls import is_mcp_path

_REQUEST_ID = HEADER.encode()  # as ASGI names headers

Field = tuple[bytes, bytes]


def _no_headers(headers: list[Field]) -> None:
    pass


def with_fields(headers: Iterable[Field], fields: list[Field]) -> list[Field]:
    """`headers` with `fields` set: any line of the same name replaced (names in lower case)."""
    names = {name for name, _ in fields}
    return [line for line in headers if line[0].lower() not in names] + fields


class RequestPass:
    """Installed outermost by service/app.py `create_app` (inside Starlette's error handler).

    `drain`: the replica's stop (None: the requests are not counted, and none is refused for it).
    `browser_session`: the middleware that carries the browser session, applied to every path
    but the MCP endpoint's (service/urls.py `is_mcp_path`). `security_headers`: adds the headers
    every response carries to a response's header lines.
    """

    def __init__(
        self,
        app: ASGIApp,
        drain: Drain | None = None,
        *,
        browser_session: Middleware | None = None,
        security_headers: Callable[[list[Field]], None] = _no_headers,
    ) -> None:
        self._app = app  # lifespan and anything else that is not HTTP
        # mutant: limits.installed unwrap
        self._mcp = require_bounded_request(app)
        if browser_session is None:
            self._browser = self._mcp
        else:
            cls, args, kwargs = browser_session
            # mutant: limits.installed unwrap
            self._browser = require_bounded_request(cls(app, *args, **kwargs))
        self.drain = drain
        self._security_headers = security_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        refusal = require_single_valued_headers(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        request_id = request_id_of(scope)
        echoed = (_REQUEST_ID, request_id.encode())
        drain, security_headers = self.drain, self._security_headers

        async def send_edited(message: Message) -> None:
            if message["type"] == "http.response.start":
                draining = drain is not None and drain.draining
                fields = [echoed, CONNECTION_CLOSE] if draining else [echoed]
                headers = message["headers"] = with_fields(message.get("headers", ()), fields)
                security_headers(headers)
            await send(message)

        app = self._mcp if is_mcp_path(scope["path"]) else self._browser
        with request_context(request_id):
            refusal = None if drain is None else drain.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send_edited)
                return
            # mutant: requests.client_gone_not_an_error
            with client_gone_is_not_an_error(scope):
                if drain is None:
                    await app(scope, receive, send_edited)
                else:
                    await drain.serve(app, scope, receive, send_edited)
