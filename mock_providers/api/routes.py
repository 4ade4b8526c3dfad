"""The HTTP side of a stand-in's API: one Starlette route for every other path under the mock's
prefix, which applies the mock's ``api_mode`` fault, checks the token the mock issued, and hands
the request to its :class:`~mock_providers.api.stand_in.StandInApi`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from mock_providers.api.exchange import ApiAnswer, ApiRequest, TokenOwner
from mock_providers.api.stand_in import METHODS, StandInApi

WELL_KNOWN = "/.well-known/"
# A credential never reaches a route's handler: `owner` says whose it is.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "x-api-key"})

#: The token's owner, or the mock's reason for refusing it (an OAuth or Slack error code).
Authenticate = Callable[[Request], Awaitable["TokenOwner | str"]]
#: The answer the mock's ``api_mode`` knob asks for instead of the API's, or ``None``.
Fault = Callable[[Request], Awaitable["Response | None"]]


def api_response(answer: ApiAnswer) -> Response:
    if answer.json is None:
        return Response(status_code=answer.status, headers=dict(answer.headers))
    return JSONResponse(answer.json, status_code=answer.status, headers=dict(answer.headers))


class ApiEndpoint:
    """``<prefix>/{path}``: the stand-in's API, listed after the mock's own routes (``own``),
    whose paths it keeps out of the API (``StandInApi.reserve``)."""

    def __init__(
        self,
        api: StandInApi,
        prefix: str,
        own: Sequence[BaseRoute],
        authenticate: Authenticate,
        fault: Fault,
    ) -> None:
        self.api = api
        self.prefix = prefix
        self.authenticate = authenticate
        self.fault = fault
        paths = [route.path for route in own if isinstance(route, Route)]
        api.reserve(path.removeprefix(prefix) for path in paths if path.startswith(prefix + "/"))

    def route(self) -> Route:
        return Route(self.prefix + "/{path:path}", self.handle, methods=list(METHODS))

    async def handle(self, request: Request) -> Response:
        path = request.url.path.removeprefix(self.prefix)
        if path in self.api.reserved:  # one of the mock's own endpoints, with another method
            return JSONResponse({"error": "method_not_allowed"}, status_code=405)
        if path.startswith(WELL_KNOWN):  # a metadata probe (RFC 8615) is no API call: no token asked
            return PlainTextResponse("Not Found", status_code=404)
        faulty = await self.fault(request)
        if faulty is not None:
            return faulty
        body = await request.body()  # first: Starlette then serves a form from it, too
        owner = await self.authenticate(request)
        if isinstance(owner, str):
            return api_response(self.api.unauthorized(owner))
        headers = {name: value for name, value in request.headers.items() if name not in CREDENTIAL_HEADERS}
        api_request = ApiRequest(
            method=request.method,
            path=path,
            url=str(request.url),
            owner=owner,
            query=dict(request.query_params),
            headers=headers,
            body=body,
        )
        return api_response(await self.api.answer(api_request))
