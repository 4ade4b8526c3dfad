"""A stand-in's API: the routes a test gives it, its built-in surface, and its rate-limit knobs.

Each third-party mock (MockHub, MockGoogle, MockSlack, MockKeys) has one, as ``.api``: every
path under its prefix that is not one of its own OAuth endpoints reaches it, once the mock has
checked the token it issued (so expiry, refresh and revocation behave as the mock decides). A
request then meets, in this order: the rate-limit knobs, the test's routes (the newest first),
the built-in surface (GitHub's ``/user/repos``, Drive's ``files.list``, ...), and else the
provider's own "not found". The mock answers in its provider's shapes (subclasses).

The test's thread sets routes and knobs while the stand-in's server thread reads them: both go
through one lock.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import compile_path

from mock_providers.api.exchange import ApiAnswer, ApiRequest, Handler

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@dataclass
class ApiRoute:
    """``method`` and ``path`` (relative to the API base; ``{name}`` matches one path segment)
    answered by ``handler``; ``calls`` lists the requests it answered, in order."""

    method: str
    path: str
    handler: Handler
    calls: list[ApiRequest] = field(default_factory=list)
    _pattern: re.Pattern[str] = field(init=False, repr=False)
    _convertors: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.method = self.method.upper()
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r} is not one of {', '.join(METHODS)}")
        if not self.path.startswith("/"):
            raise ValueError(f"path {self.path!r} must start with '/' (it is relative to the API base)")
        # Starlette's own path syntax and matcher: `{owner}` is one segment, `{rest:path}` the rest.
        self._pattern, _, self._convertors = compile_path(self.path)

    def match(self, request: ApiRequest) -> dict[str, Any] | None:
        if request.method != self.method:
            return None
        found = self._pattern.match(request.path)
        if found is None:
            return None
        return {name: self._convertors[name].convert(value) for name, value in found.groupdict().items()}

    async def answer(self, request: ApiRequest) -> ApiAnswer:
        self.calls.append(request)
        result = self.handler(request)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, ApiAnswer) else ApiAnswer(result)


@dataclass(frozen=True)
class ApiCall:
    """One request the stand-in answered, and the status it answered with."""

    request: ApiRequest
    status: int


class StandInApi:
    """The API of one stand-in. ``route`` adds an answer, ``throttle`` refuses the next
    requests with 429; ``calls`` lists what was answered. Subclasses add a provider's built-in
    surface and its answer shapes."""

    #: The provider's name in messages ("GitHub").
    provider = "the stand-in"

    def __init__(self) -> None:
        #: The mock's own endpoints under its prefix (``/token``): never the API's (``reserve``).
        self.reserved: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._routes: list[ApiRoute] = []
        self._builtins = [ApiRoute(method, path, handler) for method, path, handler in self.builtin_routes()]
        self._throttled = 0
        self._retry_after: int | None = None
        self.calls: list[ApiCall] = []

    # -- what a test does ------------------------------------------------------------------------

    def route(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        handler: Handler | None = None,
    ) -> ApiRoute:
        """Answer ``method path`` with ``json``, ``status`` and ``headers``, or with what
        ``handler(request)`` returns. The newest route for a path wins, over the built-in one."""
        if handler is not None and (json is not None or status != 200 or headers):
            raise ValueError("give either a handler or a canned answer (json, status, headers), not both")
        if not 100 <= status <= 599:
            raise ValueError(f"status {status} is not an HTTP status")
        canned = ApiAnswer(json, status, dict(headers or {}))
        added = ApiRoute(method, path, handler if handler is not None else (lambda request: canned))
        if added.path in self.reserved:
            raise ValueError(f"{added.path} is served by the {self.provider} mock itself (OAuth or identity)")
        with self._lock:
            self._routes.insert(0, added)
        return added

    def unroute(self, route: ApiRoute) -> None:
        """Remove a route ``route()`` returned (the built-in answer, if any, is back)."""
        with self._lock:
            self._routes.remove(route)

    def throttle(self, times: int = 1, retry_after: int | None = 1) -> None:
        """The next ``times`` requests are refused with 429 Too Many Requests and, unless
        ``retry_after`` is ``None``, ``Retry-After: <seconds>`` (RFC 9110 section 10.2.3)."""
        if times < 0 or (retry_after is not None and retry_after < 0):
            raise ValueError("times and retry_after are not negative")
        with self._lock:
            self._throttled, self._retry_after = times, retry_after

    def reset(self) -> None:
        """Forget the test's routes, the knobs and ``calls``."""
        with self._lock:
            self._routes.clear()
            self._throttled, self._retry_after = 0, None
            self.calls.clear()

    # -- what the stand-in's server does ---------------------------------------------------------

    def reserve(self, paths: Iterable[str]) -> None:
        """The mock's own endpoints (under its prefix): ``route`` refuses them."""
        self.reserved = frozenset(paths)

    async def answer(self, request: ApiRequest) -> ApiAnswer:
        """The answer to an API request whose token the stand-in accepted."""
        refusal = self.refused(request)
        answer = refusal if refusal is not None else await self._routed(request)
        answer = self.finish(request, answer)
        self.calls.append(ApiCall(request, answer.status))
        return answer

    async def _routed(self, request: ApiRequest) -> ApiAnswer:
        with self._lock:
            candidates = [*self._routes, *self._builtins]
        for route in candidates:
            params = route.match(request)
            if params is not None:
                return await route.answer(request.with_path_params(params))
        return self.not_found(request)

    def refused(self, request: ApiRequest) -> ApiAnswer | None:
        """A rate-limit answer instead of the route's, while a knob says so."""
        with self._lock:
            if self._throttled <= 0:
                return None
            self._throttled -= 1
            retry_after = self._retry_after
        return self.too_many_requests(retry_after)

    # -- the provider's shapes (subclasses) ------------------------------------------------------

    def builtin_routes(self) -> Iterable[tuple[str, str, Handler]]:
        """The built-in surface: (method, path, handler)."""
        return ()

    def finish(self, request: ApiRequest, answer: ApiAnswer) -> ApiAnswer:
        """Headers every answer carries (GitHub's ``X-RateLimit-*``)."""
        return answer

    def too_many_requests(self, retry_after: int | None) -> ApiAnswer:
        return ApiAnswer({"error": "rate_limited"}, 429, retry_after_header(retry_after))

    def not_found(self, request: ApiRequest) -> ApiAnswer:
        return ApiAnswer({"error": "not_found"}, 404)

    def unauthorized(self, reason: str) -> ApiAnswer:
        """The answer to a missing, unknown, expired or revoked credential; ``reason`` is the
        mock's (an OAuth error code, or Slack's error string)."""
        return ApiAnswer({"error": reason}, 401)


def retry_after_header(seconds: int | None) -> dict[str, str]:
    return {} if seconds is None else {"Retry-After": str(seconds)}
