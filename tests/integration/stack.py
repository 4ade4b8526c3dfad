"""Our MCP server and the dev authorization server, with one third-party provider `idp` added."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from mock_providers.testing.servers import DemoServers
from service.providers.catalogue import ProviderConfig, build_provider, resolve_discovery

PROVIDER = "idp"  # the name our server knows the third-party server by: /callback/idp
OIDC_CLIENT_ID = "mcp-url-connect-it"
MOCK_CLIENT_ID = "mcp-url-connect-mock"
SECRET_ENV = f"MCPUC_PROVIDER_{PROVIDER.upper()}_CLIENT_SECRET"


@dataclass
class Stack(DemoServers):
    """The kit's demo (MCP server; dev AS + mockhub) with one third-party provider `idp` added."""

    provider: ProviderConfig | None = field(init=False, default=None)

    @property
    def redirect_uri(self) -> str:
        """What to register at the third-party server: `<public_url>/callback/idp`."""
        return self.demo.settings.callback_url(PROVIDER)

    def start(self, provider: ProviderConfig | None = None) -> Stack:
        """Start with `provider` (named `idp`, e.g. from `discovered`) next to mockhub."""
        assert provider is not None and provider.name == PROVIDER
        self.provider = provider
        self.providers = {PROVIDER: provider}
        super().start()
        return self


async def discovered(spec: dict[str, object], client_secret: str) -> ProviderConfig:
    """`build_provider` then `resolve_discovery`, as the server does at start-up."""
    provider = build_provider(PROVIDER, spec, {SECRET_ENV: client_secret})
    async with httpx.AsyncClient(timeout=10) as http:
        return await resolve_discovery(provider, http)


def oidc_provider_spec(issuer: str) -> dict[str, object]:
    """oidc-provider as a generic OpenID Connect provider: endpoints and issuer from discovery."""
    return {
        "preset": "oidc",
        "display_name": "oidc-provider",
        "discovery_url": f"{issuer}/.well-known/openid-configuration",
        "client_id": OIDC_CLIENT_ID,
        "scopes": ["openid"],
        "account_field": "sub",
        "label_field": "sub",
    }


def mock_server_spec(issuer: str, scopes: tuple[str, ...] = ()) -> dict[str, object]:
    """oauth2-mock-server as a plain OAuth 2 provider, endpoints from its discovery document.

    No scopes by default: its token response reports `scope: "dummy"` whenever the token request
    carries none (ours never does, RFC 6749 §4.1.3), and a grant reported without the scopes we
    asked for does not count as covering them (see test_oauth2_mock_server_reported_scope_is_used).
    """
    return {
        "preset": "oauth2",
        "display_name": "oauth2-mock-server",
        "discovery_url": f"{issuer}/.well-known/openid-configuration",
        "client_id": MOCK_CLIENT_ID,
        "scopes": list(scopes),
        "account_field": "sub",
        "label_field": "sub",
    }
