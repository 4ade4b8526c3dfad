"""The Starlette app serving the dev AS (at the root), MockHub (under /mockhub), MockKeys (under
/mockkeys) and, when configured, MockGoogle (under /mockgoogle) and MockSlack (under /mockslack)."""

from __future__ import annotations

import ipaddress
import json

from authlib.common.security import is_secure_transport
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from connect_routes.static import static_routes

from .config import MockProvidersConfig
from .dev_as import DevAuthorizationServer
from .dev_as_routes import SESSION_COOKIE, DevAuthorizationRoutes
from .dev_keys import ensure_dev_keys
from .faults import check_mode
from .mockgoogle import MockGoogle
from .mockgoogle_routes import MockGoogleRoutes
from .mockhub import MockHub
from .mockhub_routes import MockHubRoutes
from .mockkeys import MockKeys
from .mockkeys_routes import MockKeysRoutes
from .mockslack import MockSlack
from .mockslack_routes import MockSlackRoutes
from .pages import Pages


def create_mock_providers_app(config: MockProvidersConfig) -> Starlette:
    """Build the app; creates or reuses ``<data_dir>/dev-as.json``.

    ``app.state.dev_as`` is the :class:`~mock_providers.dev_as.DevAuthorizationServer`
    (clients, codes, refresh tokens), ``app.state.mockhub`` the
    :class:`~mock_providers.mockhub.MockHub` (knobs and counters),
    ``app.state.mockgoogle`` / ``app.state.mockslack`` the
    :class:`~mock_providers.mockgoogle.MockGoogle` /
    :class:`~mock_providers.mockslack.MockSlack` (``None`` when their client is
    not configured), ``app.state.mockkeys`` the
    :class:`~mock_providers.mockkeys.MockKeys` API-key service (always served),
    ``app.state.config`` the config.

    ``base_url`` must be https or loopback http (``localhost``, ``127.0.0.1``,
    ``[::1]``): authlib refuses OAuth over other plain-http origins unless
    ``AUTHLIB_INSECURE_TRANSPORT`` is set in the environment.
    """
    if not is_secure_transport(config.issuer + "/"):
        raise ValueError(
            f"base_url {config.base_url!r} is neither https nor loopback http; "
            "set AUTHLIB_INSECURE_TRANSPORT=1 to run the mock providers there anyway"
        )
    keys = ensure_dev_keys(config.data_dir, issuer=config.issuer, audience=config.mcp_resource)
    pages = Pages()
    dev_as = DevAuthorizationServer(config, keys)
    hub = MockHub(
        config.mockhub_issuer,
        config.mockhub_client,
        access_token_ttl=config.mockhub_access_token_ttl,
    )
    keys_service = MockKeys()
    routes = [
        *DevAuthorizationRoutes(dev_as, pages).routes(),
        *MockHubRoutes(hub, pages, config.issuer).routes(),
        *MockKeysRoutes(keys_service).routes(),
        *static_routes(),  # the shared stylesheet and icon of connect_routes/static
    ]
    google = None
    if config.mockgoogle_client is not None:
        google = MockGoogle(config.mockgoogle_issuer, config.mockgoogle_client)
        routes += MockGoogleRoutes(google, pages, config.issuer).routes()
    slack = None
    if config.mockslack_client is not None:
        slack = MockSlack(config.mockslack_url, config.mockslack_client)
        routes += MockSlackRoutes(slack, pages, config.issuer).routes()
    routes.append(Route(ADMIN_PATH, MockHubAdmin(hub).set_knobs, methods=["POST"]))
    middleware = [
        Middleware(
            SessionMiddleware,
            secret_key=keys.session_secret,
            session_cookie=SESSION_COOKIE,
            same_site="lax",
            https_only=config.issuer.startswith("https://"),
        )
    ]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.config = config
    app.state.dev_as = dev_as
    app.state.mockhub = hub
    app.state.mockgoogle = google
    app.state.mockslack = slack
    app.state.mockkeys = keys_service
    return app


ADMIN_PATH = "/_admin/mockhub"


def is_loopback_peer(request: Request) -> bool:
    """The request comes from this machine (its TCP peer is a loopback address)."""
    if request.client is None:
        return False
    try:
        return ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:  # not an IP address (e.g. httpx.ASGITransport's "testclient")
        return False


class MockHubAdmin:
    """``POST /_admin/mockhub`` with a JSON object of MockHub failure knobs
    (``token_endpoint_mode``, ``api_mode``, ``hang_seconds``; docs/mock-providers.md): how a
    separate process (scripts/drill.py) steers the ``mock-providers`` command. It answers only
    on loopback (404 otherwise), like everything else here, development only."""

    KNOBS = ("token_endpoint_mode", "api_mode", "hang_seconds")

    def __init__(self, hub: MockHub) -> None:
        self.hub = hub

    async def set_knobs(self, request: Request) -> Response:
        if not is_loopback_peer(request):
            return JSONResponse({"error": "not_found"}, status_code=404)
        try:
            knobs = json.loads(await request.body())
            if not isinstance(knobs, dict) or not set(knobs) <= set(self.KNOBS):
                raise ValueError(f"send a JSON object with some of {', '.join(self.KNOBS)}")
            for name in ("token_endpoint_mode", "api_mode"):
                if name in knobs:
                    setattr(self.hub, name, check_mode(knobs[name]))
            if "hang_seconds" in knobs:
                self.hub.hang_seconds = float(knobs["hang_seconds"])
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": "invalid_request", "error_description": str(exc)}, status_code=400)
        return JSONResponse({name: getattr(self.hub, name) for name in self.KNOBS})
