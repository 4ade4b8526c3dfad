"""mcp-url-connect's public API: what a tool package, an embedding server or a test imports.

Everything an integrator needs comes from here (and the testing kit from
`mcp_url_connect.testing`); the modules of `service`, `connect_routes` and `token_store` are the
implementation, free to change between releases. docs/api.md lists each name and what is promised
about it.
"""

from importlib.metadata import PackageNotFoundError, version

from service.app import create_app
from service.embedding.sdk import UrlConnect
from service.embedding.serving import run_server
from service.errors import ProviderFailure
from service.mcp.broker import ConnectionBroker
from service.mcp.provider_session import ProviderSession, uses
from service.mcp.tool_packages import RegisterTools, ToolPackageError
from service.settings import Settings, SettingsError, load_settings

try:
    __version__ = version("mcp-url-connect")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ConnectionBroker",
    "ProviderFailure",
    "ProviderSession",
    "RegisterTools",
    "Settings",
    "SettingsError",
    "ToolPackageError",
    "UrlConnect",
    "__version__",
    "create_app",
    "load_settings",
    "run_server",
    "uses",
]
