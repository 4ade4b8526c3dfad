"""A remote MCP server made a provider at start-up: discovery, its checks, scopes, registration."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from service.errors import DownstreamDiscoveryError
from service.providers.catalogue import ProviderConfig, ProviderError
from service.providers.mcp_downstream import (
    DownstreamContext,
    choose_authorization_server,
    optional_scopes,
    require_authorization_server_for_resource,
    require_pkce_s256_advertised,
    resolve_downstream,
    select_scopes,
)
from service.providers.protected_resource import ProtectedResource
from service.providers.registration import (
    client_metadata_document,
    our_auth_method,
    registration_from_answer,
)
from token_store import ClientRegistration

URL = "https://mcp.example/mcp"
AS = "https://as.example"
REDIRECT = "https://gateway.example/callback/down"
CIMD = "https://gateway.example/oauth/client-metadata/down"
PRM = "https://mcp.example/.well-known/oauth-protected-resource/mcp"


@dataclass
class Registrations:
    """The store's three client-registration methods, in memory."""

    kept: dict[tuple[str, str], ClientRegistration] = field(default_factory=dict)

    async def get_client_registration(self, issuer: str, redirect_uri: str) -> ClientRegistration | None:
        return self.kept.get((issuer, redirect_uri))

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration:
        return self.kept.setdefault((registration.issuer, registration.redirect_uri), registration)

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool:
        found = self.kept.get((issuer, redirect_uri))
        if found is None or found.client_id != client_id:
            return False
        del self.kept[(issuer, redirect_uri)]
        return True


def as_metadata(**changes: Any) -> dict[str, Any]:
    return {
        "issuer": AS,
        "authorization_endpoint": f"{AS}/authorize",
        "token_endpoint": f"{AS}/token",
        "registration_endpoint": f"{AS}/register",
        "revocation_endpoint": f"{AS}/revoke",
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["read", "write", "offline_access"],
        "authorization_response_iss_parameter_supported": True,
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        **changes,
    }


@dataclass
class Downstream:
    """A remote MCP server and its authorization server, answering in process."""

    challenge: str = f'Bearer resource_metadata="{PRM}", scope="read"'
    resource: dict[str, Any] = field(
        default_factory=lambda: {
            "resource": URL,
            "authorization_servers": [AS],
            "scopes_supported": ["read", "write"],
        }
    )
    metadata: dict[str, Any] = field(default_factory=as_metadata)
    registered: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        if url == URL:
            return httpx.Response(401, headers={"WWW-Authenticate": self.challenge})
        if url == PRM:
            return httpx.Response(200, json=self.resource)
        if url == f"{AS}/.well-known/oauth-authorization-server":
            return httpx.Response(200, json=self.metadata)
        if url == f"{AS}/register":
            body = json.loads(request.content)
            self.registered.append(body)
            return httpx.Response(
                201, json={"client_id": f"client-{len(self.registered)}", "client_secret": "s3cret", **body}
            )
        return httpx.Response(404)


async def public(host: str) -> list[str]:
    return {"private.example": ["10.1.2.3"]}.get(host, ["93.184.216.34"])


async def resolved(
    downstream: Downstream, registrations: Registrations | None = None, **table: Any
) -> ProviderConfig:
    provider = ProviderConfig.model_validate({"name": "down", "kind": "mcp", "url": URL, **table})
    context = DownstreamContext(
        REDIRECT, CIMD, "mcp-url-connect", registrations or Registrations(), lambda: 1000.0, public
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(downstream.handle)) as http:
        return await resolve_downstream(provider, http, context)


async def test_a_downstream_becomes_an_oauth_provider_for_its_resource() -> None:
    downstream, registrations = Downstream(), Registrations()
    provider = await resolved(downstream, registrations)
    assert (provider.authorize_url, provider.token_url, provider.revocation_url) == (
        f"{AS}/authorize",
        f"{AS}/token",
        f"{AS}/revoke",
    )
    assert provider.resource == URL and provider.issuer == AS and provider.issuer_in_response == "required"
    assert provider.scopes == ("read",)  # the challenge's, first
    assert provider.optional_scopes == ("offline_access",)
    assert (provider.client_id, provider.client_secret, provider.token_auth_method) == (
        "client-1",
        "s3cret",
        "client_secret_basic",
    )
    [registration] = downstream.registered
    assert registration["redirect_uris"] == [REDIRECT] and registration["application_type"] == "web"
    assert set(registration["scope"].split()) == {"read", "write", "offline_access"}
    # A restart (or another replica) finds the registration kept: no second one.
    again = await resolved(downstream, registrations)
    assert again.client_id == "client-1" and len(downstream.registered) == 1


async def test_a_pre_registered_client_comes_first_then_the_client_metadata_document() -> None:
    downstream = Downstream(metadata=as_metadata(client_id_metadata_document_supported=True))
    pre = await resolved(
        downstream, client_id="mine", client_secret="x", token_auth_method="client_secret_post"
    )
    assert (pre.client_id, pre.token_auth_method) == ("mine", "client_secret_post")
    cimd = await resolved(downstream)
    assert (cimd.client_id, cimd.client_secret, cimd.token_auth_method) == (CIMD, "", "none")
    assert downstream.registered == []
    elsewhere = await resolved(downstream, client_metadata_url="https://cdn.example/ours.json")
    assert elsewhere.client_id == "https://cdn.example/ours.json"


async def test_without_a_challenge_scope_the_metadata_scopes_then_none() -> None:
    assert (await resolved(Downstream(challenge="Bearer"))).scopes == ("read", "write")
    bare = await resolved(
        Downstream(challenge="Bearer", resource={"resource": URL, "authorization_servers": [AS]})
    )
    assert bare.scopes == () and bare.optional_scopes == ()
    assert (await resolved(Downstream(), scopes=["write"])).scopes == ("write",)


@pytest.mark.parametrize(
    ("downstream", "table", "step"),
    [
        (Downstream(metadata=as_metadata(code_challenge_methods_supported=None)), {}, "PKCE S256"),
        (Downstream(metadata=as_metadata(code_challenge_methods_supported=["plain"])), {}, "PKCE S256"),
        (Downstream(metadata=as_metadata(issuer="https://other-as.example")), {}, "another issuer"),
        (
            Downstream(metadata=as_metadata(protected_resources=["https://other.example/mcp"])),
            {},
            "does not serve",
        ),
        (
            Downstream(metadata=as_metadata(token_endpoint="https://private.example/token")),
            {},
            "public addresses",
        ),
        (Downstream(metadata=as_metadata(registration_endpoint=None)), {}, "no registration"),
        (Downstream(), {"issuer": "https://pinned.example"}, "pinned issuer"),
        (
            Downstream(resource={"resource": "https://other.example/mcp", "authorization_servers": [AS]}),
            {},
            "another resource",
        ),
    ],
)
async def test_lying_or_unusable_metadata_stops_the_start(
    downstream: Downstream, table: dict[str, Any], step: str
) -> None:
    with pytest.raises(ProviderError, match=step) as raised:
        await resolved(downstream, **table)
    assert str(raised.value).startswith("providers.down.url: ")


def test_the_pinned_authorization_server_must_be_listed() -> None:
    listed = ProtectedResource(URL, (AS, "https://as2.example"), None, "")
    assert choose_authorization_server(listed, None) == AS
    assert choose_authorization_server(listed, "https://as2.example") == "https://as2.example"
    with pytest.raises(DownstreamDiscoveryError):
        choose_authorization_server(listed, "https://as3.example")


def test_an_authorization_server_for_other_resources_is_refused() -> None:
    require_authorization_server_for_resource({}, URL)
    require_authorization_server_for_resource({"protected_resources": [URL]}, URL)
    with pytest.raises(DownstreamDiscoveryError):
        require_authorization_server_for_resource({"protected_resources": ["https://x.example"]}, URL)


def test_pkce_s256_must_be_advertised() -> None:
    require_pkce_s256_advertised({"code_challenge_methods_supported": ["plain", "S256"]})
    for methods in (None, [], ["plain"], "S256"):
        with pytest.raises(DownstreamDiscoveryError):
            require_pkce_s256_advertised({"code_challenge_methods_supported": methods})


def test_scope_selection_and_offline_access() -> None:
    assert select_scopes((), ("a",), ("b",)) == ("a",)
    assert select_scopes((), None, ("b",)) == ("b",)
    assert select_scopes(("c",), ("a",), ("b",)) == ("c",)
    assert select_scopes((), None, None) == ()
    assert optional_scopes(("a",), ["a", "offline_access"]) == ("offline_access",)
    assert optional_scopes(("a",), ["a"]) == ()
    assert optional_scopes((), ["offline_access"]) == ()  # no scope parameter at all


def test_registration_answers_and_methods() -> None:
    assert our_auth_method(None) == "client_secret_basic"
    assert our_auth_method(["none"]) == "none"
    assert our_auth_method(["private_key_jwt", "client_secret_post"]) == "client_secret_post"
    with pytest.raises(DownstreamDiscoveryError):
        our_auth_method(["private_key_jwt"])
    ok = registration_from_answer(
        {"client_id": "c", "client_secret": "s", "client_secret_expires_at": 0},
        issuer=AS,
        redirect_uri=REDIRECT,
        asked="client_secret_basic",
        now=1.0,
    )
    assert ok.secret_expires_at is None and ok.token_endpoint_auth_method == "client_secret_basic"
    for bad in (
        {},
        {"client_id": ""},
        {"client_id": "c"},
        {"client_id": "c", "client_secret": "s", "token_endpoint_auth_method": "tls_client_auth"},
    ):
        with pytest.raises(DownstreamDiscoveryError):
            registration_from_answer(
                bad, issuer=AS, redirect_uri=REDIRECT, asked="client_secret_basic", now=1.0
            )


def test_the_client_metadata_document_names_itself_and_one_redirect_uri() -> None:
    document = client_metadata_document(CIMD, REDIRECT, "mcp-url-connect")
    assert document["client_id"] == CIMD and document["redirect_uris"] == [REDIRECT]
    assert document["token_endpoint_auth_method"] == "none"
