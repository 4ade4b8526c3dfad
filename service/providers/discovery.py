"""Authorization-server metadata discovery (RFC 8414 §3, OpenID Connect Discovery 1.0 §4): the
one routine that fetches a metadata document, for the MCP issuer (bearer JWKS and the browser
login's authlib client, connect_routes/login.py) and for providers' `discovery_url`. Callers fetch
once and keep the result (JwksCache, the login client, start-up provider resolution).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from service.errors import MetadataError, MetadataIssuerMismatch

OAUTH_METADATA = "/.well-known/oauth-authorization-server"  # RFC 8414 §3
OPENID_METADATA = "/.well-known/openid-configuration"  # OpenID Connect Discovery 1.0 §4


def metadata_urls(issuer: str) -> list[str]:
    """Candidate metadata URLs for `issuer`, in the order the MCP spec asks clients to try
    (2025-11-25 basic/authorization, "Authorization Server Metadata Discovery")."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if path:
        return [
            f"{origin}{OAUTH_METADATA}{path}",  # RFC 8414 path insertion
            f"{origin}{OPENID_METADATA}{path}",
            f"{origin}{path}{OPENID_METADATA}",  # OIDC path appending
        ]
    return [f"{origin}{OAUTH_METADATA}", f"{origin}{OPENID_METADATA}"]


async def fetch_metadata(
    http: httpx.AsyncClient,
    url: str,
    *,
    issuer: str | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """GET one metadata document: a JSON object, whose `issuer` equals `issuer` exactly when one
    is expected (RFC 8414 §3.3: "MUST be identical ... If these values are not identical, the data
    contained in the response MUST NOT be used"). `extensions`: the request's (peer checks)."""
    try:
        response = await http.get(url, headers={"Accept": "application/json"}, extensions=extensions)
    except httpx.HTTPError as exc:
        raise MetadataError(f"metadata could not be fetched ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise MetadataError(f"metadata could not be fetched (HTTP {response.status_code})")
    try:
        metadata = response.json()
    except ValueError:
        raise MetadataError("metadata is not JSON") from None
    if not isinstance(metadata, dict):
        raise MetadataError("metadata is not a JSON object")
    if issuer is not None and metadata.get("issuer") != issuer:
        raise MetadataIssuerMismatch(f"metadata at {url} names another issuer")
    return metadata


async def discover_metadata(
    http: httpx.AsyncClient, issuer: str, *, extensions: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The issuer's metadata from the first candidate URL that serves it (`metadata_urls`)."""
    last_error: MetadataError | None = None
    for url in metadata_urls(issuer):
        try:
            return await fetch_metadata(http, url, issuer=issuer, extensions=extensions)
        except MetadataIssuerMismatch:
            raise
        except MetadataError as exc:
            last_error = exc
    raise MetadataError(f"no authorization server metadata found for {issuer}") from last_error
