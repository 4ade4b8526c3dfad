"""Authorization-server metadata discovery (RFC 8414 §3, OpenID Connect Discovery 1.0 §4)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx


def metadata_urls(issuer: str) -> list[str]:
    """Candidate metadata URLs for `issuer`, in the order the MCP spec asks clients to try."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if path:
        return [
            f"{origin}/.well-known/oauth-authorization-server{path}",  # RFC 8414 path insertion
            f"{origin}/.well-known/openid-configuration{path}",
            f"{origin}{path}/.well-known/openid-configuration",  # OIDC path appending
        ]
    return [f"{origin}/.well-known/oauth-authorization-server", f"{origin}/.well-known/openid-configuration"]


async def discover_metadata(http: httpx.AsyncClient, issuer: str) -> dict[str, Any]:
    """Fetch the issuer's metadata; its `issuer` must equal ours exactly (RFC 8414 §3.3)."""
    last_error: Exception | None = None
    for url in metadata_urls(issuer):
        try:
            response = await http.get(url)
        except httpx.HTTPError as exc:
            last_error = exc
            continue
        if response.status_code != 200:
            continue
        metadata = response.json()
        if not isinstance(metadata, dict) or metadata.get("issuer") != issuer:
            raise ValueError(f"metadata at {url} names another issuer")
        return metadata
    raise ValueError(f"no authorization server metadata found for {issuer}") from last_error
