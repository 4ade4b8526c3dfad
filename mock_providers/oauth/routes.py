"""The HTTP handlers MockHub and MockGoogle share (token endpoint, revocation, API authentication),
and the route of a machine endpoint, which every mock server's browser-based clients call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import ResourceProtector
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mock_providers.api.exchange import TokenOwner
from mock_providers.api.routes import ApiEndpoint
from mock_providers.faults import MANGLING_MODES, check_mode, fault_label, fault_response, mangle
from mock_providers.oauth.server import MockProvider
from mock_providers.oauth.starlette_adapter import StarletteOAuth2Request, read_oauth2_request
from mock_providers.pages import Pages
from mock_providers.records import record_fault, record_token_request

# Metadata, JWKS, registration, token and userinfo carry no cookies, so any origin may read them
# (browser-based MCP clients call them directly); pages and the admin endpoints get no CORS.
_ANY_ORIGIN = Middleware(
    CORSMiddleware,
    allow_origins=["*"],
    allow_methods=["GET", "POST"],
    allow_headers=["Authorization", "Content-Type", "MCP-Protocol-Version"],
    max_age=600,
)


def machine_route(
    path: str, endpoint: Callable[[Request], Awaitable[Response]], methods: Sequence[str]
) -> Route:
    """A route any origin may call: CORS preflights answered, responses readable cross-origin."""
    # OPTIONS passes the route's method check to reach CORSMiddleware, which answers the preflight.
    return Route(path, endpoint, methods=[*methods, "OPTIONS"], middleware=[_ANY_ORIGIN])


class ProviderRoutes:
    """Handlers over one provider's authlib server; ``protector`` checks its API's bearer tokens."""

    def __init__(
        self, provider: MockProvider, protector: ResourceProtector, pages: Pages, origin: str
    ) -> None:
        self.provider = provider
        self.protector = protector
        self.pages = pages
        self.origin = origin

    async def oauth2_request(self, request: Request) -> StarletteOAuth2Request:
        return await read_oauth2_request(request, self.origin)

    async def token(self, request: Request) -> Response:
        oauth_request = await self._read(request)
        if isinstance(oauth_request, Response):
            return oauth_request
        mode = check_mode(self.provider.token_endpoint_mode)
        if mode != "ok" and mode not in MANGLING_MODES:
            # Recorded first: a hanging request is usually cancelled and never returns.
            self.provider.token_requests.append(record_fault(oauth_request, fault_label(mode)))
            faulty = await fault_response(
                mode,
                request,
                hang_seconds=self.provider.hang_seconds,
                huge_body_bytes=self.provider.huge_body_bytes,
            )
            if faulty is not None:
                return faulty
        response: Response = self.provider.server.create_token_response(oauth_request)
        self.provider.token_requests.append(record_token_request(oauth_request, response))
        return mangle(mode, response, drip_seconds=self.provider.drip_seconds)

    async def revoke(self, request: Request) -> Response:
        oauth_request = await self._read(request)
        if isinstance(oauth_request, Response):
            return oauth_request
        response: Response = self.provider.server.create_endpoint_response("revocation", oauth_request)
        return response

    async def _read(self, request: Request) -> StarletteOAuth2Request | Response:
        """The request as authlib's, or authlib's error response when it cannot be read."""
        try:
            return await self.oauth2_request(request)
        except OAuth2Error as error:
            response: Response = self.provider.server.handle_error_response(None, error)
            return response

    async def api_fault(self, request: Request) -> Response | None:
        """The answer the provider's ``api_mode`` asks for instead of its API's, or ``None``."""
        provider = self.provider
        return await fault_response(
            provider.api_mode,
            request,
            hang_seconds=provider.hang_seconds,
            huge_body_bytes=provider.huge_body_bytes,
        )

    async def api_token(self, request: Request) -> Any:
        """The access token record of an API request, or the :class:`Response` to send instead:
        the fault ``api_mode`` asks for, or the RFC 6750 error for a missing or bad token."""
        faulty = await self.api_fault(request)
        if faulty is not None:
            return faulty
        try:
            oauth_request = await self.oauth2_request(request)
            return self.protector.validate_request(None, oauth_request)
        except OAuth2Error as error:
            return self.provider.server.handle_error_response(None, error)

    def api_endpoint(
        self, prefix: str, own: Sequence[BaseRoute], owner_of: Callable[[Any], TokenOwner]
    ) -> Route:
        """Every other path under ``prefix`` than the ``own`` routes': the provider's API
        stand-in (``provider.api``), behind the same token check as its own API (``protector``);
        ``owner_of`` names the owner of an accepted token record."""

        async def authenticate(request: Request) -> TokenOwner | str:
            try:
                token = self.protector.validate_request(None, await self.oauth2_request(request))
            except OAuth2Error as error:
                return str(error.error)
            return owner_of(token)

        return ApiEndpoint(self.provider.api, prefix, own, authenticate, self.api_fault).route()
