"""The real providers' presets (`github`, `google`, `slack`) pointed at the mock providers, at the
real APIs' paths: GitHub's REST API under the API base is MockHub's, Google's OpenID userinfo and
Drive are MockGoogle's, Slack's `auth.test` and Web API are MockSlack's (each mock's API stand-in,
mock_providers/api/). A tool written for the real provider runs unchanged against them: `demo`,
the testing kit and the token-lifecycle tests configure them (`mock_providers.demo`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.providers.catalogue import ProviderConfig, build_provider

GOOGLE_CLIENT_ID = "mcp-url-connect.apps.mockgoogle.test"
SLACK_CLIENT_ID = "1234567890.0987654321"
SLACK_BOT_SCOPES = "commands"  # a Slack app that also installs a bot: the response has both tokens
PRESET_PROVIDERS = ("github", "google", "slack")


def preset_specs(providers_url: str, github_client_id: str) -> dict[str, dict[str, Any]]:
    """`[providers.<name>]` tables for the presets, with the mocks' endpoints; GitHub is served by
    MockHub, whose one client (`github_client_id`) the `mockhub` provider shares."""
    p = providers_url
    return {
        "github": {
            "preset": "github",
            "authorize_url": f"{p}/mockhub/authorize",
            "token_url": f"{p}/mockhub/token",
            "userinfo_url": f"{p}/mockhub/user",
            "api_base_url": f"{p}/mockhub",
            "issuer": f"{p}/mockhub",
            "client_id": github_client_id,
        },
        "google": {
            "preset": "google",
            "authorize_url": f"{p}/mockgoogle/authorize",
            "token_url": f"{p}/mockgoogle/token",
            "userinfo_url": f"{p}/mockgoogle/userinfo",
            "revocation_url": f"{p}/mockgoogle/revoke",
            "api_base_url": f"{p}/mockgoogle",
            "issuer": f"{p}/mockgoogle",
            "client_id": GOOGLE_CLIENT_ID,
        },
        "slack": {
            "preset": "slack",
            "authorize_url": f"{p}/mockslack/authorize",
            "token_url": f"{p}/mockslack/oauth.v2.access",
            "userinfo_url": f"{p}/mockslack/auth.test",
            "api_base_url": f"{p}/mockslack",
            "client_id": SLACK_CLIENT_ID,
            "authorize_params": {"scope": SLACK_BOT_SCOPES},
        },
    }


def preset_providers(
    providers_url: str, github_client_id: str, client_secrets: Mapping[str, str]
) -> dict[str, ProviderConfig]:
    """The three presets as providers, each with its secret from `client_secrets` (by name)."""
    environ = {f"MCPUC_PROVIDER_{n.upper()}_CLIENT_SECRET": s for n, s in client_secrets.items()}
    specs = preset_specs(providers_url, github_client_id)
    return {name: build_provider(name, spec, environ) for name, spec in specs.items()}
