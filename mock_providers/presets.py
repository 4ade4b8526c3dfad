"""The real providers' presets (`github`, `google`, `slack`) pointed at the mock providers, at the
real APIs' paths: GitHub's `GET /user` under the API base is MockHub's, Google's OpenID userinfo is
MockGoogle's, Slack's `auth.test` is MockSlack's. A tool written for the real provider runs
unchanged against them: the testing kit configures them, and so do the token-lifecycle tests.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

from mock_providers.config import ClientSpec
from mock_providers.demo import MOCKHUB_CLIENT_ID, Demo
from service.providers.catalogue import ProviderConfig, build_provider

GOOGLE_CLIENT_ID = "mcp-url-connect.apps.mockgoogle.test"
SLACK_CLIENT_ID = "1234567890.0987654321"
SLACK_BOT_SCOPES = "commands"  # a Slack app that also installs a bot: the response has both tokens
PRESET_PROVIDERS = ("github", "google", "slack")


def preset_specs(providers_url: str) -> dict[str, dict[str, Any]]:
    """`[providers.<name>]` tables for the presets, with the mocks' endpoints."""
    p = providers_url
    return {
        "github": {
            "preset": "github",
            "authorize_url": f"{p}/mockhub/authorize",
            "token_url": f"{p}/mockhub/token",
            "userinfo_url": f"{p}/mockhub/user",
            "api_base_url": f"{p}/mockhub",
            "issuer": f"{p}/mockhub",
            "client_id": MOCKHUB_CLIENT_ID,
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


def with_preset_providers(demo: Demo) -> Demo:
    """`demo` with `github`, `google` and `slack` configured from their presets and registered at
    MockHub, MockGoogle and MockSlack (fresh client secrets for the two new clients)."""
    settings, mocks = demo.settings, demo.providers
    hub_secret = settings.providers["mockhub"].client_secret
    secrets_by_name = {
        "github": hub_secret,
        "google": secrets.token_urlsafe(24),
        "slack": secrets.token_urlsafe(24),
    }
    environ = {f"MCPUC_PROVIDER_{n.upper()}_CLIENT_SECRET": s for n, s in secrets_by_name.items()}
    presets: dict[str, ProviderConfig] = {
        name: build_provider(name, spec, environ) for name, spec in preset_specs(demo.providers_url).items()
    }
    hub = mocks.mockhub_client
    mocks = replace(
        mocks,
        mockhub_client=ClientSpec(
            hub.client_id, hub.client_secret, (*hub.redirect_uris, settings.callback_url("github"))
        ),
        mockgoogle_client=ClientSpec(
            GOOGLE_CLIENT_ID, secrets_by_name["google"], (settings.callback_url("google"),)
        ),
        mockslack_client=ClientSpec(
            SLACK_CLIENT_ID, secrets_by_name["slack"], (settings.callback_url("slack"),)
        ),
    )
    settings = settings.replace(providers={**settings.providers, **presets})
    return Demo(settings, mocks)
