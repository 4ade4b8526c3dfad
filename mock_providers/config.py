"""Configuration objects for the development OAuth servers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ClientSpec:
    """A client pre-registered at one of the mock servers.

    ``client_secret=None`` registers a public client (token endpoint auth method
    ``none``); otherwise the client is confidential and may authenticate with
    ``client_secret_basic`` or ``client_secret_post``.
    """

    client_id: str
    client_secret: str | None
    redirect_uris: tuple[str, ...]


@dataclass
class MockProvidersConfig:
    """Settings for :func:`mock_providers.create_mock_providers_app`.

    ``base_url`` is the origin the app is served on and, without a trailing
    slash, the issuer of the development authorization server. MockHub's
    issuer is ``base_url + "/mockhub"``.

    ``persist_state``: keep codes, tokens and registered clients in
    ``<data_dir>/mock-providers.sqlite3`` so a restart on the same data dir keeps connections
    working (``False``: in memory, forgotten with the app).

    ``mockgoogle_client`` / ``mockslack_client``: the client MockGoogle
    (issuer ``base_url + "/mockgoogle"``) / MockSlack (under ``/mockslack``)
    know; when ``None`` (the default) that provider is not served at all.
    """

    base_url: str
    data_dir: Path
    mcp_resource: str
    login_client: ClientSpec
    mockhub_client: ClientSpec
    mockhub_access_token_ttl: int = 28800
    mockgoogle_client: ClientSpec | None = None
    mockslack_client: ClientSpec | None = None
    persist_state: bool = True

    @property
    def issuer(self) -> str:
        return self.base_url.rstrip("/")

    @property
    def mockhub_issuer(self) -> str:
        return self.issuer + "/mockhub"

    @property
    def mockgoogle_issuer(self) -> str:
        return self.issuer + "/mockgoogle"

    @property
    def mockslack_url(self) -> str:
        return self.issuer + "/mockslack"

    @property
    def mockkeys_url(self) -> str:
        """Base of the MockKeys API-key service (always served): ``GET <this>/me``."""
        return self.issuer + "/mockkeys"
