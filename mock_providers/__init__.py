"""Development OAuth servers for mcp-url-connect's demo and integration tests.

One Starlette app (:func:`create_mock_providers_app`) serves, on one origin:

* the development MCP authorization server (issuer = ``base_url``), and
* MockHub, a GitHub-like third-party OAuth provider (issuer = ``base_url + "/mockhub"``).

:func:`mint_access_token` signs dev-AS access tokens offline with the key the
server persisted in ``<data_dir>/dev-as.json``.
"""

from .app import create_mock_providers_app
from .config import ClientSpec, MockProvidersConfig
from .dev_keys import NoDevKeys
from .dev_tokens import mint_access_token
from .mockhub import MockHub, TokenRequestRecord

__all__ = [
    "ClientSpec",
    "MockHub",
    "MockProvidersConfig",
    "NoDevKeys",
    "TokenRequestRecord",
    "create_mock_providers_app",
    "mint_access_token",
]
