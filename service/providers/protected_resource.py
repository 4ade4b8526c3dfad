"""A remote MCP server as an OAuth protected resource: its challenge and its metadata (RFC 9728).

The MCP authorization spec (2025-11-25 basic/authorization, "Protected Resource Metadata
Discovery Requirements") has a client read the `WWW-Authenticate` challenge of a 401 (RFC 9728
§5.1: `resource_metadata`; RFC 6750 §3: `scope`, `error`), then fetch the protected-resource
metadata from the URL the challenge names, else from the well-known URLs (path-inserted, then the
root), and find its authorization servers there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from service.errors import DownstreamDiscoveryError, MetadataError
from service.providers.addresses import Resolve, require_public_downstream_address
from service.providers.discovery import fetch_metadata
from service.urls import origin

PROTECTED_RESOURCE_METADATA = "/.well-known/oauth-protected-resource"  # RFC 9728 §3
# The probes: an `initialize`, then a `tools/list`, without a token. A protected server answers one
# of them 401; some let the handshake through and protect only what follows it.
PROBES = (
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mcp-url-connect", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
)
MAX_CHALLENGE_CHARS = 4096  # a WWW-Authenticate we read: far more than any real one

# RFC 9110 §11.6.1: auth-param = token BWS "=" BWS ( token / quoted-string ). Parsed by hand: none
# of our dependencies parses challenges, and the grammar is this one expression. An unquoted value
# is read up to the next comma or space: servers send unquoted URLs, which are no `token`.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # noqa: S105 - RFC 9110 `token`, a grammar rule
_PARAM = re.compile(rf'\s*({_TOKEN})\s*=\s*([^\s,"]+|"(?:[^"\\]|\\.)*")\s*(?:,|$)')
_SCHEME = re.compile(rf"(?:^|,)\s*({_TOKEN})(?=\s+{_TOKEN}\s*=|\s*(?:,|$))")


@dataclass(frozen=True)
class Challenge:
    """The Bearer challenge of a 401 or 403 (RFC 6750 §3): what is missing, and where to look."""

    status: int
    error: str | None = None
    scope: tuple[str, ...] | None = None
    resource_metadata: str | None = None


def bearer_challenge(status: int, header: str | None) -> Challenge:
    """The `Bearer` challenge in a `WWW-Authenticate` value (absent parameters read as None)."""
    params = bearer_params(header or "")
    scope = params.get("scope")
    return Challenge(
        status=status,
        error=params.get("error"),
        scope=tuple(scope.split()) if scope is not None else None,
        resource_metadata=params.get("resource_metadata"),
    )


def bearer_params(header: str) -> dict[str, str]:
    """The auth-params of the `Bearer` challenge in `header` (RFC 9110 §11.6.1; the scheme is
    case-insensitive), unquoted; {} when there is none."""
    header = header[:MAX_CHALLENGE_CHARS]
    for scheme in _SCHEME.finditer(header):
        if scheme.group(1).lower() != "bearer":
            continue
        params: dict[str, str] = {}
        position = scheme.end()
        while (match := _PARAM.match(header, position)) is not None:
            name, value = match.group(1).lower(), match.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            params.setdefault(name, value)
            position = match.end()
        return params
    return {}


async def probe(
    http: httpx.AsyncClient, url: str, *, extensions: Mapping[str, Any] | None = None
) -> Challenge:
    """Requests without a token: a protected server's 401 names its metadata and the scopes it
    wants (the MCP spec's "Scope Selection Strategy": the initial challenge first). No 401 is no
    challenge (discovery then tries the well-known URLs)."""
    status = 0
    for body in PROBES:
        try:
            response = await http.post(
                url,
                content=json.dumps(body),
                headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
                extensions=extensions,
            )
            await response.aclose()
        except httpx.HTTPError as exc:
            raise DownstreamDiscoveryError(f"the server did not answer ({type(exc).__name__})") from None
        if response.status_code == 401:
            return bearer_challenge(401, response.headers.get("www-authenticate"))
        status = status or response.status_code
    return Challenge(status=status)


@dataclass(frozen=True)
class ProtectedResource:
    """What the metadata says about the resource (RFC 9728 §2)."""

    resource: str  # the identifier: the RFC 8707 `resource` of every token request
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None
    metadata_url: str


def metadata_candidates(url: str, challenge: Challenge) -> list[tuple[str, str]]:
    """(metadata URL, the resource identifier it must name), in the order the MCP spec asks: the
    challenge's `resource_metadata`, then the path-inserted well-known URL, then the root one
    (RFC 9728 §3.1), whose resource is the origin."""
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    candidates = []
    if challenge.resource_metadata:
        candidates.append((challenge.resource_metadata, url))
    if path:
        candidates.append((f"{base}{PROTECTED_RESOURCE_METADATA}{path}", url))
    candidates.append((f"{base}{PROTECTED_RESOURCE_METADATA}", base))
    return candidates


def require_metadata_on_resource_origin(metadata_url: str, resource_url: str) -> None:
    """The metadata URL a challenge names is on the server's own origin. RFC 9728 §7.7 warns that
    a client following `resource_metadata` makes a request where the server says; on our origin
    only, a downstream cannot point this server at another host (server-side request forgery)."""
    # mutant: gateway.metadata_on_resource_origin
    if origin(metadata_url) != origin(resource_url):
        raise DownstreamDiscoveryError("the challenge names protected-resource metadata on another origin")


def require_metadata_for_resource(document: dict[str, Any], expected: str) -> str:
    """RFC 9728 §3.3: "The resource value returned MUST be identical to the protected resource's
    resource identifier value into which the well-known URI path suffix was inserted" (or, found
    through the challenge, to the URL requested); "If these values are not identical, the data
    contained in the response MUST NOT be used". Compared as strings, no normalisation."""
    resource = document.get("resource")
    # mutant: gateway.metadata_for_resource
    if resource != expected:
        raise DownstreamDiscoveryError("the protected-resource metadata is for another resource")
    return expected


async def discover_protected_resource(
    http: httpx.AsyncClient,
    url: str,
    challenge: Challenge,
    *,
    allow_private: bool,
    resolve: Resolve,
    extensions: Mapping[str, Any] | None = None,
) -> ProtectedResource:
    """The first metadata document found among `metadata_candidates`, checked."""
    if challenge.resource_metadata:
        require_metadata_on_resource_origin(challenge.resource_metadata, url)
    last: MetadataError | None = None
    for metadata_url, expected in metadata_candidates(url, challenge):
        await require_public_downstream_address(metadata_url, allow_private=allow_private, resolve=resolve)
        try:
            document = await fetch_metadata(http, metadata_url, extensions=extensions)
        except MetadataError as exc:
            last = exc
            continue
        resource = require_metadata_for_resource(document, expected)
        servers = document.get("authorization_servers")
        if not isinstance(servers, list) or not servers or not all(isinstance(s, str) for s in servers):
            raise DownstreamDiscoveryError("the protected-resource metadata names no authorization server")
        scopes = document.get("scopes_supported")
        return ProtectedResource(
            resource=resource,
            authorization_servers=tuple(servers),
            scopes_supported=tuple(str(s) for s in scopes) if isinstance(scopes, list) else None,
            metadata_url=metadata_url,
        )
    reason = f" ({last})" if last else ""
    raise DownstreamDiscoveryError(f"no protected-resource metadata found{reason}")
