"""This server as the OAuth client of a remote MCP server's authorization server.

The MCP spec's order (2025-11-25 basic/authorization, "Client Registration Approaches"): a client
registered beforehand (the operator's `client_id`); else a Client ID Metadata Document (the client
id is the https URL of a JSON document this server publishes, draft-ietf-oauth-client-id-metadata-
document-00), when the authorization server says it fetches them; else RFC 7591 dynamic
registration, kept in the store so every replica and every restart presents the same client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from service.errors import DownstreamDiscoveryError
from service.providers.catalogue import TokenAuthMethod
from token_store import ClientRegistration

# The token endpoint authentication methods we can use, most preferred first (RFC 8414 §2: an
# authorization server that lists none supports client_secret_basic).
OUR_AUTH_METHODS: tuple[TokenAuthMethod, ...] = ("client_secret_basic", "client_secret_post", "none")
DEFAULT_AS_AUTH_METHODS = ("client_secret_basic",)
GRANT_TYPES = ("authorization_code", "refresh_token")
MAX_CLIENT_FIELD = 1024  # a client id or secret longer than this is junk, not a credential


class ClientRegistrations(Protocol):
    """Where dynamic registrations are kept: the token store (`Store`)."""

    async def get_client_registration(self, issuer: str, redirect_uri: str) -> ClientRegistration | None: ...

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration: ...

    async def remove_client_registration(self, issuer: str, redirect_uri: str, client_id: str) -> bool: ...


@dataclass(frozen=True)
class OurClient:
    """The client this server presents to the authorization server, and how it was obtained."""

    client_id: str
    client_secret: str
    token_auth_method: TokenAuthMethod
    how: str  # "pre-registered", "client id metadata document" or "dynamic registration"


def client_metadata_document(client_id: str, redirect_uri: str, client_name: str) -> dict[str, Any]:
    """Our Client ID Metadata Document (draft-ietf-oauth-client-id-metadata-document-00 §4.1): its
    `client_id` is the URL it is served at, exactly; one redirect URI, the provider's own; a public
    client (no secret can be published)."""
    return {
        "client_id": client_id,
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": list(GRANT_TYPES),
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
    }


def usable_client_metadata_url(url: str) -> bool:
    """The MCP spec: the client id URL "MUST use the https scheme and contain a path component"."""
    parts = urlsplit(url)
    return parts.scheme == "https" and bool(parts.hostname) and parts.path not in ("", "/")


def our_auth_method(supported: Sequence[str] | None) -> TokenAuthMethod:
    """The first of ours the authorization server supports."""
    offered = supported or DEFAULT_AS_AUTH_METHODS
    for method in OUR_AUTH_METHODS:
        if method in offered:
            return method
    raise DownstreamDiscoveryError(
        "the authorization server supports none of the token endpoint authentication methods "
        f"we use ({', '.join(OUR_AUTH_METHODS)})"
    )


async def register_dynamically(
    http: httpx.AsyncClient,
    endpoint: str,
    *,
    issuer: str,
    redirect_uri: str,
    client_name: str,
    scopes: Sequence[str],
    auth_methods: Sequence[str] | None,
    now: float,
    extensions: Mapping[str, Any] | None = None,
) -> ClientRegistration:
    """RFC 7591 §3.1: POST our metadata to the registration endpoint; §3.2.1 the answer."""
    method = our_auth_method(auth_methods)
    metadata: dict[str, Any] = {
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": list(GRANT_TYPES),
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "application_type": "web",  # SEP-837: a web server's client, redirect URIs on our origin
    }
    if scopes:
        metadata["scope"] = " ".join(scopes)
    try:
        response = await http.post(
            endpoint, json=metadata, headers={"Accept": "application/json"}, extensions=extensions
        )
        answer = response.json() if response.status_code in (200, 201) else None
    except (httpx.HTTPError, ValueError) as exc:
        raise DownstreamDiscoveryError(f"dynamic registration failed ({type(exc).__name__})") from None
    if not isinstance(answer, dict):
        raise DownstreamDiscoveryError(f"dynamic registration refused (HTTP {response.status_code})")
    return registration_from_answer(answer, issuer=issuer, redirect_uri=redirect_uri, asked=method, now=now)


def registration_from_answer(
    answer: dict[str, Any], *, issuer: str, redirect_uri: str, asked: TokenAuthMethod, now: float
) -> ClientRegistration:
    """The registration in an RFC 7591 §3.2.1 answer; the server may change what we asked for."""
    client_id = answer.get("client_id")
    secret = answer.get("client_secret")
    method = answer.get("token_endpoint_auth_method", asked)
    if not isinstance(client_id, str) or not 0 < len(client_id) <= MAX_CLIENT_FIELD:
        raise DownstreamDiscoveryError("dynamic registration answered without a usable client_id")
    if secret is not None and (not isinstance(secret, str) or len(secret) > MAX_CLIENT_FIELD):
        raise DownstreamDiscoveryError("dynamic registration answered with a malformed client_secret")
    if method not in OUR_AUTH_METHODS:
        raise DownstreamDiscoveryError(
            f"dynamic registration gave an authentication method we do not use ({method!r:.40})"
        )
    if method != "none" and not secret:
        raise DownstreamDiscoveryError("dynamic registration gave a confidential client without a secret")
    expires = answer.get("client_secret_expires_at")
    return ClientRegistration(
        issuer=issuer,
        redirect_uri=redirect_uri,
        client_id=client_id,
        client_secret=secret or None,
        token_endpoint_auth_method=str(method),
        registered_at=now,
        secret_expires_at=float(expires) if isinstance(expires, (int, float)) and expires > 0 else None,
    )


async def stored_or_new_registration(
    registrations: ClientRegistrations,
    register: Callable[[], Any],
    *,
    issuer: str,
    redirect_uri: str,
    now: float,
) -> ClientRegistration:
    """The registration kept for (issuer, redirect URI), else a new one, kept: when replicas race,
    each keeps whichever was stored first. One whose secret expired is replaced."""
    stored = await registrations.get_client_registration(issuer, redirect_uri)
    if stored is not None and (stored.secret_expires_at is None or stored.secret_expires_at > now):
        return stored
    if stored is not None:
        await registrations.remove_client_registration(issuer, redirect_uri, stored.client_id)
    fresh: ClientRegistration = await register()
    return await registrations.add_client_registration(fresh)
