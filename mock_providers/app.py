"""The Starlette app serving the dev AS (at the root), MockHub (under /mockhub), MockKeys (under
/mockkeys) and, when configured, MockGoogle (under /mockgoogle) and MockSlack (under /mockslack)."""

from __future__ import annotations

from authlib.common.security import is_secure_transport
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware

from connect_routes.static import static_routes
from mock_providers.admin import AdminRoutes, admin_path
from mock_providers.api.stand_in import StandInApi
from mock_providers.config import MockProvidersConfig
from mock_providers.dev_as.keys import ensure_dev_keys
from mock_providers.dev_as.routes import SESSION_COOKIE, DevAuthorizationRoutes
from mock_providers.dev_as.server import DevAuthorizationServer
from mock_providers.pages import Pages
from mock_providers.providers.mockgoogle.routes import MockGoogleRoutes
from mock_providers.providers.mockgoogle.server import MockGoogle
from mock_providers.providers.mockhub.routes import MockHubRoutes
from mock_providers.providers.mockhub.server import MockHub
from mock_providers.providers.mockkeys.routes import MockKeysRoutes
from mock_providers.providers.mockkeys.server import MockKeys
from mock_providers.providers.mockslack.routes import MockSlackRoutes
from mock_providers.providers.mockslack.server import MockSlack
from mock_providers.store import MockStore

#: MockHub's admin endpoint (scripts/drill.py); every provider has one: ``admin_path(name)``.
ADMIN_PATH = admin_path("mockhub")


def create_mock_providers_app(config: MockProvidersConfig) -> Starlette:
    """Build the app; creates or reuses ``<data_dir>/dev-as.json`` and, with
    ``config.persist_state`` (the default), the providers' durable state in
    ``<data_dir>/mock-providers.sqlite3`` (:mod:`mock_providers.store`).

    ``app.state.dev_as`` is the :class:`~mock_providers.dev_as.server.DevAuthorizationServer`
    (clients, codes, refresh tokens), ``app.state.mockhub`` the
    :class:`~mock_providers.providers.mockhub.server.MockHub` (knobs and counters),
    ``app.state.mockgoogle`` / ``app.state.mockslack`` the
    :class:`~mock_providers.providers.mockgoogle.server.MockGoogle` /
    :class:`~mock_providers.providers.mockslack.server.MockSlack` (``None`` when their client is
    not configured), ``app.state.mockkeys`` the
    :class:`~mock_providers.providers.mockkeys.server.MockKeys` API-key service (always served),
    ``app.state.mock_store`` the :class:`~mock_providers.store.MockStore`,
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
    store = MockStore.for_data_dir(config.data_dir, persist=config.persist_state)
    pages = Pages()
    dev_as = DevAuthorizationServer(config, keys, store)
    hub = MockHub(
        config.mockhub_issuer,
        config.mockhub_client,
        access_token_ttl=config.mockhub_access_token_ttl,
        store=store,
    )
    keys_service = MockKeys(store)
    routes = [
        *DevAuthorizationRoutes(dev_as, pages).routes(),
        *MockHubRoutes(hub, pages, config.issuer).routes(),
        *MockKeysRoutes(keys_service).routes(),
        *static_routes(),  # the shared stylesheet and icon of connect_routes/static
    ]
    google = None
    if config.mockgoogle_client is not None:
        google = MockGoogle(config.mockgoogle_issuer, config.mockgoogle_client, store=store)
        routes += MockGoogleRoutes(google, pages, config.issuer).routes()
    slack = None
    if config.mockslack_client is not None:
        slack = MockSlack(config.mockslack_url, config.mockslack_client, store=store)
        routes += MockSlackRoutes(slack, pages, config.issuer).routes()
    admin = {"mockhub": hub, "mockgoogle": google, "mockslack": slack, "mockkeys": keys_service}
    routes += AdminRoutes(admin).routes()
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
    app.state.mock_store = store
    #: Each served mock's API stand-in, by the URL its API is under (`stand_in_for`).
    app.state.stand_ins = {
        url: provider.api
        for url, provider in (
            (config.mockhub_issuer, hub),
            (config.mockgoogle_issuer, google),
            (config.mockslack_url, slack),
            (config.mockkeys_url, keys_service),
        )
        if provider is not None
    }
    return app


def stand_in_for(app: Starlette, api_base_url: str) -> StandInApi | None:
    """The API stand-in that serves ``api_base_url`` (a provider's ``api_base_url``), if any."""
    stand_ins: dict[str, StandInApi] = app.state.stand_ins
    for url, api in stand_ins.items():
        if api_base_url.rstrip("/") == url or api_base_url.startswith(url + "/"):
            return api
    return None
