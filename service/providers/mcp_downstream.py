"""A remote MCP server (`kind = "mcp"`) made a provider: discovery, then registration, at start-up.

`resolve_downstream` runs the MCP authorization spec's client side once, before the server
serves (docs/gateway.md, "Discovery and registration, at start-up"): the server's challenge and
protected-resource metadata (service/providers/protected_resource.py), its authorization server's
metadata (service/providers/discovery.py), the checks below, the scopes, and this server's client
there (service/providers/registration.py). What comes out is an ordinary OAuth provider entry,
with `resource` (RFC 8707) and the recorded issuer (RFC 9207): the connect flow, refresh and
revocation then treat it like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx
from pydantic import ValidationError

from service.errors import DownstreamDiscoveryError, MetadataError
from service.providers.addresses import (
    Resolve,
    peer_checks,
    require_public_downstream_address,
    resolve_host,
)
from service.providers.catalogue import ProviderConfig, ProviderError, TokenAuthMethod, provider_error
from service.providers.discovery import discover_metadata
from service.providers.protected_resource import (
    Challenge,
    ProtectedResource,
    discover_protected_resource,
    probe,
)
from service.providers.registration import (
    ClientRegistrations,
    OurClient,
    register_dynamically,
    stored_or_new_registration,
    usable_client_metadata_url,
)

OFFLINE_ACCESS = "offline_access"  # OpenID Connect Core §11: asks for a refresh token
DOWNSTREAM_ACCOUNT = "default"  # an MCP server names no account: one connection per user and server


@dataclass(frozen=True)
class DownstreamContext:
    """What resolution needs of this server: where the browser comes back, where our Client ID
    Metadata Document is published, our name, where registrations are kept, the clock."""

    redirect_uri: str
    client_metadata_url: str
    client_name: str
    registrations: ClientRegistrations
    clock: Callable[[], float]
    resolve: Resolve = resolve_host


def choose_authorization_server(resource: ProtectedResource, pinned: str | None) -> str:
    """The pinned issuer, which the metadata must list (a downstream cannot move this server to
    another authorization server than the operator named), else the first listed (RFC 9728 §2:
    `authorization_servers`)."""
    if pinned is None:
        return resource.authorization_servers[0]
    # mutant: gateway.pinned_authorization_server
    if pinned not in resource.authorization_servers:
        raise DownstreamDiscoveryError("the protected-resource metadata does not list the pinned issuer")
    return pinned


def require_authorization_server_for_resource(metadata: dict[str, Any], resource: str) -> None:
    """An authorization server that says which resources it serves (RFC 9728 §4:
    `protected_resources` in its metadata) must name ours: one that names others is an
    authorization server for another resource, whose tokens would not be for this server."""
    served = metadata.get("protected_resources")
    # mutant: gateway.authorization_server_for_resource
    if isinstance(served, list) and resource not in served:
        raise DownstreamDiscoveryError("the authorization server does not serve this resource")


def require_pkce_s256_advertised(metadata: dict[str, Any]) -> None:
    """The MCP spec (2025-11-25 basic/authorization, "Authorization Code Protection"): "If
    `code_challenge_methods_supported` is absent, the authorization server does not support PKCE
    and MCP clients MUST refuse to proceed"; we use S256 only (RFC 7636 §4.2)."""
    methods = metadata.get("code_challenge_methods_supported")
    # mutant: gateway.pkce_s256_advertised
    if not isinstance(methods, list) or "S256" not in methods:
        raise DownstreamDiscoveryError("the authorization server does not advertise PKCE S256")


def select_scopes(
    configured: Sequence[str], challenged: Sequence[str] | None, resource_scopes: Sequence[str] | None
) -> tuple[str, ...]:
    """The MCP spec's "Scope Selection Strategy": the operator's, else the challenge's, else the
    metadata's `scopes_supported`, else none (the `scope` parameter left out)."""
    return tuple(configured) or tuple(challenged or ()) or tuple(resource_scopes or ())


def optional_scopes(chosen: Sequence[str], server_scopes: object) -> tuple[str, ...]:
    """`offline_access` when the authorization server lists it and some scope is asked for
    (2026-07-28 basic/authorization, "Refresh Tokens": clients MAY), so a refresh token can be
    issued; optional, since the server may grant it or not."""
    listed = isinstance(server_scopes, list) and OFFLINE_ACCESS in server_scopes
    return (OFFLINE_ACCESS,) if chosen and listed and OFFLINE_ACCESS not in chosen else ()


async def our_client(
    provider: ProviderConfig,
    metadata: dict[str, Any],
    issuer: str,
    scopes: Sequence[str],
    http: httpx.AsyncClient,
    context: DownstreamContext,
) -> OurClient:
    """In the MCP spec's order: pre-registered, Client ID Metadata Document, dynamic registration."""
    if provider.client_id:
        return OurClient(
            provider.client_id, provider.client_secret, provider.token_auth_method, "pre-registered"
        )
    document_url = provider.client_metadata_url or context.client_metadata_url
    if metadata.get("client_id_metadata_document_supported") is True and usable_client_metadata_url(
        document_url
    ):
        return OurClient(document_url, "", "none", "client id metadata document")
    endpoint = metadata.get("registration_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise DownstreamDiscoveryError(
            "the authorization server offers no registration (no Client ID Metadata Documents for "
            "an https client_metadata_url, no registration_endpoint): give a client_id"
        )
    await require_public_downstream_address(
        endpoint, allow_private=provider.allow_private_network, resolve=context.resolve
    )
    auth_methods = metadata.get("token_endpoint_auth_methods_supported")
    # Registered for every scope the server lists, not only those asked for first: an
    # authorization server may refuse a later step-up to a scope the client was not registered
    # for (RFC 7591 §2 `scope`: the scopes the client can use).
    advertised = metadata.get("scopes_supported")
    registered = sorted(
        {*scopes, *(s for s in advertised if isinstance(s, str))}
        if isinstance(advertised, list)
        else set(scopes)
    )

    async def register() -> Any:
        return await register_dynamically(
            http,
            endpoint,
            issuer=issuer,
            redirect_uri=context.redirect_uri,
            client_name=context.client_name,
            scopes=registered,
            auth_methods=auth_methods if isinstance(auth_methods, list) else None,
            now=context.clock(),
            extensions=peer_checks(provider.allow_private_network),
        )

    registration = await stored_or_new_registration(
        context.registrations, register, issuer=issuer, redirect_uri=context.redirect_uri, now=context.clock()
    )
    return OurClient(
        registration.client_id,
        registration.client_secret or "",
        cast(TokenAuthMethod, registration.token_endpoint_auth_method),
        "dynamic registration",
    )


async def authorization_server_moved(
    provider: ProviderConfig, challenge: Challenge, http: httpx.AsyncClient, resolve: Resolve
) -> bool:
    """Whether the downstream's protected-resource metadata, read again as at start-up (the
    challenge's `resource_metadata` on the server's own origin, else the well-known URLs; for
    this resource), no longer lists the authorization server `provider` was resolved with. The
    MCP spec (2026-07-28 basic/authorization, "Authorization Server Discovery", SEP-2352): a
    client re-discovers when a 401 comes with metadata naming another authorization server."""
    allow = provider.allow_private_network
    try:
        resource = await discover_protected_resource(
            http, provider.url, challenge, allow_private=allow, resolve=resolve, extensions=peer_checks(allow)
        )
    except DownstreamDiscoveryError as exc:
        raise ProviderError(f"providers.{provider.name}.url: {exc}") from None
    return provider.issuer not in resource.authorization_servers


async def resolve_downstream(
    provider: ProviderConfig, http: httpx.AsyncClient, context: DownstreamContext
) -> ProviderConfig:
    """`provider` (kind "mcp") with the endpoints, issuer, resource, scopes and client the flow
    needs; `ProviderError` naming the provider and the step that failed. A provider resolved
    before is resolved again from the entry as the operator wrote it (`configured`)."""
    where = f"providers.{provider.name}.url"
    try:
        return await _resolve(provider.configured or provider, http, context)
    except DownstreamDiscoveryError as exc:
        raise ProviderError(f"{where}: {exc}") from None
    except MetadataError as exc:
        raise ProviderError(f"{where}: authorization server metadata: {exc}") from None


async def _resolve(
    provider: ProviderConfig, http: httpx.AsyncClient, context: DownstreamContext
) -> ProviderConfig:
    allow = provider.allow_private_network
    checks = peer_checks(allow)  # every connection's peer, besides each URL's resolved addresses

    async def require_public(url: str) -> None:
        await require_public_downstream_address(url, allow_private=allow, resolve=context.resolve)

    await require_public(provider.url)
    challenge = await probe(http, provider.url, extensions=checks)
    resource = await discover_protected_resource(
        http, provider.url, challenge, allow_private=allow, resolve=context.resolve, extensions=checks
    )
    issuer = choose_authorization_server(resource, provider.issuer)
    await require_public(issuer)
    metadata = await discover_metadata(http, issuer, extensions=checks)
    require_pkce_s256_advertised(metadata)
    require_authorization_server_for_resource(metadata, resource.resource)
    for name in ("token_endpoint", "revocation_endpoint"):
        if isinstance(metadata.get(name), str):
            await require_public_downstream_address(
                metadata[name], allow_private=allow, resolve=context.resolve
            )
    scopes = select_scopes(provider.scopes, challenge.scope, resource.scopes_supported)
    optional = optional_scopes(scopes, metadata.get("scopes_supported"))
    client = await our_client(provider, metadata, issuer, (*scopes, *optional), http, context)
    updates = {
        "authorize_url": metadata.get("authorization_endpoint"),
        "token_url": metadata.get("token_endpoint"),
        "revocation_url": metadata.get("revocation_endpoint") or "",
        "userinfo_url": "",
        "issuer": issuer,
        "issuer_in_response": (
            "required"
            if metadata.get("authorization_response_iss_parameter_supported") is True
            else "if_present"
        ),
        "resource": resource.resource,
        "scopes": scopes,
        "optional_scopes": optional,
        "client_id": client.client_id,
        "client_secret": client.client_secret,
        "token_auth_method": client.token_auth_method,
        "configured": provider,
    }
    try:
        return ProviderConfig.model_validate({**provider.model_dump(), **updates})
    except ValidationError as exc:
        raise provider_error(exc.errors(include_input=False)[0], ("providers", provider.name)) from None
