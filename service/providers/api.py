"""Calls to a provider's API with a stored token. The token goes only to the provider that issued it."""

from __future__ import annotations

from typing import Any

import httpx

from service.errors import ProviderApiError
from service.providers.catalogue import ProviderConfig

MAX_PROFILE_BYTES = 256 * 1024


def auth_headers(provider: ProviderConfig, secret: str) -> dict[str, str]:
    """How the user's token (or API key) is presented to `provider`."""
    if provider.kind == "api_key":
        return {provider.api_key_header: provider.api_key_format.format(key=secret)}
    return {"Authorization": f"Bearer {secret}"}


def field_at(data: Any, dotted: str) -> Any:
    """`data["a"]["b"]` for "a.b" (Slack nests the user under `authed_user`); None when absent."""
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def did_not_answer(provider: ProviderConfig, exc: httpx.HTTPError) -> ProviderApiError:
    """The error for a request that got no answer (connection, TLS or timeout failure)."""
    return ProviderApiError(f"{provider.display_name} did not answer ({type(exc).__name__})")


def read_json(provider: ProviderConfig, response: httpx.Response) -> Any:
    """The JSON body of a provider's 2xx answer, or the ProviderApiError for its answer: the one
    rule for reading a provider's JSON (userinfo, `ProviderSession.get_json`).

    401 means the token was refused (the caller may refresh and ask again); any other non-2xx
    answer (redirects are not followed, so a 3xx is an answer too), a body over
    MAX_PROFILE_BYTES, or a body that is not JSON is an error naming only the status. The media
    type is not checked: the body is parsed as JSON whatever its label, and never rendered.
    """
    if response.status_code == 401:
        raise ProviderApiError(f"{provider.display_name} rejected the token", unauthorized=True)
    if not 200 <= response.status_code < 300 or len(response.content) > MAX_PROFILE_BYTES:
        raise ProviderApiError(f"{provider.display_name} answered HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise ProviderApiError(f"{provider.display_name} answered something that is not JSON") from None


def read_json_object(provider: ProviderConfig, response: httpx.Response) -> dict[str, Any]:
    """`read_json`, for an answer that must be a JSON object (a profile)."""
    body = read_json(provider, response)
    if not isinstance(body, dict):
        raise ProviderApiError(f"{provider.display_name} answered something that is not a JSON object")
    return body


async def fetch_userinfo(
    http: httpx.AsyncClient, provider: ProviderConfig, access_token: str
) -> dict[str, Any]:
    """GET the provider's user endpoint with the user's token; a JSON object or ProviderApiError."""
    try:
        response = await http.get(
            provider.userinfo_url,
            headers={**auth_headers(provider, access_token), "Accept": "application/json"},
        )
    except httpx.HTTPError as exc:
        raise did_not_answer(provider, exc) from None
    return read_json_object(provider, response)
