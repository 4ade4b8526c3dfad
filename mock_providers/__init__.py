"""Development OAuth servers for mcp-url-connect's demo and integration tests.

One Starlette app (:func:`create_mock_providers_app`) serves, on one origin:

* the development MCP authorization server (issuer = ``base_url``),
* MockHub, a GitHub-like third-party OAuth provider (issuer = ``base_url + "/mockhub"``),
* optionally MockGoogle, a Google-like OpenID provider (issuer = ``base_url + "/mockgoogle"``),
* optionally MockSlack, a Slack-like OAuth v2 provider (under ``base_url + "/mockslack"``),
* MockKeys, an API-key service (under ``base_url + "/mockkeys"``).

Their knobs and counters (on ``app.state``) are described in docs/mock-providers.md.

:func:`mint_access_token` signs dev-AS access tokens offline with the key the
server persisted in ``<data_dir>/dev-as.json``.

:mod:`mock_providers.demo` wires these servers to an MCP server's settings for
``mcp-url-connect demo`` and ``mcp-url-connect mock-providers`` (the production
packages never import this package; the CLI loads it inside those commands).
"""

from mock_providers.app import create_mock_providers_app
from mock_providers.config import ClientSpec, MockProvidersConfig
from mock_providers.dev_as.keys import NoDevKeys
from mock_providers.dev_as.tokens import mint_access_token
from mock_providers.faults import EndpointMode
from mock_providers.providers.mockgoogle.server import MockGoogle
from mock_providers.providers.mockhub.server import MockHub, TokenRequestRecord
from mock_providers.providers.mockkeys.server import MockKeys
from mock_providers.providers.mockslack.server import MockSlack

__all__ = [
    "ClientSpec",
    "EndpointMode",
    "MockGoogle",
    "MockHub",
    "MockKeys",
    "MockProvidersConfig",
    "MockSlack",
    "NoDevKeys",
    "TokenRequestRecord",
    "create_mock_providers_app",
    "mint_access_token",
]
